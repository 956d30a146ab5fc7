"""Rank code for ``test_rotary_tables.py``: a decoder whose root passes float32 rotary tables into its blocks, trained
for a few steps by 2 processes (gloo, CPU) through each door, each block recording what it was handed.

The decoder is written as open-source pretraining loops write theirs (litgpt's ``apply_rope``): the root holds
``cos`` / ``sin`` tables as float32 buffers and passes slices of them to every block; a block rotates its queries and
keys in the dtype the product promotes to, then goes on in the queries' own dtype. Under autocast the projections
run in the low dtype; the rotation runs in float32 when the tables arrive float32.

Runs (``args["runs"]``), each for ``args["precision"]``:

* ``fabric-auto``: ``precision_base.Fabric(precision_plugin=..., strategy="auto")``: the default units (the blocks),
  then the model;
* ``fabric-blocks``: the Fabric ``FSDP2Strategy(auto_wrap_policy={RotaryBlock})``, the loop's own block set;
* ``fabric-loop``: Lightning's ``ModelParallelStrategy`` with the loop's own ``parallelize_fn``: the plugin's
  ``fully_shard`` on each block, then on the model;
* ``trainer-auto``: ``precision_base.Trainer(precision_plugin=...)``, the decoder held as ``self.net``;
* ``trainer-blocks``: the same with ``FSDP2Strategy(auto_wrap_policy={RotaryBlock})``;
* ``torch-policy``: the loop's own sharding with torch's ``fully_shard`` and a ``MixedPrecisionPolicy`` of the
  same dtypes left at torch's default input cast (every unit casts), under Lightning's ``ModelParallelStrategy``
  and the plugin: what the blocks were handed before.

Each run also returns its losses and how many FSDP2 units the model was sharded into.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from lightning.fabric import seed_everything
from lightning.fabric.strategies import ModelParallelStrategy
from lightning.pytorch import LightningModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import precision_base
from precision_fsdp import FSDP2Strategy, _compat
from precision_fsdp.fabric import FSDP2Strategy as FabricFSDP2Strategy
from precision_fsdp.sharding.units import count_units
from precision_testsupport.launch import world_size
from precision_testsupport.models import QUIET

VOCAB, WIDTH, HEADS, SEQ, BATCH, STEPS = 64, 32, 4, 16, 4, 3


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class RotaryBlock(nn.Module):
    """Pre-norm causal attention with rotary positions, then an MLP; records what each forward was handed."""

    seen: ClassVar[list[dict[str, str]]] = []

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.proj = nn.Linear(WIDTH, WIDTH, bias=False)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        q_roped = q * cos + _rotate_half(q) * sin
        RotaryBlock.seen.append(
            {"cos": _name(cos.dtype), "sin": _name(sin.dtype), "weight": _name(self.qkv.weight.dtype),
             "rotation": _name(q_roped.dtype)}
        )  # fmt: skip
        q = q_roped.to(q.dtype)
        k = (k * cos + _rotate_half(k) * sin).to(k.dtype)
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class RotaryDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList([RotaryBlock(), RotaryBlock()])
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        half = WIDTH // HEADS
        inverse = 1.0 / (10000 ** (torch.arange(0, half, 2, dtype=torch.float32) / half))
        angles = torch.outer(torch.arange(SEQ, dtype=torch.float32), inverse).repeat(1, 2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, self.cos[:t], self.sin[:t])
        out: torch.Tensor = self.head(self.norm(x))
        return out


def _tokens(rank: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH * STEPS * 2, SEQ), generator=torch.Generator().manual_seed(5))[rank::2]


def _loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def _fabric(run: str, precision: str) -> tuple[list[float], int]:
    world_size()  # Fabric's teardown may have deleted WORLD_SIZE
    spec = f"fsdp:{precision}"

    def loop_sharding(module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
        plugin = fabric.strategy.precision
        mesh = device_mesh["data_parallel"]
        for block in module.blocks:
            plugin.fully_shard(block, mesh=mesh)
        return plugin.fully_shard(module, mesh=mesh)  # type: ignore[no-any-return]

    def torch_sharding(module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
        plugin = fabric.strategy.precision
        policy = _compat.MixedPrecisionPolicy(param_dtype=plugin._plan.compute, reduce_dtype=plugin._plan.reduce)
        mesh = device_mesh["data_parallel"]
        for block in module.blocks:
            _compat.fully_shard(block, mesh=mesh, mp_policy=policy)
        return _compat.fully_shard(module, mesh=mesh, mp_policy=policy)  # type: ignore[no-any-return]

    if run == "fabric-auto":
        strategy: Any = "auto"
    elif run == "fabric-blocks":
        strategy = FabricFSDP2Strategy(auto_wrap_policy={RotaryBlock})
    else:
        sharding = loop_sharding if run == "fabric-loop" else torch_sharding
        strategy = ModelParallelStrategy(sharding, data_parallel_size=2, tensor_parallel_size=1)
    fabric = precision_base.Fabric(precision_plugin=spec, strategy=strategy, accelerator="cpu", devices=2)
    fabric.launch()
    seed_everything(3)
    model = fabric.setup_module(RotaryDecoder())
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=0.01))
    tokens = _tokens(fabric.global_rank)
    losses = []
    for step in range(STEPS):
        batch = tokens[step * BATCH : (step + 1) * BATCH]
        loss = _loss(model(batch), batch)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses, count_units(model.module)


class Holder(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = RotaryDecoder()
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (tokens,) = batch
        loss = _loss(self.net(tokens), tokens)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(TensorDataset(_tokens(0)), batch_size=BATCH)


def _trainer(run: str, precision: str) -> tuple[list[float], int]:
    seed_everything(3)
    model = Holder()
    strategy = FSDP2Strategy(auto_wrap_policy={RotaryBlock}) if run == "trainer-blocks" else "auto"
    trainer = precision_base.Trainer(
        precision_plugin=f"fsdp:{precision}", strategy=strategy, accelerator="cpu", devices=2, max_steps=STEPS, **QUIET
    )
    trainer.fit(model)
    return model.losses, count_units(model)


def runs(args: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    for run in args["runs"]:
        RotaryBlock.seen = []
        door = _trainer if run.startswith("trainer") else _fabric
        losses, units = door(run, args["precision"])
        kinds = sorted({tuple(sorted(seen.items())) for seen in RotaryBlock.seen})
        out[run] = {"seen": [dict(kind) for kind in kinds], "calls": len(RotaryBlock.seen), "losses": losses,
                    "units": units}  # fmt: skip
    return out
