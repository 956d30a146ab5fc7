"""One zoo case in 2 ranks: an architecture trained by name under one plugin spec, then its whole lifecycle.

``run_ranks("_zoo_run.py:run", {"arch": "llama", "spec": "fsdp:bf16-mixed", "strategy": "default",
"door": "trainer", "lifecycle": True, "root": ...})`` runs, in the same 2 processes, every step below and returns
(rank 0) one record per step: ``{"status": "passed" | "failed" | "refused", "error": ..., ...facts}``. A step that
raises is recorded with its error and the next step still runs; a refusal is an error raised while building the
Trainer / Fabric (before any training), i.e. the plugin said up front that it cannot run the case.

Trainer door steps: ``fit`` (EPOCHS epochs, a checkpoint after each, with the dtype probe on the first step),
``validate`` / ``test`` / ``predict`` on the same Trainer; ``fresh_validate`` / ``fresh_test`` / ``fresh_predict``
on a new Trainer without ``ckpt_path`` and ``ckpt_validate`` / ``ckpt_test`` / ``ckpt_predict`` with the last
checkpoint; ``resume`` (a new Trainer resumes from the checkpoint of epoch RESUME_AFTER and must end with the same
losses and weights as the uninterrupted fit); ``export`` (FSDP: ``lightning.pytorch.utilities.consolidate_checkpoint``;
DeepSpeed: ``convert_zero_checkpoint_to_fp32_state_dict``; loaded into the plain model in rank 0 alone, weights
equal to the trained ones). Fabric door steps: ``fit`` (STEPS steps, saved with ``fabric.save`` after RESUME_AT),
``evaluate`` (``model.eval()`` forward under ``no_grad``), ``resume`` (a new Fabric ``fabric.load``-s the
checkpoint and trains to the end), ``export``.

Strategies: ``default`` (no strategy given: the plugin chooses) or ``user`` (FSDP: Lightning's
``ModelParallelStrategy`` with a ``configure_model`` that shards the blocks; DeepSpeed: a strategy built from a
DeepSpeed ``config`` dict, ZeRO stage 2).
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from zoo_models import ZooModule, build  # noqa: E402

EPOCHS = 3
RESUME_AFTER = 1  # resume from the checkpoint written at the end of epoch index 0 (after 2 steps)
FABRIC_STEPS = 6
FABRIC_RESUME_AT = 2
REDUCE_FUNCTIONS = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
                    "all_reduce_coalesced")  # fmt: skip
# Lightning's Trainer-side tool (lightning.pytorch.utilities.consolidate_checkpoint) expects FSDPStrategy's "model"
# key and raises KeyError: 'model' on a ModelParallelStrategy checkpoint, which keeps "state_dict"; the Fabric-side
# tool consolidates the same folder without renaming keys, which is what a Trainer checkpoint needs
CONSOLIDATE = "lightning.fabric.utilities.consolidate_checkpoint"
COMPUTE_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _error(exc: BaseException) -> str:
    """The exception's message, and where it was raised (the innermost frame's file, line and function)."""
    message = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-1500:]
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        where = f"{last.filename.split('site-packages/')[-1].split('/work/main/')[-1]}:{last.lineno} in {last.name}"
        message += f" (raised at {where})"
    return message


# ------------------------------------------------------------------------------------------------ measurement


class Probe:
    """Measures, by hooks on the model and on ``torch.distributed``, the dtypes one training step really used.

    ``start(model, backend, engine)`` before the step installs the hooks; ``grads(model)`` before the optimizer
    step reads the gradients the optimizer sees (FSDP); ``stop()`` after the step removes every hook. ``seen``
    holds sets of dtype names per role: ``parameters`` (the stored / master copy the optimizer updates),
    ``compute`` (outputs of every Linear / Conv), ``forward_weights`` (the weight each of those used),
    ``gradients``, ``reduction`` (the dtype of every reducing collective on more than one element: FSDP2's
    reduce-scatter, DeepSpeed's all-reduce / reduce-scatter; one-element ones are loss-scaler and norm flags),
    ``buffers`` (floating buffers, e.g. BatchNorm's running statistics). It knows nothing of kept (float32) modules:
    where a plugin keeps some (T5's ``wo`` under ``16-true``), its rows show float32 beside the table's dtype, and
    only the audit, which tells kept modules apart, judges the case.
    """

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}
        self._handles: list[Any] = []
        self._patched: dict[str, Callable[..., Any]] = {}
        self.active = False

    def _add(self, role: str, dtype: torch.dtype) -> None:
        self.seen.setdefault(role, set()).add(_name(dtype))

    def start(self, model: nn.Module, backend: str, engine: Any = None) -> None:
        self.active = True
        self.backend = backend
        for module in model.modules():
            if isinstance(module, COMPUTE_TYPES):
                self._handles.append(module.register_forward_hook(self._compute_hook))
        for buf in model.buffers():
            if buf.is_floating_point():
                self._add("buffers", buf.dtype)
        master = None
        if engine is not None:  # DeepSpeed: the optimizer's master copy
            opt = engine.optimizer
            master = getattr(opt, "single_partition_of_fp32_groups", None) or getattr(
                opt, "fp32_partitioned_groups_flat", None
            )
        if master:
            for t in master:
                self._add("parameters", t.dtype)
        else:
            for p in model.parameters():
                self._add("parameters", p.dtype)
        if backend == "deepspeed":  # the gradients backward computes (ZeRO moves them out of .grad afterwards)
            for p in model.parameters():
                if p.requires_grad:
                    self._handles.append(p.register_hook(self._grad_hook))
        import torch.distributed as dist

        for fname in REDUCE_FUNCTIONS:
            original = getattr(dist, fname, None)
            if original is None:
                continue
            self._patched[fname] = original
            setattr(dist, fname, self._recording(fname, original))

    def _compute_hook(self, module: nn.Module, args: Any, output: Any) -> None:
        out = output[0] if isinstance(output, tuple) else output
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            self._add("compute", out.dtype)
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor):
            self._add("forward_weights", weight.dtype)

    def _grad_hook(self, grad: torch.Tensor) -> None:
        self._add("gradients", grad.dtype)

    def _recording(self, fname: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            for value in [*args, *kwargs.values()]:
                tensors = value if isinstance(value, (list, tuple)) else [value]
                for t in tensors:
                    if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 1:
                        self._add("reduction", t.dtype)
                        self.seen.setdefault("collectives", set()).add(f"{fname}:{_name(t.dtype)}")
            return original(*args, **kwargs)

        return call

    def grads(self, model: nn.Module) -> None:
        if self.active and self.backend != "deepspeed":
            for p in model.parameters():
                if p.grad is not None:
                    self._add("gradients", p.grad.dtype)

    def stop(self) -> None:
        import torch.distributed as dist

        for fname, original in self._patched.items():
            setattr(dist, fname, original)
        self._patched.clear()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.active = False

    def report(self, table: dict[str, str], backend: str) -> dict[str, Any]:
        """Measured vs expected per role; ``ok`` is False where they differ."""
        expected = {
            "parameters": table["parameters"],
            "compute": table["compute"],
            # FSDP: the sharded gradient is in the sharded parameter's dtype; DeepSpeed: backward runs on the
            # module's compute copy, so its gradients are in the compute dtype
            "gradients": table["parameters"] if backend == "fsdp" else table["compute"],
            "reduction": table["reduction"],
        }
        rows = {}
        for role, want in expected.items():
            got = sorted(self.seen.get(role, set()))
            rows[role] = {"expected": want, "observed": got, "ok": got == [want]}
        for role in ("buffers", "forward_weights", "collectives"):
            rows[role] = {"expected": table.get(role), "observed": sorted(self.seen.get(role, set())), "ok": None}
        return rows


def _audit_callback() -> Any:
    """``precision_base.PrecisionAudit`` over the first step (the dtype oracle), or None where it is not installed."""
    try:
        from precision_base import PrecisionAudit
    except ImportError:
        return None
    return PrecisionAudit(steps=1)


def _dtype_problems(rec: dict[str, Any], report: Any) -> list[str]:
    """The dtype oracle's verdict: ``PrecisionAudit``'s report where there is one, else the probe's rows (the probe's
    measurements are kept in the record either way, ``rec["dtypes"]``)."""
    if report is not None:
        rec["audit"] = {"ok": report.ok, "rows": [row.as_dict() for row in report.rows],
                        "other_ranks": [[rank, row.as_dict()] for rank, row in report.other_ranks]}  # fmt: skip
        rows = [*report.mismatches, *(row for _, row in report.other_ranks)]
        return [f"audit {row.role} ({row.subject}): observed {row.observed}, expected {row.expected}" for row in rows]
    rec["audit"] = None
    return [f"{r}: observed {v['observed']}, table {v['expected']}" for r, v in rec["dtypes"].items()
            if v["ok"] is False]  # fmt: skip


def _probe_callback(probe: Probe, backend: str) -> Any:
    from lightning.pytorch.callbacks import Callback

    class ProbeCallback(Callback):
        """Runs :class:`Probe` on the first training step of the fit."""

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step == 0 and not probe.seen:
                engine = trainer.model if backend == "deepspeed" else None
                probe.start(engine.module if engine is not None else pl_module, backend, engine)

        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            probe.grads(pl_module)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if probe.active:
                probe.stop()

    return ProbeCallback()


# ------------------------------------------------------------------------------------------------ weights


def _full_weights(module: nn.Module, engine: Any = None) -> dict[str, torch.Tensor]:
    """Every parameter of ``module`` gathered in full (FSDP2 DTensors, DeepSpeed's fp32 master), on every rank."""
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in module.named_parameters():
        if engine is not None:
            from deepspeed.utils import safe_get_full_fp32_param

            t = safe_get_full_fp32_param(p)
        else:
            t = p.full_tensor() if isinstance(p, DTensor) else p
        out[name.removeprefix("_forward_module.")] = t.detach().float().clone()
    return out


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    missing = set(a) ^ set(b)
    if missing:
        raise AssertionError(f"parameter names differ: {sorted(missing)[:6]}")
    return max(float((a[k] - b[k].float()).abs().max()) for k in a)


# ------------------------------------------------------------------------------------------------ the Trainer door


def _strategy(backend: str, kind: str) -> Any:
    if kind == "default":
        return "auto"
    if backend == "fsdp":
        from lightning.pytorch.strategies import ModelParallelStrategy

        return ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    from precision_deepspeed import DeepSpeedCPUStrategy

    config = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0}
    return DeepSpeedCPUStrategy(config=config)


def _trainer(args: dict[str, Any], root: Path, callbacks: list[Any], epochs: int = EPOCHS) -> Any:
    import precision_base
    from precision_testsupport.launch import world_size

    world_size()  # Lightning's teardown of the previous Trainer deleted WORLD_SIZE
    backend = args["spec"].split(":")[0]
    return precision_base.Trainer(
        precision_plugin=args["spec"], strategy=_strategy(backend, args["strategy"]), accelerator="cpu", devices=2,
        max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, default_root_dir=str(root), callbacks=callbacks, deterministic=True,
    )  # fmt: skip


def _module(args: dict[str, Any]) -> ZooModule:
    from lightning.pytorch import seed_everything

    seed_everything(0, workers=True)
    return ZooModule(args["arch"], shard_blocks=args["strategy"] == "user" and args["spec"].startswith("fsdp"))


class Steps:
    """Runs the steps of a case, recording each; a raise while building is a refusal, later a failure."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[dict[str, Any]]:
        record: dict[str, Any] = {"status": "passed"}
        self.records[name] = record
        try:
            yield record
        except Refused as exc:
            record.update(status="refused", error=_error(exc.__cause__ or exc))
        except Exception as exc:
            record.update(status="failed", error=_error(exc))


class Refused(Exception):
    """Building the Trainer / Fabric raised: the plugin refused the case up front."""


def _build(make: Callable[[], Any]) -> Any:
    try:
        return make()
    except Exception as exc:
        raise Refused(str(exc)) from exc


def _trainer_door(args: dict[str, Any], root: Path) -> dict[str, Any]:
    from lightning.pytorch.callbacks import ModelCheckpoint

    backend = args["spec"].split(":")[0]
    steps = Steps()
    probe = Probe()
    ckpt_dir = root / "ckpt"
    facts: dict[str, Any] = {}
    trainer = model = None
    with steps.step("fit") as rec:
        saver = ModelCheckpoint(dirpath=ckpt_dir, every_n_epochs=1, save_top_k=-1, save_on_train_epoch_end=True)
        model = _module(args)
        audit = _audit_callback()
        callbacks = [saver, _probe_callback(probe, backend), *([audit] if audit is not None else [])]
        trainer = _build(lambda: _trainer(args, root / "fit", callbacks))
        table = dict(trainer.precision_plugin.dtypes().rows())
        rec["table"] = table
        rec["strategy"] = type(trainer.strategy).__name__
        trainer.fit(model)
        engine = trainer.model if backend == "deepspeed" else None
        facts["weights"] = _full_weights(engine.module if engine is not None else model, engine)
        rec["losses"] = model.losses
        rec["dtypes"] = probe.report(table, backend)
        finite = all(math.isfinite(x) for x in model.losses)
        per_epoch = len(model.losses) // EPOCHS
        first, last = model.losses[:per_epoch], model.losses[-per_epoch:]
        rec["loss_fell"] = sum(last) < sum(first)
        problems = _dtype_problems(rec, audit.report if audit is not None else None)
        if not finite or not rec["loss_fell"]:
            problems.append(f"loss not finite or did not fall: {model.losses}")
        if problems:
            rec.update(status="failed", error="; ".join(problems))
    if not args.get("lifecycle") or steps.records["fit"]["status"] == "refused" or trainer is None:
        return steps.records
    ckpts = sorted(ckpt_dir.glob("*.ckpt"), key=lambda p: int(p.name.split("epoch=")[1].split("-")[0]))
    last_ckpt = str(ckpts[-1]) if ckpts else None
    for stage in ("validate", "test", "predict"):
        with steps.step(stage) as rec:
            out = getattr(trainer, stage)(model)
            rec["result"] = _summary(out)
    for stage in ("validate", "test", "predict"):
        for with_ckpt in (False, True):
            with steps.step(f"{'ckpt' if with_ckpt else 'fresh'}_{stage}") as rec:
                if with_ckpt and last_ckpt is None:
                    raise AssertionError("fit wrote no checkpoint")
                fresh = _build(lambda where=root / stage: _trainer(args, where, []))
                out = getattr(fresh, stage)(_module(args), ckpt_path=last_ckpt if with_ckpt else None)
                rec["result"] = _summary(out)
    with steps.step("resume") as rec:
        if len(ckpts) < EPOCHS:
            raise AssertionError(f"fit wrote {len(ckpts)} checkpoints, expected {EPOCHS}")
        resumed_model = _module(args)
        resumer = _build(lambda: _trainer(args, root / "resume", []))
        resumer.fit(resumed_model, ckpt_path=str(ckpts[RESUME_AFTER - 1]))
        engine = resumer.model if backend == "deepspeed" else None
        weights = _full_weights(engine.module if engine is not None else resumed_model, engine)
        full_losses = steps.records["fit"].get("losses", [])
        tail = full_losses[len(full_losses) - len(resumed_model.losses) :]
        rec["losses"], rec["uninterrupted_tail"] = resumed_model.losses, tail
        rec["max_weight_diff"] = _max_diff(facts["weights"], weights)
        if resumed_model.losses != tail or rec["max_weight_diff"] != 0.0:
            rec.update(status="failed", error=f"resumed != uninterrupted: losses {resumed_model.losses} vs {tail}, "
                       f"max weight difference {rec['max_weight_diff']:.3g}")  # fmt: skip
    with steps.step("export") as rec:
        if last_ckpt is None:
            raise AssertionError("fit wrote no checkpoint")
        rec.update(_export(backend, Path(last_ckpt), root, args["arch"], facts["weights"]))
        if rec["max_weight_diff"] != 0.0:
            diff = rec["max_weight_diff"]
            rec.update(status="failed", error=f"exported weights differ from the trained ones by {diff:.3g}")
    return steps.records


def _summary(out: Any) -> Any:
    if isinstance(out, list) and out and isinstance(out[0], dict):
        return [{k: float(v) for k, v in d.items()} for d in out]
    if isinstance(out, list):
        return {"batches": len(out)}
    return None


def _export(backend: str, ckpt: Path, root: Path, arch: str, trained: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Rank 0 alone: the checkpoint exported with the backend's tool, loaded into the plain model."""
    import torch.distributed as dist

    try:
        return _export_rank0(backend, ckpt, root, arch, trained) if dist.get_rank() == 0 else {}
    finally:
        dist.barrier()  # every rank waits for rank 0's export, also when it raised


def _single_process_env() -> dict[str, str]:
    drop = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _export_rank0(backend: str, ckpt: Path, root: Path, arch: str, trained: dict[str, torch.Tensor]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    target = root / "exported.pt"
    if backend == "fsdp":
        tool = CONSOLIDATE
        if ckpt.is_dir():
            proc = subprocess.run(
                [sys.executable, "-m", tool, str(ckpt), "--output_file", str(target)],
                capture_output=True,
                text=True,
                env=_single_process_env(),
            )
            if proc.returncode != 0:
                raise RuntimeError(f"{tool} exited {proc.returncode}: {proc.stderr[-1500:]}")
            out["tool"] = tool
        else:  # a single-file checkpoint needs no consolidation
            target = ckpt
            out["tool"] = "none (single file)"
        loaded_ckpt = torch.load(target, map_location="cpu", weights_only=False)
        state = loaded_ckpt["state_dict"] if "state_dict" in loaded_ckpt else loaded_ckpt["model"]
    else:
        from lightning.pytorch.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

        convert_zero_checkpoint_to_fp32_state_dict(str(ckpt), str(target))
        out["tool"] = "convert_zero_checkpoint_to_fp32_state_dict"
        state = torch.load(target, map_location="cpu", weights_only=False)["state_dict"]
    plain = ZooModule(arch)
    plain.load_state_dict(state)
    loaded = {n: p.detach().float() for n, p in plain.named_parameters()}
    out["max_weight_diff"] = _max_diff(trained, loaded)
    return out


# ------------------------------------------------------------------------------------------------ the Fabric door


def _fabric(args: dict[str, Any]) -> Any:
    import precision_base
    from precision_testsupport.launch import world_size

    world_size()
    return precision_base.Fabric(precision_plugin=args["spec"], accelerator="cpu", devices=2)


def _fabric_setup(fabric: Any, backend: str) -> tuple[Any, Any]:
    from lightning.fabric import seed_everything

    seed_everything(0)
    net = build("litgpt")
    if backend == "deepspeed":
        return fabric.setup(net, torch.optim.AdamW(net.parameters(), lr=3e-3))
    model = fabric.setup_module(net)
    half = any(p.dtype == torch.float16 for p in model.parameters())  # 16-true: eps=1e-8 rounds to 0 in float16
    return model, fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=3e-3, eps=1e-4 if half else 1e-8))


def _fabric_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logits = model(batch["input_ids"])
    return nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)).float(), batch["labels"][:, 1:].reshape(-1)
    )


