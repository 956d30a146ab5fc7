"""Step time of precision_fsdp.FSDPPrecision vs Lightning 2.6's built-in FSDPPrecision, same strategy, same model.

    python benchmarks/fsdp_step_time.py [--precision 32-true] [--steps 40] [--rounds 2]

Runs on CPU in 2 processes under ``ModelParallelStrategy`` (FSDP2, gloo). Both plugins train the same MLP on the same
data; the model is sharded with ``fully_shard`` in ``configure_model`` (ours through ``plugin.fully_shard``, which
adds its ``MixedPrecisionPolicy``; the built-in has no FSDP2 policy, so plain ``fully_shard``). Rounds alternate
who goes first (ABBA) so that drift on a shared machine hits both alike. Step time is the median wall time from
``on_train_batch_start`` to ``on_train_batch_end`` on rank 0, after ``--warmup`` steps; the output also gives each
round's median and the ratio of the best rounds (least disturbed by other load). Prints one JSON object.

Default precision ``32-true``: the only one where both plugins do the same work on CPU. The built-in's mixed
precisions hard-code ``torch.autocast("cuda")`` and so compute in fp32 on CPU, which would compare different work;
``--precision bf16-mixed`` runs anyway and says so in the output.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

import torch
from lightning.pytorch import LightningModule, seed_everything
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import FSDPPrecision as BuiltinFSDPPrecision
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.utils.data import DataLoader, TensorDataset

import precision_base
from precision_fsdp import FSDPPrecision

WIDTH, DEPTH, BATCH = 512, 4, 64


class MLP(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        layers: list[torch.nn.Module] = []
        for _ in range(DEPTH):
            layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
        self.blocks = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(WIDTH, 1)

    def configure_model(self) -> None:
        from torch.distributed.fsdp import fully_shard

        plugin = self.trainer.precision_plugin
        mesh = self.device_mesh["data_parallel"]
        shard = plugin.fully_shard if isinstance(plugin, FSDPPrecision) else (lambda m, mesh: fully_shard(m, mesh=mesh))
        for layer in self.blocks:
            if isinstance(layer, torch.nn.Linear):
                shard(layer, mesh=mesh)
        shard(self, mesh=mesh)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x).float(), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class StepTimer(Callback):
    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, *args: Any) -> None:
        self.times.append(time.perf_counter() - self._t0)


def measure(plugin: Any, steps: int, warmup: int) -> tuple[list[float], int]:
    seed_everything(0, verbose=False)
    x = torch.randn(BATCH * 2 * (steps + warmup), WIDTH, generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(x, x[:, :1].tanh()), batch_size=BATCH)
    timer = StepTimer()
    trainer = precision_base.Trainer(
        precision_plugin=plugin,
        strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
        accelerator="cpu",
        devices=2,
        max_steps=steps + warmup,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    trainer.fit(MLP(), data)
    return timer.times[warmup:], trainer.global_rank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)

    samples: dict[str, list[float]] = {"precision_fsdp": [], "lightning_builtin": []}
    per_round: dict[str, list[float]] = {"precision_fsdp": [], "lightning_builtin": []}
    rank = 0
    for i in range(args.rounds):
        # ABBA order: the machine drifts (caches, other load) over a run; alternating who goes first cancels that
        for name in list(samples) if i % 2 == 0 else list(samples)[::-1]:
            plugin = FSDPPrecision(args.precision) if name == "precision_fsdp" else BuiltinFSDPPrecision(args.precision)
            times, rank = measure(plugin, args.steps, args.warmup)
            samples[name] += times
            per_round[name].append(round(statistics.median(times), 6))
    if rank != 0:
        return
    ours = statistics.median(samples["precision_fsdp"])
    builtin = statistics.median(samples["lightning_builtin"])
    result = {
        "benchmark": "fsdp_step_time",
        "precision": args.precision,
        "strategy": "ModelParallelStrategy(data_parallel_size=2) on CPU, gloo, FSDP2 fully_shard",
        "model": f"MLP {DEPTH}x{WIDTH}, batch {BATCH} per rank",
        "steps_measured_per_plugin": len(samples["precision_fsdp"]),
        "median_step_s": {"precision_fsdp": round(ours, 6), "lightning_builtin": round(builtin, 6)},
        "median_step_s_per_round": per_round,
        "ratio_ours_over_builtin": round(ours / builtin, 4),
        "ratio_of_best_round_medians": round(min(per_round["precision_fsdp"]) / min(per_round["lightning_builtin"]), 4),
        "same_work": args.precision in ("32-true",),
        "note": ""
        if args.precision == "32-true"
        else (
            "the built-in's mixed/true paths differ from ours on CPU (built-in autocast is CUDA-only; built-in has "
            "no FSDP2 policy), so this ratio compares different work"
        ),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
