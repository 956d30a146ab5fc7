"""Toy LightningModules and data shared by the tests, the integration tests, the benchmarks and the examples.

Imports torch and Lightning (``lightning.pytorch``); ``import precision_base`` never imports this module.

* :class:`TinyRegressor`: a small MLP regression on fixed random data with knobs (width, depth, optimizer, FSDP2
  sharding by the trainer's precision plugin); it records what tests assert on: the losses, the dtype the inputs
  arrived in and the dtype the network computed in.
* :class:`ResidualMLP` and :func:`teacher_data`: the larger classifier and fixed teacher task the benchmarks train.
* :func:`mlp`: a bare three-layer ``nn.Sequential`` for plugin unit tests.
* :class:`TinyGPT`: a small GPT-style decoder for the GPU benchmark (blocks of class :class:`GPTBlock`).
* :data:`QUIET`: Trainer arguments that switch off logging, checkpoints, progress bar and model summary.
"""

from __future__ import annotations

from typing import Any, Literal

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

__all__ = [
    "QUIET",
    "GPTBlock",
    "ResidualMLP",
    "TinyGPT",
    "TinyRegressor",
    "dtype_name",
    "mlp",
    "regression_data",
    "teacher_data",
]

QUIET: dict[str, Any] = dict(
    logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
)
"""Trainer keyword arguments for tests: no logger, no checkpoints, no progress bar, no model summary."""


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def mlp(features: int = 8, hidden: int = 16, out: int = 4, seed: int = 0) -> nn.Sequential:
    """``Linear(features, hidden) -> ReLU -> Linear(hidden, out)`` in float32 with weights from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, out))


def regression_data(features: int = 8, samples: int = 256, seed: int = 0) -> TensorDataset:
    """``samples`` float32 inputs of width ``features`` and float32 targets ``tanh(x @ w)``, the same on every call."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=gen)
    w = torch.randn(features, 1, generator=gen) / features**0.5
    return TensorDataset(x, torch.tanh(x @ w))


class TinyRegressor(pl.LightningModule):
    """An MLP regression on :func:`regression_data`; records losses and the dtypes of each step.

    ``net`` is ``Linear(features, 1)`` when ``hidden == 0``, else ``Linear(features, hidden) -> GELU ->
    Linear(hidden, 1)``; a float32 zero buffer ``offset`` is added to its output (so precisions that cast buffers
    show it). The loss is computed in float32.

    Args:
        features: input width.
        hidden: hidden width (0: a single linear layer).
        optimizer: ``"sgd"`` (momentum 0.5: optimizer state to checkpoint, finite in fp16) or ``"adamw"``.
        lr: learning rate.
        samples: training samples; ``batch_size``: per step.
        shard: FSDP2: ``configure_model`` shards the module with the trainer precision plugin's ``fully_shard``
            on the ``"data_parallel"`` mesh (``ModelParallelStrategy``).
        seed: seed of the data.

    Attributes:
        losses: float32 loss of every training step, as a Python float.
        input_dtypes: dtype of each batch's inputs as ``training_step`` received them.
        compute_dtypes: dtype of ``net``'s output in each forward.
    """

    def __init__(
        self,
        features: int = 8,
        hidden: int = 0,
        optimizer: Literal["sgd", "adamw"] = "sgd",
        lr: float = 0.05,
        samples: int = 256,
        batch_size: int = 32,
        shard: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.net: nn.Module = (
            nn.Linear(features, 1)
            if hidden == 0
            else nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, 1))
        )
        self.offset: torch.Tensor
        self.register_buffer("offset", torch.zeros(1))
        self.features, self.optimizer_name, self.lr = features, optimizer, lr
        self.samples, self.batch_size, self.shard, self.seed = samples, batch_size, shard, seed
        self.losses: list[float] = []
        self.input_dtypes: list[torch.dtype] = []
        self.compute_dtypes: list[torch.dtype] = []

    def configure_model(self) -> None:
        if self.shard:
            plugin: Any = self.trainer.precision_plugin  # an FSDP2-capable plugin, e.g. precision_fsdp's
            assert self.device_mesh is not None, "shard=True needs ModelParallelStrategy"
            plugin.fully_shard(self, mesh=self.device_mesh["data_parallel"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        self.compute_dtypes.append(out.dtype)
        return out + self.offset

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.input_dtypes.append(x.dtype)
        loss = nn.functional.mse_loss(self(x).float(), y.float())
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.optimizer_name == "adamw":
            return torch.optim.AdamW(self.parameters(), lr=self.lr)
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.5)

    def train_dataloader(self) -> DataLoader[Any]:
        data = regression_data(self.features, self.samples, self.seed)
        return DataLoader(data, batch_size=self.batch_size, shuffle=False)


class ResidualMLP(nn.Module):
    """The benchmarks' classifier: ``depth`` pre-norm residual blocks, then LayerNorm -> Linear(width, classes).

    A block is LayerNorm -> Linear(width, 2 width) -> GELU -> Linear(2 width, width) plus the residual: matmuls, a
    normalisation and (in the loss) a softmax, the parts where precisions differ; each block is one FSDP unit.
    Initial weights depend on ``seed`` only (the global RNG is left as it was).
    """

    def __init__(self, width: int = 256, depth: int = 2, classes: int = 16, seed: int = 1234) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
                for _ in range(depth)
            )
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        out: torch.Tensor = self.head(self.norm(x))
        return out


def teacher_data(samples: int, width: int = 256, classes: int = 16, seed: int = 1234, split: int = 0) -> TensorDataset:
    """Float32 inputs and int64 labels of a fixed random teacher network; ``split`` 1 gives held-out inputs."""
    teacher = torch.Generator().manual_seed(seed + 1)
    w_in = torch.randn(width, 4 * width, generator=teacher) / width**0.5
    w_out = torch.randn(4 * width, classes, generator=teacher) / (4 * width) ** 0.5
    x = torch.randn(samples, width, generator=torch.Generator().manual_seed(seed + 2 + split))
    return TensorDataset(x, (torch.tanh(x @ w_in) @ w_out).argmax(dim=1))


class GPTBlock(nn.Module):
    """Pre-norm decoder block: causal self-attention (``scaled_dot_product_attention``), then a 4x GELU MLP."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.qkv, self.proj = (
            nn.LayerNorm(d_model),
            nn.Linear(d_model, 3 * d_model),
            nn.Linear(d_model, d_model),
        )
        self.ln2, self.up, self.down = (
            nn.LayerNorm(d_model),
            nn.Linear(d_model, 4 * d_model),
            nn.Linear(4 * d_model, d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        out: torch.Tensor = x + self.down(nn.functional.gelu(self.up(self.ln2(x))))
        return out


class TinyGPT(nn.Module):
    """Token embedding (tied to the output projection) + learned positions, ``layers`` :class:`GPTBlock`, LayerNorm.

    Input: int64 token ids ``(batch, t)`` with ``t <= seq``; output: logits ``(batch, t, vocab)``.
    """

    def __init__(self, vocab: int = 8192, d_model: int = 512, layers: int = 6, heads: int = 8, seq: int = 512) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(seq, d_model))
        self.blocks = nn.ModuleList(GPTBlock(d_model, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        out: torch.Tensor = self.out(self.ln(x))
        return out
