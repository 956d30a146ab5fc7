"""``fabric.setup(model)`` without an optimizer under DeepSpeed on CPU, one process
(``run_ranks("_deepspeed_setup_alone.py:runs", {})``): through ``precision_base.Fabric`` and through Lightning's own
``Fabric`` with the plugin and ``DeepSpeedCPUStrategy``, at ZeRO stages 2 (refused up front) and 3 (a model for
inference: set up). Rank 0 returns what each setup did."""

from __future__ import annotations

from typing import Any

import lightning.fabric as lf
import torch

from precision_base import Fabric, resolve_fabric
from precision_deepspeed.fabric import DeepSpeedCPUStrategy
from precision_testsupport.launch import world_size
from precision_testsupport.models import mlp


def _setup_alone(door: str, stage: int) -> str:
    world_size()
    strategy = DeepSpeedCPUStrategy(stage=stage)
    if door == "precision_base":
        fabric: Any = Fabric(precision_plugin="deepspeed:bf16-mixed", strategy=strategy, accelerator="cpu", devices=1)
    else:
        plugin = resolve_fabric("deepspeed:bf16-mixed")
        fabric = lf.Fabric(plugins=[plugin], strategy=strategy, accelerator="cpu", devices=1)
    fabric.launch()
    try:
        fabric.setup(mlp())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "set up"


def runs(args: dict[str, Any]) -> dict[str, Any] | None:
    torch.set_num_threads(1)
    result = {
        f"{door}:{stage}": _setup_alone(door, stage) for door in ("precision_base", "lightning") for stage in (2, 3)
    }
    return result if int(torch.distributed.get_rank()) == 0 else None
