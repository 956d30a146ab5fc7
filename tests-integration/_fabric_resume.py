"""2-process Fabric runs that save and resume a loop's whole state (``run_ranks("_fabric_resume.py:runs", ...)``).

For each checkpoint layout (``folder``: ``FSDP2Strategy``'s default, ``save_distributed_checkpoint=True``; ``file``:
``save_distributed_checkpoint=False``) a loop trains STEPS steps under ``precision_base.Fabric(precision_plugin=
"fsdp:32-true", strategy=FSDP2Strategy(...))``, its state being what an open-source pretraining loop keeps: the
model, the optimizer, a stateful data cursor (``state_dict`` / ``load_state_dict``, as torchdata's
``StatefulDataLoader``) and a step counter. Then the same loop saves at SAVE_AT, a new Fabric loads the checkpoint
into a fresh model, optimizer and cursor, and trains the remaining steps. Rank 0 returns both runs' losses and where
the cursor stood after the load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric import seed_everything

from precision_base import Fabric
from precision_fsdp.fabric import FSDP2Strategy
from precision_testsupport.launch import world_size
from precision_testsupport.models import mlp, regression_data

STEPS = 6
SAVE_AT = 3
BATCH = 8
WIDTH = 16


class Cursor:
    """Where the loop is in its data: a stateful object of the loop's own, like a stateful dataloader."""

    def __init__(self, data: Any, rank: int) -> None:
        self.data, self.rank, self.position = data, rank, 0

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        start = (self.position * 2 + self.rank) * BATCH
        self.position += 1
        x, y = self.data[start : start + BATCH]
        return x, y

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])


def _loop(layout: str, *, stop_at: int | None, load_from: Path | None, save_to: Path | None) -> dict[str, Any]:
    world_size()  # Fabric's teardown may have deleted WORLD_SIZE
    seed_everything(11)
    strategy = FSDP2Strategy(save_distributed_checkpoint=layout == "folder")
    fabric = Fabric(precision_plugin="fsdp:32-true", strategy=strategy, accelerator="cpu", devices=2)
    fabric.launch()
    model = fabric.setup_module(mlp(features=WIDTH, hidden=WIDTH, out=1, seed=3))
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    cursor = Cursor(regression_data(WIDTH, samples=BATCH * 2 * STEPS, seed=5), fabric.global_rank)
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "cursor": cursor, "step": 0}
    loaded_at = None
    if load_from is not None:
        fabric.load(load_from, state)
        loaded_at = {"cursor_position": cursor.position, "state_cursor_is_the_loop_cursor": state["cursor"] is cursor}
    losses: dict[int, float] = {}
    while state["step"] < (stop_at if stop_at is not None else STEPS):
        x, y = cursor.next_batch()
        loss = torch.nn.functional.mse_loss(model(x).float().squeeze(-1), y.float())
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses[state["step"]] = float(fabric.all_reduce(loss.detach(), reduce_op="mean"))
        state["step"] += 1
    if save_to is not None:
        fabric.save(save_to, state)
    return {"losses": losses, "loaded": loaded_at, "saved_as": None if save_to is None else
            ("folder" if save_to.is_dir() else "file")}  # fmt: skip


def runs(config: dict[str, Any]) -> dict[str, Any]:
    out = Path(config["out"])
    result = {}
    for layout in config["layouts"]:
        whole = _loop(layout, stop_at=None, load_from=None, save_to=None)
        checkpoint = out / f"{layout}.ckpt"
        first = _loop(layout, stop_at=SAVE_AT, load_from=None, save_to=checkpoint)
        resumed = _loop(layout, stop_at=None, load_from=checkpoint, save_to=None)
        result[layout] = {"whole": whole, "first": first, "resumed": resumed}
    return result
