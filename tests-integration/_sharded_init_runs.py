"""Rank code for ``test_sharded_init.py``: a model initialised after FSDP2 sharded it over a 2-process CPU mesh (gloo).

Each run returns, per parameter, whether the two ranks' shards are equal, and the full (gathered) values next to
those of the same model created unsharded from the same seed and initialised the same way (``to_empty``, then each
module's ``reset_parameters`` in ``modules()`` order, as Lightning materialises a model):

* ``fabric-empty-init``: ``precision_base.Fabric(precision_plugin="fsdp:32-true")`` (its ``FSDP2Strategy``),
  ``fabric.init_module(empty_init=True)`` then ``fabric.setup_module``;
* ``trainer-empty-init``: ``precision_base.Trainer(precision_plugin="fsdp:32-true")``, the model created under
  ``trainer.init_module(empty_init=True)``, one training step;
* ``lightning-empty-init``: Lightning's own ``ModelParallelStrategy`` with a ``parallelize_fn`` (the plugin's
  ``fully_shard``), so Lightning materialises the model: its shards repeat each other; the plugin warns at the first
  optimizer step;
* ``loop-init``: ``FSDP2Strategy``, then the loop's own init after ``setup_module`` (``nn.init.normal_`` on the
  sharded parameters): the plugin warns at the first optimizer step.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from lightning.fabric import seed_everything
from lightning.fabric.strategies import ModelParallelStrategy
from lightning.pytorch import LightningModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import precision_base
from precision_fsdp import _compat
from precision_testsupport.launch import world_size
from precision_testsupport.models import QUIET

VOCAB, WIDTH = 32, 16


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        out: torch.Tensor = self.head(x)
        return out


def reference(seed: int) -> dict[str, list[float]]:
    """The unsharded model, materialised from the meta device as Lightning does, from the same seed."""
    with torch.device("meta"):
        model = TinyLM()
    seed_everything(seed)
    model.to_empty(device="cpu")
    for module in model.modules():
        if any(True for _ in module.parameters(recurse=False)):
            module.reset_parameters()  # type: ignore[operator]
    return {name: p.detach().flatten().tolist() for name, p in model.named_parameters()}


def shards(model: nn.Module) -> dict[str, Any]:
    """Per parameter: both ranks' shards equal?, and the full values."""
    out: dict[str, Any] = {}
    for name, p in model.named_parameters():
        local = _compat.local_tensor(p).detach()
        both = [torch.empty_like(local) for _ in range(2)]
        torch.distributed.all_gather(both, local.contiguous())
        out[name] = {"same": bool(torch.equal(both[0], both[1])), "full": p.full_tensor().detach().flatten().tolist()}
    return out


def _batch() -> torch.Tensor:
    return torch.randint(0, VOCAB, (4, 8), generator=torch.Generator().manual_seed(1))


def _fabric(run: str) -> dict[str, Any]:
    world_size()  # Fabric's teardown may have deleted WORLD_SIZE
    strategy: Any = "auto"
    if run == "lightning-empty-init":

        def parallelize(module: nn.Module, mesh: Any) -> nn.Module:
            plugin = fabric.strategy.precision
            for block in module.blocks:
                plugin.fully_shard(block, mesh=mesh["data_parallel"])
            return plugin.fully_shard(module, mesh=mesh["data_parallel"])  # type: ignore[no-any-return]

        strategy = ModelParallelStrategy(parallelize, data_parallel_size=2, tensor_parallel_size=1)
    fabric = precision_base.Fabric(precision_plugin="fsdp:32-true", strategy=strategy, accelerator="cpu", devices=2)
    fabric.launch()
    seed_everything(7)
    with fabric.init_module(empty_init=run != "loop-init"):
        model = TinyLM()
    model = fabric.setup_module(model)
    if run == "loop-init":
        seed_everything(7)
        with torch.no_grad():
            for p in model.parameters():
                nn.init.normal_(p, std=0.02)
    seen = shards(model.module)
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.01))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids = _batch()
        fabric.backward(model(ids).float().mean())
        optimizer.step()
    named = [str(w.message) for w in caught if "same values on every rank" in str(w.message)]
    return {"shards": seen, "warnings": named}


class Holder(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = TinyLM()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).float().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(TensorDataset(_batch()), batch_size=4)


def _trainer() -> dict[str, Any]:
    trainer = precision_base.Trainer(
        precision_plugin="fsdp:32-true", accelerator="cpu", devices=2, max_steps=1, **QUIET
    )
    seed_everything(7)
    with trainer.init_module(empty_init=True):
        model = Holder()
    trainer.fit(model)  # lr=0: the step leaves the initial values
    seen = shards(model.net)
    return {"shards": {name: seen[name] for name in seen}, "warnings": []}


def runs(args: dict[str, Any]) -> dict[str, Any] | None:
    torch.set_num_threads(1)
    out: dict[str, Any] = {"reference": reference(7)}
    for run in args["runs"]:
        out[run] = _trainer() if run == "trainer-empty-init" else _fabric(run)
    return out if torch.distributed.get_rank() == 0 else None
