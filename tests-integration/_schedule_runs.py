"""Rank code for ``test_precision_schedule.py``: real 2-process FSDP2 fits whose precision changes mid-run.

Every fit is ``precision_base.Trainer(precision_plugin=..., strategy="auto")`` (precision-fsdp's ``FSDP2Strategy``,
gloo, CPU) on :class:`~precision_testsupport.models.TinyRegressor` (Linear(32, 32) -> GELU -> Linear(32, 1), SGD
with momentum: optimizer state that must survive the switch), 2 optimizer steps per epoch, 8 steps; checkpoints
every 2 steps (after an epoch's last batch, so a resumed run sees the batches the uninterrupted one saw). ``fits`` runs
the list ``args["runs"]`` one after another in the same two processes and returns, on rank 0, one dict per run:
the losses by step, the dtype of the first Linear's output per step, the plugin's precision, table and stats, the
``MixedPrecisionPolicy`` of every FSDP2 unit, the audit reports, warnings and the error (if any).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import seed_everything
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.distributed.tensor import DTensor

import precision_base
from precision_base import PrecisionAudit, PrecisionPluginError, PrecisionSchedule
from precision_fsdp import _compat
from precision_testsupport.launch import world_size
from precision_testsupport.models import TinyRegressor, dtype_name

MAX_STEPS = 8
STEPS_PER_EPOCH = 2


def _model() -> TinyRegressor:
    return TinyRegressor(features=32, hidden=32, samples=2 * 16 * STEPS_PER_EPOCH, batch_size=16)


def _policies(model: torch.nn.Module) -> list[list[str]]:
    out = []
    for name, module in model.named_modules():
        if isinstance(module, _compat.FSDPModule):
            policy = _compat.fsdp2_policy(module)
            param = policy.param_dtype
            reduce = _compat.policy_reduce_dtype(policy)
            out.append([name or "<root>", dtype_name(param) if param else "-", dtype_name(reduce) if reduce else "-"])
    return out


def _full(model: torch.nn.Module) -> dict[str, list[float]]:
    return {
        name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().float().flatten().tolist()
        for name, p in model.named_parameters()
    }


class _Probe(Callback):
    """What the plugin says at the start of training, before every step (precision, scaler) and after it (stats)."""

    def __init__(self) -> None:
        self.at_start: dict[str, Any] = {}
        self.per_step: dict[int, dict[str, Any]] = {}

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        plugin = trainer.precision_plugin
        self.at_start = {"precision": plugin.precision, "policies": _policies(pl_module)}

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        plugin = trainer.precision_plugin  # what step global_step runs under (after any switch)
        self.per_step[int(trainer.global_step)] = {
            "precision": plugin.precision,
            "scaler": type(plugin.scaler).__name__ if plugin.scaler is not None else None,
        }

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = int(trainer.global_step) - 1  # the schedule (listed first) may have switched already: stats of step
        self.per_step[step]["stats"] = dict(trainer.precision_plugin.precision_stats(trainer.strategy))


def schedule_and_audits(run: dict[str, Any]) -> tuple[PrecisionSchedule | None, list[PrecisionAudit]]:
    """The run's schedule (``[[key, spec], ...]``: JSON) and a strict one-step audit per ``audit_at`` step."""
    schedule = PrecisionSchedule(dict(run["schedule"])) if "schedule" in run else None
    return schedule, [PrecisionAudit(steps=1, strict=True, at_step=int(at)) for at in run.get("audit_at", [])]


