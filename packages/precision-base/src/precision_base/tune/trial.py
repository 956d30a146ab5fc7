"""One candidate of a precision search, in a process of its own (``python -m precision_base.tune.trial ARGS OUT``).

The search ([`precision_base.tune.search`][]) starts one such process per plugin name, with the same factory, seed,
steps and devices. Here: the factory builds the user's LightningModule (and data) after ``seed_everything``, a
``precision_base.Trainer`` with that plugin fits ``warmup + steps`` optimizer steps with a
[`PrecisionAudit`][precision_base.PrecisionAudit] of the first step, and ``OUT`` gets one JSON object: the step
times, the losses, the peak memory, the training state's bytes this process holds before the last optimizer
step (parameters, gradients, optimizer state: [`precision_base.tune.tensor_bytes`][]), the audit's verdict and,
for a run that could not train, why. Nothing is printed for the user; the search reads ``OUT``.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from precision_base.errors import PrecisionPluginError
from precision_base.tune.tensor_bytes import tensor_bytes


def load_factory(ref: str) -> Callable[[], Any]:
    """The callable ``ref`` names: ``"package.module:factory"`` or ``"path/to/file.py:factory"``.

    Raises:
        ValueError: ``ref`` has no ``:``.
        ImportError: the module or file cannot be imported.
        AttributeError: it has no such name.
        TypeError: the name is not callable.
    """
    where, sep, name = ref.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"{ref!r} is not 'module:factory' or 'path.py:factory'")
    if where.endswith(".py"):
        path = Path(where).resolve()
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None or not path.is_file():
            raise ImportError(f"no Python file at {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    factory = module
    for part in name.split("."):
        factory = getattr(factory, part)
    if not callable(factory):
        raise TypeError(f"{ref} is a {type(factory).__name__}, not a callable that returns a LightningModule")
    return factory  # type: ignore[return-value]


def split_built(built: Any, ref: str) -> tuple[Any, dict[str, Any]]:
    """The factory's result as ``(module, fit keyword arguments)``: a LightningModule (it brings its own data), a
    ``(module, dataloader or datamodule)`` pair, or a dict with ``model`` and ``datamodule`` or
    ``train_dataloaders``.

    Raises:
        TypeError: anything else, naming the factory and what it returned.
    """
    import lightning.pytorch as pl

    if isinstance(built, dict) and "model" in built:
        rest = {k: v for k, v in built.items() if k in ("datamodule", "train_dataloaders")}
        return built["model"], rest
    if isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], pl.LightningModule):
        data = built[1]
        return built[0], {"datamodule" if isinstance(data, pl.LightningDataModule) else "train_dataloaders": data}
    if isinstance(built, pl.LightningModule):
        return built, {}
    raise TypeError(
        f"the factory {ref} returned {type(built).__name__}; return a LightningModule, a (LightningModule, "
        "DataLoader or LightningDataModule) pair, or a dict with 'model' and 'datamodule' or 'train_dataloaders'"
    )


def _rss(key: str) -> int | None:
    status = Path("/proc/self/status")
    if not status.exists():
        return None
    line = next((ln for ln in status.read_text().splitlines() if ln.startswith(key + ":")), None)
    return int(line.split()[1]) * 1024 if line else None


def _reset_peak_rss() -> int | None:
    """Reset Linux's peak RSS (``VmHWM``) and return the RSS now; ``None`` where that cannot be done."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    return _rss("VmRSS")


def _loss_of(outputs: Any) -> float | None:
    value = outputs.get("loss") if isinstance(outputs, dict) else outputs
    detach = getattr(value, "detach", None)
    return float(detach().float()) if detach is not None else None


