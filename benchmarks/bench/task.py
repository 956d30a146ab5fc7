"""The model, data and step-timing helpers every CPU benchmark shares. Imports torch (used inside the ranks).

The model is a small pre-norm residual MLP classifier: ``depth`` blocks of LayerNorm -> Linear(w, 2w) -> GELU ->
Linear(2w, w) with a residual connection, then LayerNorm -> Linear(w, classes). It has what makes precisions
differ (matmuls, a normalisation, a softmax cross-entropy) and one natural FSDP unit per block. The data is a
fixed teacher task: inputs from a seeded normal distribution, labels from a seeded random network, so every
run of every backend sees the same batches.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

LOW_DTYPES = {
    "32-true": torch.float32,
    "16-true": torch.float16,
    "bf16-true": torch.bfloat16,
    "16-mixed": torch.float16,
    "bf16-mixed": torch.bfloat16,
}


@dataclass(frozen=True)
class TaskConfig:
    width: int = 256
    depth: int = 2
    classes: int = 16
    batch: int = 32  # per rank
    lr: float = 1e-3
    seed: int = 1234

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.act = nn.GELU()
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, cfg: TaskConfig) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(cfg.width) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build_net(cfg: TaskConfig) -> Net:
    """The model with seeded initial weights (identical in every rank and every run)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return Net(cfg)


def dataset(cfg: TaskConfig, samples: int, split: int = 0) -> torch.utils.data.TensorDataset:
    """``samples`` inputs and their teacher labels, the same in every rank and run.

    The teacher depends on ``cfg.seed`` only; ``split`` picks an independent set of inputs (0: training, 1: held out).
    """
    teacher = torch.Generator().manual_seed(cfg.seed + 1)
    teacher_in = torch.randn(cfg.width, 4 * cfg.width, generator=teacher) / cfg.width**0.5
    teacher_out = torch.randn(4 * cfg.width, cfg.classes, generator=teacher) / (4 * cfg.width) ** 0.5
    inputs = torch.Generator().manual_seed(cfg.seed + 2 + split)
    x = torch.randn(samples, cfg.width, generator=inputs)
    y = (torch.tanh(x @ teacher_in) @ teacher_out).argmax(dim=1)
    return torch.utils.data.TensorDataset(x, y)


def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out.float(), y)


def loader(cfg: TaskConfig, steps: int, rank: int, world: int) -> torch.utils.data.DataLoader:
    """A loader with exactly ``steps`` batches per rank, each rank its own slice (as Lightning's sampler gives)."""
    ds = dataset(cfg, steps * cfg.batch * world)
    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False)
    return torch.utils.data.DataLoader(ds, batch_size=cfg.batch, sampler=sampler)


class StepClock:
    """Start times of every training step; step ``i`` lasts from start ``i`` to start ``i + 1``.

    The interval covers everything one iteration does (fetching the batch, forward, backward, the optimizer step,
    zeroing gradients, the framework's hooks), the same in a Lightning loop and a hand-written one. Both the wall
    time and the process's CPU time (``time.process_time``: all its threads, not the time spent waiting for the
    CPU or blocked on the other rank) are recorded; on a machine shared with other load the CPU time is the
    steadier measure of the work a step does.
    """

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.cpu: list[float] = []

    def tick(self) -> None:
        self.starts.append(time.perf_counter())
        self.cpu.append(time.process_time())

    def intervals(self, warmup: int) -> list[float]:
        d = [b - a for a, b in zip(self.starts, self.starts[1:], strict=False)]
        return d[warmup:]

    def cpu_intervals(self, warmup: int) -> list[float]:
        d = [b - a for a, b in zip(self.cpu, self.cpu[1:], strict=False)]
        return d[warmup:]


def lightning_clock_callback(clock: StepClock) -> Any:
    from lightning.pytorch.callbacks import Callback

    class _Clock(Callback):
        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            clock.tick()

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            clock.tick()

    return _Clock()


def lightning_module(
    cfg: TaskConfig,
    losses: list[float],
    on_step: Any = None,
    configure_model: Any = None,
) -> Any:
    """The LightningModule every Lightning variant trains: ``build_net(cfg)``, AdamW, losses appended to ``losses``.

    ``on_step(module, optimizer)`` runs before each optimizer step; ``configure_model(module)`` (FSDP2's sharding)
    runs in Lightning's ``configure_model`` hook.
    """
    from lightning.pytorch import LightningModule

    class BenchModule(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = build_net(cfg)

        def configure_model(self) -> None:
            if configure_model is not None:
                configure_model(self)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = loss_fn(self.net(x), y)
            losses.append(float(loss.detach()))
            return loss

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            if on_step is not None:
                on_step(self, optimizer)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=cfg.lr)

    return BenchModule()


def lightning_trainer_kwargs(steps: int, root: str) -> dict[str, Any]:
    """Trainer arguments that switch off everything a benchmark does not measure."""
    return dict(
        accelerator="cpu",
        max_steps=steps,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        default_root_dir=root,
        use_distributed_sampler=False,  # the loaders carry their own DistributedSampler
    )


def max_across_ranks(values: list[float]) -> list[float]:
    """Element-wise maximum of ``values`` over all ranks (a step ends when its slowest rank ends)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return list(values)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, list(values))
    n = min(len(g) for g in gathered)
    return [max(g[i] for g in gathered) for i in range(n)]


_WORLD = int(os.environ.get("WORLD_SIZE", "1"))


def world_size() -> int:
    """The launch's world size; also puts ``WORLD_SIZE`` back (Lightning's environment deletes it in teardown)."""
    os.environ["WORLD_SIZE"] = str(_WORLD)
    return _WORLD


def ensure_process_group() -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=int(os.environ.get("RANK", "0")), world_size=world_size())
