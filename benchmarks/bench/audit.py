"""The precision audit's cost, 2 processes on CPU, each backend at ``bf16-mixed`` on the tiny Llama, in interleaved
rounds of two fresh fits (``audit``: ``PrecisionAudit(steps=1)``; ``plain``); the method: ``AUDIT`` in
tools/docgen/benchmark_pages.py."""

from __future__ import annotations

import random
import time
from typing import Any

import lightning.pytorch as pl
import torch

import precision_base
from bench import report, runs
from precision_testsupport import architectures

BACKENDS = ("fsdp", "deepspeed")
VARIANTS = ("audit", "plain")


def _fit(backend: str, variant: str, steps: int, batch: int) -> list[float]:
    class Timer(pl.Callback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._start = 0.0

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            self._start = time.perf_counter()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.times.append(time.perf_counter() - self._start)

    timer, net = Timer(), architectures.build("llama", 0, 0, 0, seed=0)
    module = runs.bench_module(net, lambda n, b: runs.loss_fn(n(b[0]), b[1]), lambda: None, 1e-3)
    data = torch.utils.data.DataLoader(architectures.data("llama", steps * batch * 2, 0, 0, seed=1), batch_size=batch)
    # the audit first: its step-end work (removing the hooks, comparing, exchanging mismatches) counts in step 0
    callbacks = [precision_base.PrecisionAudit(steps=1, strict=True)] if variant == "audit" else []
    runs.train(precision_base.Trainer, module, data, steps, precision_plugin=f"{backend}:bf16-mixed",
               callbacks=[*callbacks, timer], use_distributed_sampler=True)  # fmt: skip
    return runs.slowest_rank(timer.times)


def worker(args: dict[str, Any]) -> dict[str, Any]:
    """Inside each rank: every round, both variants in a shuffled order (the same in every rank)."""
    torch.set_num_threads(1)
    rng = random.Random(0)
    samples: dict[str, list[list[float]]] = {v: [] for v in VARIANTS}
    for _ in range(args["rounds"]):
        order = list(VARIANTS)
        rng.shuffle(order)
        for variant in order:
            samples[variant].append(_fit(args["backend"], variant, args["steps"], args["batch"]))
    return samples


def analyse(samples: dict[str, list[list[float]]]) -> dict[str, Any]:
    """The two ratios, each over every round's values, with per-round ratios."""
    first = {v: [r[0] for r in samples[v]] for v in VARIANTS}
    later = {v: [t for r in samples[v] for t in r[1:]] for v in VARIANTS}
    later_rounds = {v: [r[1:] for r in samples[v]] for v in VARIANTS}
    return {
        "audited_step": report.ratio(first["audit"], first["plain"]),
        "after_audit": report.ratio(later["audit"], later["plain"], later_rounds["audit"], later_rounds["plain"]),
        "medians_s": {
            "audited step 0": report.summarize(first["audit"])["median"],
            "plain step 0": report.summarize(first["plain"])["median"],
            "audit run, steps 1..": report.summarize(later["audit"])["median"],
            "plain run, steps 1..": report.summarize(later["plain"])["median"],
        },
    }


def run(quick: bool) -> dict[str, Any]:
    config = {"rounds": 2 if quick else 6, "steps": 4 if quick else 12, "batch": 8}
    raw = {backend: runs.in_ranks("bench.audit:worker", {**config, "backend": backend}) for backend in BACKENDS}
    return {"config": config, "results": {b: analyse(raw[b]) for b in BACKENDS}, "raw": raw}
