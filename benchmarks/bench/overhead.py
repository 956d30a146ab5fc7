"""Per-step overhead: our plugin vs Lightning's built-in vs a hand-written loop, 2 processes on CPU, per backend.

One 2-rank launch per backend. In each round, for each precision, the variants run in a shuffled order (the same
in both ranks), each a fresh fit of ``warmup + steps`` steps; rounds interleave the variants in time so load drift
touches all of them alike. FSDP ``*-mixed`` adds ``-lowreduce`` variants (reduce in the compute dtype, as the
built-in does), which separate the cost of our fp32 reduction from plugin overhead.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from bench import report, runs

MIXED = ["ours", "ours-lowreduce", "builtin", "hand", "hand-lowreduce"]
VARIANTS = {
    "fsdp": {p: ["ours", "builtin", "hand"] for p in ("32-true", "bf16-true", "16-true")}
    | {"bf16-mixed": MIXED, "16-mixed": MIXED},
    # DeepSpeed's bf16-true runs the same engine as bf16-mixed (memory and numerics cover it)
    "deepspeed": {"32-true": ["ours", "builtin", "hand"], "bf16-mixed": ["ours", "builtin", "hand"]},
}
PAIRS = [("ours", "builtin"), ("ours", "hand"), ("ours-lowreduce", "builtin"), ("builtin", "hand")]
COLUMNS = {"wall: ours / built-in": ("wall", "ours/builtin"), "wall: ours / hand": ("wall", "ours/hand"),
           "CPU: ours / built-in": ("cpu", "ours/builtin"), "CPU: ours / hand": ("cpu", "ours/hand"),
           "wall: ours reduce=low / built-in": ("wall", "ours-lowreduce/builtin")}  # fmt: skip


def worker(args: dict[str, Any]) -> dict[str, Any]:
    """Inside each rank: every round, every precision, the variants in a shuffled order."""
    task, rng = runs.Task(**args["task"]), random.Random(0)  # same seed in every rank: the same order
    samples: dict[str, dict[str, list[list[float]]]] = {"wall": {}, "cpu": {}}
    for _ in range(args["rounds"]):
        for precision, variants in args["variants"].items():
            for variant in rng.sample(variants, len(variants)):
                res = runs.run(args["backend"], variant, precision, task, args["steps"], args["warmup"])
                samples["wall"].setdefault(f"{precision}|{variant}", []).append(res["times"])
                samples["cpu"].setdefault(f"{precision}|{variant}", []).append(res["cpu_times"])
    return samples


def analyse(raw: dict[str, Any], variants: dict[str, list[str]]) -> dict[str, Any]:
    """Per precision and kind of time ("wall", "cpu"): a summary per variant and the ratios of :data:`PAIRS`."""
    out: dict[str, Any] = {}
    for precision, names in variants.items():
        for kind in ("wall", "cpu"):
            rounds = {v: raw[kind][f"{precision}|{v}"] for v in names}
            pooled = {v: [t for r in rs for t in r] for v, rs in rounds.items()}
            ratios = {f"{a}/{b}": report.ratio(pooled[a], pooled[b], rounds[a], rounds[b]) for a, b in PAIRS
                      if a in names and b in names}  # fmt: skip
            out.setdefault(precision, {})[kind] = {"step_s": {v: report.summarize(pooled[v]) for v in names},
                                                   "ratios": ratios}  # fmt: skip
    return out


def run(quick: bool, machine: dict[str, Any], out: Path, backend: str) -> list[Path]:
    variants = {"bf16-mixed": ["ours", "builtin", "hand"]} if quick else VARIANTS[backend]
    config: dict[str, Any] = {"backend": backend, "variants": variants, "task": dict(vars(runs.Task(width=128))),
              "rounds": 1 if quick else 3, "steps": 5 if quick else 30, "warmup": 1 if quick else 5}  # fmt: skip
    start = time.perf_counter()
    results = analyse(runs.in_ranks("bench.overhead:worker", config), variants)
    findings = [f"{backend}:{p} {name} ({kind} time) = {report.fmt_ratio(r)}: {r['verdict']} beyond the 95% interval"
                for p, e in results.items() for kind in ("wall", "cpu") for name, r in e[kind]["ratios"].items()
                if name.startswith("ours") and r["verdict"] in ("slower", "faster")]  # fmt: skip
    rows = []
    for p, e in results.items():
        ms = [f"{e['wall']['step_s'][v]['median'] * 1e3:.2f} ({e['wall']['step_s'][v]['rel_iqr']:.0%})" for v in
              ("ours", "builtin", "hand")]  # fmt: skip
        cells = [report.fmt_ratio(e[k]["ratios"][r]) if r in e[k]["ratios"] else "-" for k, r in COLUMNS.values()]
        rows.append([p, *ms, *cells])
    t = config["task"]
    setup = "FSDP2 (fully_shard under ModelParallelStrategy)" if backend == "fsdp" else "DeepSpeed ZeRO-2"
    body = (
        f"{setup}, 2 processes, gloo, 1 thread each; {t['depth']} residual MLP blocks of width {t['width']}, batch "
        f"{t['batch']} per rank, AdamW. {config['rounds']} interleaved rounds x {config['steps']} steps per variant "
        f"({config['warmup']} warm-up steps of every fit dropped). A step is the slowest rank's time from one batch's "
        "start to the next. Cells: median ms (IQR / median); ratios of medians with a 95% bootstrap interval "
        "(scipy), then the ratio of 20th percentiles. CPU time leaves out waiting for a CPU or for the other rank: "
        "the steadier figure on a shared machine.\n\n"
        + report.md_table(["precision", "ours ms", "built-in ms", "hand-written ms", *COLUMNS], rows)
    )

    def plot(plt: Any) -> Any:
        fig, ax = plt.subplots(figsize=(max(6, 1.9 * len(results)), 4))
        for i, v in enumerate(MIXED):
            cells = [(j, e["wall"]["step_s"][v]) for j, e in enumerate(results.values()) if v in e["wall"]["step_s"]]
            lo = [(s["median"] - s["p25"]) * 1e3 for _, s in cells]
            hi = [(s["p75"] - s["median"]) * 1e3 for _, s in cells]
            xs, ys = [j + (i - 2) * 0.16 for j, _ in cells], [s["median"] * 1e3 for _, s in cells]
            if cells:
                ax.bar(xs, ys, 0.16, yerr=[lo, hi], capsize=2, color=f"C{i}", label=v)
        ax.set_xticks(range(len(results)), list(results))
        ax.set_ylabel("median step time, ms (bars: IQR)")
        ax.legend(fontsize=8)
        return fig

    name, title = f"overhead-{backend}", f"Per-step overhead: {backend}"
    return report.write(out, name, title, body, plot, start, quick=quick, machine=machine, config=config,
                        results=results, findings=findings)  # fmt: skip
