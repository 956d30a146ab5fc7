"""Rank code for ``test_precision_schedule_fp8.py``: real 2-process FSDP2 fits that switch away from fp8 mid-run.

Every fit is ``precision_base.Trainer(precision_plugin=resolve(spec, fp8_emulate=True), strategy="auto")``
(precision-fsdp's ``FSDP2Strategy``, gloo, CPU, torchao's fp8 emulation) on :class:`Mlp`: Linear(16, 32) -> GELU ->
Linear(32, 32) -> GELU -> Linear(32, 32) -> GELU -> Linear(32, 1), each Linear its own FSDP2 unit; the default fp8
filter converts the two middle ones. 32 tokens per rank and step (MXFP8's block), AdamW (two state tensors per
parameter), 2 optimizer steps per epoch, 8 steps; checkpoints every 2 steps. ``fits`` runs ``args["runs"]`` one
after another in the same two processes and returns, on rank 0, one dict per run: losses by step, the class of each
Linear and the type of each weight's local shard before and after every step's end (the schedule switches between
the two), the optimizer state's tensors (ids, storage, values), the dtypes FSDP2 all-gathered per step, the
policies, the audit reports and the final parameters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _schedule_runs
import lightning.pytorch as pl
import torch
import torch.distributed as dist
from _schedule_runs import STEPS_PER_EPOCH, audited, fit_recorded, schedule_and_audits
from lightning.pytorch import seed_everything
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader

import precision_base
from precision_testsupport.launch import world_size
from precision_testsupport.models import regression_data

BATCH = 32


class Mlp(pl.LightningModule):
    """The middle Linear layers are bias-free with ``bias_free`` (torchao's MXFP8 weight wrapper drops a bias, so the
    plugin converts only bias-free layers to MXFP8)."""

    def __init__(self, bias_free: bool = False) -> None:
        super().__init__()
        middle = [nn.Linear(32, 32, bias=not bias_free) for _ in range(2)]
        self.net = nn.Sequential(
            nn.Linear(16, 32), nn.GELU(), middle[0], nn.GELU(), middle[1], nn.GELU(), nn.Linear(32, 1)
        )
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x).float(), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=5e-3)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(regression_data(16, 2 * BATCH * STEPS_PER_EPOCH, 3), batch_size=BATCH, shuffle=False)


def _local(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if isinstance(p, DTensor) else p


class _Snapshot(Callback):
    """At every step's end (listed before the schedule: before its switch; after it: after), the model's layers,
    weights and optimizer state."""

    def __init__(self) -> None:
        self.at: dict[int, dict[str, Any]] = {}

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        optimizer = trainer.optimizers[0]
        params = dict(pl_module.named_parameters())
        state = [(n, optimizer.state[p]) for n, p in params.items() if p in optimizer.state]
        self.at[int(trainer.global_step)] = {
            "precision": trainer.precision_plugin.precision,
            "classes": {n: type(m).__name__ for n, m in pl_module.net.named_children() if isinstance(m, nn.Linear)},
            "local_types": {n: type(_local(p)).__name__ for n, p in params.items()},
            "param_ids": {n: id(p) for n, p in params.items()},
            "in_optimizer": all(
                any(p is q for g in optimizer.param_groups for q in g["params"]) for p in params.values()
            ),
            "state": {
                f"{n}.{k}": [id(v), _local(v).untyped_storage().data_ptr(), float(_local(v).float().abs().sum())]
                for n, s in state
                for k, v in s.items()
                if isinstance(v, torch.Tensor) and v.dim() > 0
            },
        }


class _AllGatherDtypes(Callback):
    """The input dtypes of FSDP2's all-gathers (``dist.all_gather_single``), per optimizer step."""

    def __init__(self) -> None:
        self.by_step: dict[int, list[str]] = {}
        self._original: Any = None
        self._step = 0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._original = dist.all_gather_single

        def counting(output: torch.Tensor, input: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            seen = self.by_step.setdefault(self._step, [])
            if str(input.dtype) not in seen:
                seen.append(str(input.dtype))
            return self._original(output, input, *args, **kwargs)

        dist.all_gather_single = counting

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._step = int(trainer.global_step)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        dist.all_gather_single = self._original


def _fit_one(run: dict[str, Any], root: Path) -> dict[str, Any]:
    world_size()  # Lightning's teardown of the previous fit deleted WORLD_SIZE
    seed_everything(7, workers=True)
    model, before, after, gathers = Mlp(bool(run.get("bias_free"))), _Snapshot(), _Snapshot(), _AllGatherDtypes()
    schedule, audits = schedule_and_audits(run)
    callbacks: list[Any] = [before, *([schedule] if schedule is not None else []), after, gathers, *audits]
    plugin = precision_base.resolve(run["spec"], fp8_emulate=True)
    _trainer, result = fit_recorded(run, root, model, plugin, callbacks)
    extra = {"before": before.at, "after": after.at, "gathered": gathers.by_step}
    return {**result, **extra, **audited(schedule, audits)}


def fits(args: dict[str, Any]) -> Any:
    """Every run of ``args["runs"]`` in order, each this module's fp8 fit (``_schedule_runs.fits``)."""
    return _schedule_runs.fits(args, _fit_one)
