"""precision-fsdp: FSDP2 (fully_shard) under Lightning's ModelParallelStrategy, 2 CPU processes, gloo.

``train`` runs in each of the 2 processes (started by ``examples/demo.py``); the model shards itself in
``configure_model`` with the plugin's ``fully_shard``: the one line that gives FSDP2 the plugin's dtypes.
"""

from __future__ import annotations

from typing import Any


def trainer_kwargs() -> dict[str, Any]:
    """Everything the demo passes to ``precision_base.Trainer`` besides the plugin name and the run's length."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    strategy = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    return {"strategy": strategy, "accelerator": "cpu", "devices": 2}


def plugin_lines(plugin: Any) -> list[str]:
    return []


def train(args: dict[str, Any]) -> dict[str, Any] | None:
    import torch
    from lightning.pytorch import seed_everything

    from precision_base import Trainer
    from precision_testsupport.models import QUIET, TinyRegressor, dtype_name

    seed_everything(0, verbose=False)
    torch.set_num_threads(1)
    model = TinyRegressor(features=16, hidden=32, lr=0.1, shard=True)  # SGD: Adam's eps underflows in 16-true
    trainer = Trainer(precision_plugin=f"fsdp:{args['precision']}", max_epochs=3, **trainer_kwargs(), **QUIET)
    trainer.fit(model)
    if trainer.global_rank != 0:
        return None
    return {
        "steps": len(model.losses),
        "loss": f"{model.losses[0]:.4f} -> {model.losses[-1]:.4f}",
        "sharded parameters": sorted({dtype_name(p.dtype) for p in model.parameters()}),
        "compute": dtype_name(model.compute_dtypes[-1]),
    }
