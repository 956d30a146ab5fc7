"""2-process DeepSpeed (ZeRO-2) training on DeepSpeed's CPU accelerator through
``precision_base.Fabric(precision_plugin="deepspeed:<precision>", strategy="auto", accelerator="cpu")``.

``run_ranks("_fabric_deepspeed.py:train_all", {"precisions": [...], "out": ...})`` trains, for each precision, an
MLP (Linear(16, 32) -> ReLU -> Linear(32, 1), AdamW) for STEPS steps on one batch, saving with ``fabric.save``
after SAVE_AT steps; a second Fabric in the same processes ``fabric.load``s that checkpoint and trains the remaining
steps. Rank 0 returns the engine's dtypes, the compute dtype seen in forward, the losses and the full fp32 weights.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from _deepspeed_helpers import _engine_facts
from lightning.fabric import seed_everything

from precision_base import Fabric
from precision_testsupport.launch import world_size
from precision_testsupport.models import dtype_name, mlp, regression_data

STEPS = 6
SAVE_AT = 3
BATCH = 8
WIDTH = 16


def _run(precision: str, *, load_from: Path | None, save_to: Path | None) -> dict[str, Any]:
    world_size()
    seed_everything(7)
    fabric = Fabric(precision_plugin=f"deepspeed:{precision}", strategy="auto", accelerator="cpu", devices=2)
    fabric.launch()
    seen: dict[str, list[str]] = {"input": [], "compute": []}
    module = mlp(features=WIDTH, hidden=32, out=1, seed=3)

    def record(layer: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
        seen["input"].append(dtype_name(args[0].dtype))
        seen["compute"].append(dtype_name(output.dtype))

    module[0].register_forward_hook(record)
    model, optimizer = fabric.setup(module, torch.optim.AdamW(module.parameters(), lr=1e-2))
    start = 0
    if load_from is not None:
        state: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": 0}
        fabric.load(load_from, state)
        start = int(state["step"])
    data = regression_data(WIDTH, samples=BATCH * 2, seed=5)
    rank = fabric.global_rank
    losses: dict[int, float] = {}
    for step in range(start, STEPS):
        x, y = data[:]  # the same batch every step, so the loss falls step by step
        x, y = fabric.to_device((x[rank::2], y[rank::2]))
        out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        fabric.backward(loss, model=model)
        optimizer.step()
        optimizer.zero_grad()
        losses[step] = fabric.all_reduce(loss.detach().float(), reduce_op="mean").item()
        if save_to is not None and step + 1 == SAVE_AT:
            fabric.save(save_to, {"model": model, "optimizer": optimizer, "step": SAVE_AT})
    plugin: Any = fabric.strategy.precision
    facts = _engine_facts(SimpleNamespace(model=fabric.strategy.model, strategy=fabric.strategy))
    return {
        **facts,
        "plugin_type": f"{type(plugin).__module__}.{type(plugin).__qualname__}",
        "strategy_type": f"{type(fabric.strategy).__module__}.{type(fabric.strategy).__qualname__}",
        "table": dict(plugin.dtypes().rows()),
        "output_dtype": dtype_name(out.dtype),
        "seen": {k: sorted(set(v)) for k, v in seen.items()},
        "losses": losses,
    }


def train_all(args: dict[str, Any]) -> dict[str, Any] | None:
    """Every precision in ``args["precisions"]``: an uninterrupted run, then a resumed one; rank 0 returns."""
    torch.set_num_threads(1)
    out = Path(args["out"])
    results: dict[str, Any] = {}
    for precision in args["precisions"]:
        ckpt = out / precision / "ckpt"
        full = _run(precision, load_from=None, save_to=ckpt)
        resumed = _run(precision, load_from=ckpt, save_to=None)
        results[precision] = {"full": full, "resumed": resumed}
    return results if int(torch.distributed.get_rank()) == 0 else None