def fit_recorded(
    run: dict[str, Any], root: Path, model: Any, plugin: Any, callbacks: list[Any]
) -> tuple[Any, dict[str, Any]]:
    """Fit ``model`` for ``MAX_STEPS`` on 2 CPU ranks with ``callbacks`` (plus a checkpoint every epoch when
    ``run["checkpoints"]``), resuming from ``run["resume"]``; the Trainer and what every schedule test reads: the error,
    losses by step, the plugin's precision, table and policies, the precision warnings and the final parameters."""
    if run.get("checkpoints"):
        callbacks = [
            *callbacks,
            ModelCheckpoint(dirpath=root / run["label"], every_n_train_steps=STEPS_PER_EPOCH, save_top_k=-1),
        ]
    trainer = precision_base.Trainer(
        precision_plugin=plugin,
        accelerator="cpu",
        devices=2,
        max_steps=MAX_STEPS,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=bool(run.get("checkpoints")),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
    )
    error = None
    ckpt = str(root / run["resume"]) if "resume" in run else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(model, ckpt_path=ckpt)
        except PrecisionPluginError as exc:
            error = f"{type(exc).__name__}: {exc}"
    start = int(MAX_STEPS - len(model.losses))
    plugin = trainer.precision_plugin
    return trainer, {
        "error": error,
        "losses": {start + i: loss for i, loss in enumerate(model.losses)},
        "precision": plugin.precision,
        "table": dict(plugin.dtypes().rows()),
        "policies": _policies(model),
        "warnings": sorted({str(w.message) for w in caught if "precision" in str(w.message)}),
        "params": _full(model) if error is None else {},
    }


def audited(schedule: PrecisionSchedule | None, audits: list[PrecisionAudit]) -> dict[str, Any]:
    """The audit reports and verdicts, and the steps the schedule switched at."""
    return {
        "audits": [a.report.format() if a.report is not None else None for a in audits],
        "audit_ok": [a.ok for a in audits],
        "switched_at": schedule.switched_at if schedule is not None else {},
    }


def _fit_one(run: dict[str, Any], root: Path) -> dict[str, Any]:
    world_size()  # Lightning's teardown of the previous fit deleted WORLD_SIZE
    seed_everything(7, workers=True)
    model, probe = _model(), _Probe()
    schedule, audits = schedule_and_audits(run)
    callbacks: list[Any] = [*([schedule] if schedule is not None else []), *audits, probe]
    _trainer, result = fit_recorded(run, root, model, run["spec"], callbacks)
    start = int(MAX_STEPS - len(model.losses))
    result["compute"] = {start + i: dtype_name(d) for i, d in enumerate(model.compute_dtypes)}
    return {**result, "at_start": probe.at_start, "per_step": probe.per_step, **audited(schedule, audits)}


def fits(args: dict[str, Any], fit_one: Callable[[dict[str, Any], Path], dict[str, Any]] | None = None) -> Any:
    """Every run of ``args["runs"]`` in order, in these two processes, each by ``fit_one(run, root)`` (default: this
    module's MLP fit); rank 0 returns them by label, the other ranks ``None``."""
    torch.set_num_threads(1)
    root = Path(args["out"])
    out = {}
    for run in args["runs"]:
        out[run["label"]] = (fit_one or _fit_one)(run, root)
        if run.get("checkpoints"):
            out[run["label"]]["checkpoints"] = sorted(p.name for p in (root / run["label"]).iterdir())
    return out if torch.distributed.get_rank() == 0 else None


def deepspeed_refusal(args: dict[str, Any]) -> dict[str, Any] | None:
    """A real ``deepspeed:bf16-mixed`` Trainer (precision-deepspeed's CPU strategy, ZeRO stage 2) with a schedule to
    ``32-true``: the refusal at ``setup``, the steps run (none), and the plugin's own answer to a direct switch."""
    from precision_deepspeed.errors import DeepSpeedPrecisionError

    torch.set_num_threads(1)
    world_size()
    seed_everything(7, workers=True)
    model = _model()
    schedule = PrecisionSchedule({0: "deepspeed:bf16-mixed", 0.5: "deepspeed:32-true"})
    trainer = precision_base.Trainer(
        precision_plugin="deepspeed:bf16-mixed",
        accelerator="cpu",
        devices=int(args.get("devices", 1)),
        max_steps=MAX_STEPS,
        callbacks=[schedule],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args["out"],
    )
    error = None
    try:
        trainer.fit(model)
    except PrecisionPluginError as exc:
        error = f"{type(exc).__name__}: {exc}"
    direct = None
    try:
        trainer.precision_plugin.switch_precision("32-true", model)
    except DeepSpeedPrecisionError as exc:
        direct = f"{type(exc).__name__}: {exc}"
    result = {
        "error": error,
        "direct": direct,
        "strategy": type(trainer.strategy).__name__,
        "steps_run": len(model.losses),
        "precision": trainer.precision_plugin.precision,
    }
    return result if trainer.global_rank == 0 else None