def run(args: dict[str, Any]) -> dict[str, Any]:
    """Fit the factory's module under ``args["spec"]`` for ``args["warmup"] + args["steps"]`` steps; the record."""
    import lightning.pytorch as pl
    import torch

    import precision_base

    record: dict[str, Any] = {"spec": args["spec"], "status": "ok", "reason": ""}
    try:
        factory = load_factory(args["factory"])
        pl.seed_everything(args["seed"], workers=True, verbose=False)
        module, fit_kwargs = split_built(factory(), args["factory"])
    except Exception as exc:
        first = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return {**record, "status": "failed", "factory_error": first, "reason": f"the factory {args['factory']} "
                f"failed: {first}", "traceback": traceback.format_exc()[-3000:]}  # fmt: skip
    cuda = torch.cuda.is_available() and args["accelerator"] in ("auto", "gpu", "cuda")
    sync: Callable[[], Any] = torch.cuda.synchronize if cuda else _nothing
    starts: list[float] = []
    losses: list[float | None] = []
    held: list[int] = []
    counting: list[float] = []

    class Clock(pl.Callback):
        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            sync()
            starts.append(time.perf_counter())

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            losses.append(_loss_of(outputs))

        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            if trainer.global_step == args["warmup"] + args["steps"] - 1:  # the last step: gradients and state held
                began = time.perf_counter()
                held.append(tensor_bytes(trainer.strategy.model, trainer.optimizers))
                counting.append(time.perf_counter() - began)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            sync()
            starts.append(time.perf_counter() - sum(counting))  # the count is left out of the last step's time

    audit = precision_base.PrecisionAudit(steps=1)
    before = None
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    else:
        before = _reset_peak_rss()
    started = time.perf_counter()
    trainer = None
    try:
        with tempfile.TemporaryDirectory() as root:
            trainer = precision_base.Trainer(
                precision_plugin=args["spec"], accelerator=args["accelerator"], devices=args["devices"],
                max_steps=args["warmup"] + args["steps"], limit_val_batches=0, num_sanity_val_steps=0, logger=False,
                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                callbacks=[Clock(), audit], default_root_dir=root,
            )  # fmt: skip
            trainer.fit(module, **fit_kwargs)
    except PrecisionPluginError as exc:
        record.update(status="refused" if not starts else "failed", reason=_first_line(exc))
    except Exception as exc:
        record.update(status="failed", reason=_first_line(exc), traceback=traceback.format_exc()[-3000:])
    record["fit_s"] = time.perf_counter() - started
    steps = [b - a for a, b in itertools.pairwise(starts)]
    shown = [x if x is None or math.isfinite(x) else str(x) for x in losses]  # JSON has no nan / inf
    record.update(step_s=steps[args["warmup"] :], losses=shown)
    if record["status"] != "ok":
        pass  # a run that did not train has no memory figure worth comparing
    elif cuda:
        record["peak_bytes"], record["peak_kind"] = int(torch.cuda.max_memory_allocated()), "CUDA allocator peak"
    elif before is not None and (peak := _rss("VmHWM")) is not None:
        record["peak_bytes"], record["peak_kind"] = peak - before, "peak RSS increase"
    if record["status"] == "ok" and held:
        record["tensor_bytes"] = held[0]
    record["audit_ok"] = audit.ok
    record["world_size"] = int(trainer.world_size) if trainer is not None else None
    if audit.report is not None and not audit.report.ok:
        record["audit_mismatches"] = [str(row) for row in audit.report.mismatches][:5]
    stats = getattr(getattr(trainer, "precision_plugin", None), "precision_stats", None)
    if callable(stats) and trainer is not None:
        try:
            record["skipped_steps"] = int(stats(trainer.strategy).get("skipped_steps", 0))
        except Exception:  # a plugin's stats are extra information: never a reason to lose the record
            record["skipped_steps"] = None
    if record["status"] == "ok" and len(record["step_s"]) < 1:
        record.update(status="failed", reason=f"the data gave {len(starts) - 1} steps, fewer than warmup + 1")
    return record


def _nothing() -> None:
    return None


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500]


def main(argv: list[str]) -> int:
    args_path, out_path = argv
    record = run(json.loads(Path(args_path).read_text()))
    if int(os.environ.get("RANK", "0")) == 0 and int(os.environ.get("LOCAL_RANK", "0")) == 0:  # rank 0 reports
        tmp = Path(out_path + ".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