def _fabric_train(fabric: Any, model: Any, opt: Any, batches: list[Any], first: int, last: int, probe: Probe | None,
                  backend: str) -> list[float]:  # fmt: skip
    losses = []
    for i in range(first, last):
        batch = batches[i % len(batches)]
        if probe is not None and i == 0:
            inner = model.module if hasattr(model, "module") else model
            probe.start(inner, backend, model._forward_module if backend == "deepspeed" else None)
        loss = _fabric_loss(model, batch)
        fabric.backward(loss)
        if probe is not None and probe.active:
            probe.grads(model)
        opt.step()
        opt.zero_grad()
        if probe is not None and probe.active:
            probe.stop()
        losses.append(float(loss.detach()))
    return losses


def _fabric_door(args: dict[str, Any], root: Path) -> dict[str, Any]:
    from torch.utils.data import DataLoader
    from zoo_models import ZooData

    backend = args["spec"].split(":")[0]
    steps = Steps()
    probe = Probe()
    ckpt = root / "fabric-ckpt"
    facts: dict[str, Any] = {}
    with steps.step("fit") as rec:
        fabric = _build(lambda: _fabric(args))
        fabric.launch()
        rank_data = list(DataLoader(ZooData("tokens"), batch_size=4))[fabric.global_rank :: 2]
        batches = [fabric.to_device(b) for b in rank_data]
        model, opt = _fabric_setup(fabric, backend)
        table = dict(fabric.strategy.precision.dtypes().rows())
        rec["table"], rec["strategy"] = table, type(fabric.strategy).__name__
        try:
            from precision_base import audit_fabric_steps
        except ImportError:
            audit_fabric_steps = None
        if audit_fabric_steps is not None:
            with audit_fabric_steps(fabric, model, opt, steps=1) as fabric_audit:
                losses = _fabric_train(fabric, model, opt, batches, 0, 1, probe, backend)
            losses += _fabric_train(fabric, model, opt, batches, 1, FABRIC_RESUME_AT, None, backend)
        else:
            fabric_audit = None
            losses = _fabric_train(fabric, model, opt, batches, 0, FABRIC_RESUME_AT, probe, backend)
        fabric.save(ckpt, {"model": model, "optimizer": opt})
        losses += _fabric_train(fabric, model, opt, batches, FABRIC_RESUME_AT, FABRIC_STEPS, None, backend)
        engine = model._forward_module if backend == "deepspeed" else None
        facts["weights"] = _full_weights(engine.module if engine is not None else model, engine)
        rec["losses"], rec["dtypes"] = losses, probe.report(table, backend)
        per = len(batches)
        rec["loss_fell"] = sum(losses[-per:]) < sum(losses[:per])
        problems = _dtype_problems(rec, fabric_audit.report if fabric_audit is not None else None)
        if not all(math.isfinite(x) for x in losses) or not rec["loss_fell"]:
            problems.append(f"loss not finite or did not fall: {losses}")
        if problems:
            rec.update(status="failed", error="; ".join(problems))
    if steps.records["fit"]["status"] == "refused" or "weights" not in facts:
        return steps.records
    with steps.step("evaluate") as rec:
        model.eval()
        with torch.no_grad():
            rec["loss"] = float(_fabric_loss(model, batches[0]))
        model.train()
        if not math.isfinite(rec["loss"]):
            raise AssertionError(f"eval loss {rec['loss']}")
    with steps.step("resume") as rec:
        fabric2 = _fabric(args)
        fabric2.launch()
        model2, opt2 = _fabric_setup(fabric2, backend)
        fabric2.load(ckpt, {"model": model2, "optimizer": opt2})
        resumed = _fabric_train(fabric2, model2, opt2, batches, FABRIC_RESUME_AT, FABRIC_STEPS, None, backend)
        engine = model2._forward_module if backend == "deepspeed" else None
        weights = _full_weights(engine.module if engine is not None else model2, engine)
        tail = steps.records["fit"]["losses"][FABRIC_RESUME_AT:]
        rec["losses"], rec["max_weight_diff"] = resumed, _max_diff(facts["weights"], weights)
        if resumed != tail or rec["max_weight_diff"] != 0.0:
            rec.update(status="failed", error=f"resumed != uninterrupted: losses {resumed} vs {tail}, "
                       f"max weight difference {rec['max_weight_diff']:.3g}")  # fmt: skip
    return steps.records


def run(args: dict[str, Any]) -> dict[str, Any]:
    """Entry point of each rank; rank 0's return value is the case's record."""
    import time

    root = Path(args["root"])
    root.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    torch.use_deterministic_algorithms(True, warn_only=True)
    records = _fabric_door(args, root) if args.get("door") == "fabric" else _trainer_door(args, root)
    return {"case": {k: v for k, v in args.items() if k != "root"}, "steps": records,
            "seconds": round(time.monotonic() - start, 1)}  # fmt: skip
