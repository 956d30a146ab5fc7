"""Rank code for ``test_precision_monitor.py``: real 2-process fits with ``PrecisionMonitor`` and a ``CSVLogger``.

Each function runs in both ranks (started by ``precision_testsupport.launch.run_ranks``); rank 0 returns what the
test asserts on: the CSV's header and rows as written by Lightning's ``CSVLogger``, and the plugin's own numbers.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import seed_everything
from lightning.pytorch.loggers import CSVLogger

import precision_base
from precision_testsupport.launch import world_size
from precision_testsupport.models import TinyRegressor


class InfOnRankOne(TinyRegressor):
    """Fills rank 1's local gradient shards with inf after the backward of step ``inf_step`` (0-based)."""

    def __init__(self, inf_step: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inf_step = inf_step

    def on_after_backward(self) -> None:
        if self.global_step == self.inf_step and self.global_rank == 1:
            for p in self.parameters():
                if p.grad is not None:
                    grad = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                    grad.fill_(math.inf)


def read_csv(root: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Header and rows of the single ``metrics.csv`` under ``root``."""
    (path,) = root.rglob("metrics.csv")
    with path.open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def fsdp(args: dict[str, Any]) -> dict[str, Any] | None:
    """FSDP2 ``16-mixed`` in 2 processes, inf gradients on rank 1 at step ``inf_step``, logged every step."""
    world_size()
    torch.set_num_threads(1)
    seed_everything(3)
    out = Path(args["out"])
    model = InfOnRankOne(int(args["inf_step"]), hidden=16, samples=192, batch_size=16)
    trainer = precision_base.Trainer(
        precision_plugin=args.get("spec", "fsdp:16-mixed"),
        accelerator="cpu",
        devices=2,
        max_steps=int(args["steps"]),
        logger=CSVLogger(out, name="run"),
        callbacks=[precision_base.PrecisionMonitor(logging_interval=int(args.get("interval", 1)))],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1e6,  # clipping by norm computes the unscaled norm; this bound never clips
        gradient_clip_algorithm="norm",
    )
    trainer.fit(model)
    if trainer.global_rank != 0:
        return None
    header, rows = read_csv(out)
    return {"header": header, "rows": rows, "stats": dict(trainer.precision_plugin.precision_stats())}


class InfLossOnRankOne(TinyRegressor):
    """Multiplies rank 1's loss by inf at step ``inf_step`` (0-based): every gradient there is inf/NaN."""

    def __init__(self, inf_step: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inf_step = inf_step

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        if self.global_step == self.inf_step and self.global_rank == 1:
            loss = loss * math.inf
        return loss


def deepspeed(args: dict[str, Any]) -> dict[str, Any] | None:
    """DeepSpeed ZeRO-2 on its CPU accelerator in 2 processes (``strategy="auto"``), logged every step."""
    world_size()
    torch.set_num_threads(1)
    seed_everything(3)
    out = Path(args["out"])
    model = InfLossOnRankOne(int(args["inf_step"]), features=16, hidden=32, optimizer="adamw", lr=1e-2, samples=192)
    trainer = precision_base.Trainer(
        precision_plugin=precision_base.resolve(args["spec"], **args.get("options", {})),
        accelerator="cpu",
        devices=2,
        max_steps=int(args["steps"]),
        logger=CSVLogger(out, name="run"),
        callbacks=[precision_base.PrecisionMonitor()],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
    )
    trainer.fit(model)
    if trainer.global_rank != 0:
        return None
    header, rows = read_csv(out)
    return {"header": header, "rows": rows}
