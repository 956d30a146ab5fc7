"""Step time of precision_deepspeed.DeepSpeedPrecision vs Lightning 2.6's built-in DeepSpeedPrecision, same engine.

    python benchmarks/deepspeed_step_time.py [--precision bf16-mixed] [--stage 2] [--steps 30] [--rounds 2]

Runs on CPU in 2 processes (gloo) under ``precision_deepspeed.DeepSpeedCPUStrategy`` for both plugins: Lightning's
own ``DeepSpeedStrategy`` refuses the CPU, so only the precision plugin differs between the two runs. Ours goes
through ``precision_base.Trainer(precision_plugin=...)``, the built-in through ``lightning.pytorch.Trainer(plugins=
[...])``. Both train the same MLP on the same data with the same DeepSpeed config (ZeRO stage, the bf16/fp16
section: on ``bf16-mixed`` both end up with ``{"bf16": {"enabled": true}}``). Rounds alternate ours/built-in so
that drift on a shared machine hits both. Step time is the median wall time from ``on_train_batch_start`` to
``on_train_batch_end`` on rank 0 after ``--warmup`` steps; the output gives each round's median too, and the ratio
of the best rounds (least disturbed by other load). Prints one JSON object.

fp16 (``16-mixed``/``16-true``) runs only where DeepSpeed's CPU accelerator has native fp16.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import DeepSpeedPrecision as BuiltinDeepSpeedPrecision
from torch.utils.data import DataLoader, TensorDataset

import precision_base
from precision_deepspeed import DeepSpeedCPUStrategy, DeepSpeedPrecision

WIDTH, DEPTH, BATCH = 512, 4, 64


class MLP(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        layers: list[torch.nn.Module] = []
        for _ in range(DEPTH):
            layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
        self.net = torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).float(), y.float())

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class StepTimer(Callback):
    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, *args: Any) -> None:
        self.times.append(time.perf_counter() - self._t0)


def measure(variant: str, precision: str, stage: int, steps: int, warmup: int) -> tuple[list[float], int, dict]:
    pl.seed_everything(0, verbose=False)
    x = torch.randn(BATCH * 2 * (steps + warmup), WIDTH, generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(x, x[:, :1].tanh()), batch_size=BATCH)
    timer = StepTimer()
    common: dict[str, Any] = dict(
        strategy=DeepSpeedCPUStrategy(stage=stage, logging_batch_size_per_gpu=BATCH),
        accelerator="cpu",
        devices=2,
        max_steps=steps + warmup,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    if variant == "precision_deepspeed":
        trainer: pl.Trainer = precision_base.Trainer(precision_plugin=DeepSpeedPrecision(precision), **common)
    else:
        trainer = pl.Trainer(plugins=[BuiltinDeepSpeedPrecision(precision)], **common)  # type: ignore[arg-type]
    trainer.fit(MLP(), data)
    config = trainer.strategy.config or {}
    section = {k: config[k] for k in ("fp16", "bf16", "torch_autocast") if k in config}
    return timer.times[warmup:], trainer.global_rank, section


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--stage", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)

    names = ("precision_deepspeed", "lightning_builtin")
    samples: dict[str, list[float]] = {n: [] for n in names}
    per_round: dict[str, list[float]] = {n: [] for n in names}
    sections: dict[str, dict] = {}
    rank = 0
    for _ in range(args.rounds):
        for name in names:
            times, rank, sections[name] = measure(name, args.precision, args.stage, args.steps, args.warmup)
            samples[name] += times
            per_round[name].append(round(statistics.median(times), 6))
    if rank != 0:
        return
    ours = statistics.median(samples["precision_deepspeed"])
    builtin = statistics.median(samples["lightning_builtin"])
    result = {
        "benchmark": "deepspeed_step_time",
        "precision": args.precision,
        "strategy": f"precision_deepspeed.DeepSpeedCPUStrategy(stage={args.stage}) on CPU, 2 processes, gloo",
        "model": f"MLP {DEPTH}x{WIDTH}, batch {BATCH} per rank, AdamW",
        "steps_measured_per_plugin": len(samples["precision_deepspeed"]),
        "median_step_s": {"precision_deepspeed": round(ours, 6), "lightning_builtin": round(builtin, 6)},
        "median_step_s_per_round": per_round,
        "ratio_ours_over_builtin": round(ours / builtin, 4),
        "ratio_of_best_round_medians": round(
            min(per_round["precision_deepspeed"]) / min(per_round["lightning_builtin"]), 4
        ),
        "deepspeed_precision_section": sections,
        "same_work": sections.get("precision_deepspeed", {}).get("bf16")
        == sections.get("lightning_builtin", {}).get("bf16"),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
