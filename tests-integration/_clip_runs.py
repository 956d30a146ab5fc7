"""Clip-by-norm across 2 ranks: one real FSDP2 ``Trainer.fit`` step in 2 gloo processes, against the same step on
the unsharded model in one process. Run by ``test_clip_norm_across_ranks.py``.

``fit(args)`` (every rank) builds :class:`ClipNet` from a fixed seed, shards it with the plugin's ``fully_shard``
(``fsdp:32-true`` under ``ModelParallelStrategy``) and fits one step on its half of an 8-sample batch, clipping
gradients by norm (``gradient_clip_val=CLIP``) through the plugin's ``clip_gradients``. FSDP2 averages the ranks'
gradients, so the gradient each rank holds is that of the mean loss over the full batch. Rank 0 also runs the
unsharded reference: the same model, the full batch, ``torch.nn.utils.clip_grad_norm_`` in one process. It returns
the plugin's global norm, the reference norm, and the full (gathered) gradients before and after clipping of both.
"""

from __future__ import annotations

import copy
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset
from typing_extensions import override

from precision_base import Trainer
from precision_testsupport.launch import world_size

CLIP = 0.05  # far below the norm of these gradients: clipping scales them
BATCH = 8


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return torch.randn(BATCH, 16, generator=g), torch.randn(BATCH, 1, generator=g)


def _full(t: torch.Tensor) -> list[float]:
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().float().flatten().tolist()


class ClipNet(pl.LightningModule):
    """Linear(16, 24) -> GELU -> Linear(24, 1), MSE, SGD; records the full gradients around the plugin's clip."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 24), nn.GELU(), nn.Linear(24, 1))
        self.seen: dict[str, Any] = {}

    @override
    def configure_model(self) -> None:
        plugin: Any = self.trainer.precision_plugin
        mesh = self.device_mesh["data_parallel"]  # type: ignore[index]
        plugin.fully_shard(self.net[0], mesh=mesh)
        plugin.fully_shard(self.net, mesh=mesh)

    @override
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    @override
    def train_dataloader(self) -> DataLoader[Any]:
        x, y = _data()
        half = slice(self.global_rank * BATCH // 2, (self.global_rank + 1) * BATCH // 2)
        return DataLoader(TensorDataset(x[half], y[half]), batch_size=BATCH // 2)

    @override
    def configure_gradient_clipping(
        self, optimizer: torch.optim.Optimizer, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None
    ) -> None:
        grads = [p.grad for p in self.parameters()]
        self.seen["dtensor_grads"] = all(isinstance(g, DTensor) for g in grads)
        self.seen["before"] = [_full(g) for g in grads]  # type: ignore[arg-type]
        local = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
        self.seen["rank_local_norm"] = float(torch.linalg.vector_norm(torch.cat([t.flatten() for t in local])))  # type: ignore[union-attr]
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        self.seen["after"] = [_full(g) for g in grads]  # type: ignore[arg-type]
        self.seen["norm"] = self.trainer.precision_plugin._last_grad_norm  # type: ignore[attr-defined]


def _reference(model: nn.Module) -> dict[str, Any]:
    """The unsharded model in one process: full batch, mean loss, torch's clip_grad_norm_."""
    x, y = _data()
    nn.functional.mse_loss(model(x), y).backward()
    params = list(model.parameters())
    before = [_full(p.grad) for p in params]  # type: ignore[arg-type]
    norm = torch.nn.utils.clip_grad_norm_(params, CLIP)
    return {"norm": float(norm), "before": before, "after": [_full(p.grad) for p in params]}  # type: ignore[arg-type]


def fit(args: dict[str, Any]) -> dict[str, Any]:
    world_size()
    pl.seed_everything(11)
    model = ClipNet()
    reference = _reference(copy.deepcopy(model.net))  # same initial weights, before sharding
    trainer = Trainer(
        precision_plugin="fsdp:32-true",
        strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
        accelerator="cpu",
        devices=2,
        max_steps=1,
        gradient_clip_val=CLIP,
        gradient_clip_algorithm="norm",
        use_distributed_sampler=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model)
    return {"world": trainer.world_size, "rank": trainer.global_rank, "plugin": model.seen, "reference": reference}
