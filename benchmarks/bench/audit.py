"""The precision audit's cost: an audited step against a normal one, and the steps after the audit against a run
without it, 2 processes on CPU (FSDP2 ``fsdp:bf16-mixed`` and DeepSpeed ZeRO-2 ``deepspeed:bf16-mixed``, the
benchmarks' tiny Llama, ``bench.models``).

One 2-rank launch per backend. Each round runs two fresh fits of ``steps`` steps in a shuffled order (the same in
both ranks): ``audit`` (``PrecisionAudit(steps=1)``: step 0 audited, every hook removed after it) and ``plain`` (no
audit). Step times are wall-clock from the batch's start to its end (the slowest rank's). Compared side by side:
step 0 of ``audit`` with step 0 of ``plain`` (the audited step; both include the first step's lazy set-up) and
steps 1.. of ``audit`` with steps 1.. of ``plain`` (once the audit is over, a run should be as fast as without it).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from bench import models, report, runs

BACKENDS = ("fsdp", "deepspeed")
VARIANTS = ("audit", "plain")


def _fit(backend: str, variant: str, steps: int, batch: int) -> list[float]:
    import lightning.pytorch as pl
    import torch

    import precision_base
    from precision_testsupport.launch import world_size

    world_size()

    class Timer(pl.Callback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._start = 0.0

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            self._start = time.perf_counter()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.times.append(time.perf_counter() - self._start)

    class LM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = models.build("llama", 0, 0, 0, seed=0)

        def training_step(self, data: Any, batch_idx: int) -> torch.Tensor:
            ids, target = data
            logits = self.net(ids)
            return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

        def train_dataloader(self) -> Any:
            data = models.data("llama", steps * batch * 2, 0, 0, seed=1)
            return torch.utils.data.DataLoader(data, batch_size=batch)

    timer = Timer()
    callbacks: list[Any] = [timer] + (
        [precision_base.PrecisionAudit(steps=1, strict=True)] if variant == "audit" else []
    )
    # the audit first: its step-end work (removing the hooks, comparing, exchanging mismatches) counts in step 0
    callbacks.reverse()
    trainer = precision_base.Trainer(
        precision_plugin=f"{backend}:bf16-mixed", accelerator="cpu", devices=2, max_steps=steps, callbacks=callbacks,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(LM())
    return runs.slowest_rank(timer.times)


def worker(args: dict[str, Any]) -> dict[str, Any]:
    """Inside each rank: every round, both variants in a shuffled order (the same in every rank)."""
    import torch

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


def run(quick: bool, machine: dict[str, Any], out: Path) -> list[Path]:
    config = {"rounds": 2 if quick else 6, "steps": 4 if quick else 12, "batch": 8}
    start = time.perf_counter()
    results: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for backend in BACKENDS:
        raw[backend] = runs.in_ranks("bench.audit:worker", {**config, "backend": backend})
        results[backend] = analyse(raw[backend])
    header = ["backend", "audited step / normal step", "steps after the audit / run without it"]
    rows = [
        [f"{b}:bf16-mixed", report.fmt_ratio(results[b]["audited_step"]), report.fmt_ratio(results[b]["after_audit"])]
        for b in BACKENDS
    ]
    findings = [
        f"{b}: audited step {results[b]['audited_step']['ratio']:.2f}x a normal step (the audit's budget is 3x); "
        f"steps after the audit {results[b]['after_audit']['ratio']:.3f}x a run without it "
        f"({results[b]['after_audit']['verdict']})"
        for b in BACKENDS
    ]
    body = (
        f"{(__doc__ or '').strip()}\n\n{config['rounds']} rounds, {config['steps']} steps per fit, batch "
        f"{config['batch']} per rank. Ratios: median over all rounds [95% bootstrap interval]; p20 ratio.\n\n"
        + report.md_table(header, rows)
    )

    def plot(plt: Any) -> Any:
        fig, grid = plt.subplots(1, len(BACKENDS), figsize=(8, 4), squeeze=False)
        axes = list(grid[0])
        for ax, backend in zip(axes, BACKENDS, strict=True):
            for variant, style in (("audit", "-o"), ("plain", "--s")):
                for i, times in enumerate(raw[backend][variant]):
                    ax.plot([t * 1000 for t in times], style, lw=1, ms=3, alpha=0.7,
                            color="C0" if variant == "audit" else "C1", label=variant if i == 0 else None)  # fmt: skip
            ax.set_title(f"{backend}:bf16-mixed")
            ax.set_xlabel("step")
            ax.set_ylabel("step time (ms)")
            ax.set_yscale("log")
        report.legend_below(fig, axes[0], 2)
        return fig

    return report.write(
        out, "audit", "Precision audit cost", body, plot, start, quick=quick, machine=machine, config=config,
        results=results, raw=raw, findings=findings,
    )  # fmt: skip
