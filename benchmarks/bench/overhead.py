"""Per-step overhead: our plugin vs Lightning's built-in plugin vs a hand-written torch loop, 2 processes on CPU.

One launch per backend. Inside it, for each round, for each precision, the variants run one after another in a
shuffled order (the same order in every rank), each a fresh fit of ``warmup + steps`` steps in the same two
processes. Rounds interleave the variants in time, so a change of machine load touches all of them alike; the
per-round ratios show how much the load moved them.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from bench import stats
from bench.launch import launch
from bench.report import envelope, fmt_ms, md_table, pyplot, write_json, write_markdown

BACKENDS: dict[str, dict[str, Any]] = {
    "fsdp": {
        "module": "bench.fsdp_runs",
        "title": "FSDP2 (fully_shard under ModelParallelStrategy), 2 processes, gloo",
        "precisions": {
            "32-true": ["ours", "builtin", "hand"],
            "bf16-true": ["ours", "builtin", "hand"],
            "16-true": ["ours", "builtin", "hand"],
            "bf16-mixed": ["ours", "ours-lowreduce", "builtin", "hand", "hand-lowreduce"],
            "16-mixed": ["ours", "ours-lowreduce", "builtin", "hand", "hand-lowreduce"],
        },
        "quick_precisions": ["bf16-mixed"],
    },
    "deepspeed": {
        "module": "bench.deepspeed_runs",
        "title": "DeepSpeed engine, ZeRO stage 2, 2 processes, gloo (DeepSpeed's CPU accelerator)",
        "precisions": {
            # bf16-true is left out: in DeepSpeed's native bf16 mode it runs the same engine as bf16-mixed (the
            # module is cast either way; only when differs), and the memory and numerics benchmarks cover it
            "32-true": ["ours", "builtin", "hand"],
            "bf16-mixed": ["ours", "builtin", "hand"],
        },
        "quick_precisions": ["bf16-mixed"],
    },
}

VARIANT_NAMES = {
    "ours": "ours (precision-{backend})",
    "ours-lowreduce": "ours, reduce_dtype = compute dtype",
    "builtin": "Lightning built-in",
    "hand": "hand-written torch loop",
    "hand-lowreduce": "hand-written, reduce in compute dtype",
}


# ---- inside the ranks ------------------------------------------------------------------------------------------
def worker(args: dict[str, Any]) -> dict[str, Any]:
    import importlib

    import torch

    from bench.task import TaskConfig

    torch.set_num_threads(int(args.get("threads", 1)))
    runs = importlib.import_module(args["module"])
    cfg = TaskConfig(**args["task"])
    rng = random.Random(args["seed"])  # same seed in every rank: the same order everywhere
    samples: dict[str, list[list[float]]] = {}
    cpu_samples: dict[str, list[list[float]]] = {}
    losses: dict[str, list[float]] = {}
    order: list[str] = []
    walls: dict[str, list[float]] = {}
    for _ in range(args["rounds"]):
        for precision, variants in args["precisions"].items():
            shuffled = list(variants)
            rng.shuffle(shuffled)
            for variant in shuffled:
                key = f"{precision}|{variant}"
                order.append(key)
                t0 = time.perf_counter()
                result = runs.run(variant, precision, cfg, args["steps"], args["warmup"])
                walls.setdefault(key, []).append(time.perf_counter() - t0)
                samples.setdefault(key, []).append(result["times"])
                cpu_samples.setdefault(key, []).append(result["cpu_times"])
                losses.setdefault(key, result["losses"])
    hooks: dict[str, Any] = {}
    if args.get("hooks"):
        import os

        import torch.distributed as dist

        from bench import hooks as hook_bench

        if os.environ.get("RANK", "0") == "0":  # one rank measures while the other waits: no CPU contention
            hooks = hook_bench.measure(args["backend"], list(args["precisions"]), **args["hooks"])
        if dist.is_initialized():
            dist.barrier()
    return {
        "samples": samples,
        "cpu_samples": cpu_samples,
        "losses": losses,
        "order": order,
        "fit_wall_s": walls,
        "hooks": hooks,
    }


# ---- in the driver -------------------------------------------------------------------------------------------
def settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {"rounds": 1, "steps": 5, "warmup": 1, "hooks": {"iterations": 200, "blocks": 3}}
    return {"rounds": 3, "steps": 30, "warmup": 5, "hooks": {"iterations": 2000, "blocks": 15}}


def analyse(raw: dict[str, Any], precisions: dict[str, list[str]]) -> dict[str, Any]:
    """Summaries per precision and variant, and the ratios ours/builtin, ours/hand (and lowreduce/builtin)."""
    out: dict[str, Any] = {}
    for precision, variants in precisions.items():
        rounds = {v: raw["samples"][f"{precision}|{v}"] for v in variants}
        pooled = {v: [t for r in rs for t in r] for v, rs in rounds.items()}
        entry: dict[str, Any] = {
            "step_time_s": {v: stats.summarize(pooled[v]) for v in variants},
            "ratios": {},
            "loss_first_last": {
                v: [raw["losses"][f"{precision}|{v}"][0], raw["losses"][f"{precision}|{v}"][-1]] for v in variants
            },
        }
        pairs = [("ours", "builtin"), ("ours", "hand")]
        if "ours-lowreduce" in variants:
            pairs += [("ours-lowreduce", "builtin"), ("ours", "ours-lowreduce")]
        if "hand-lowreduce" in variants:
            pairs += [("ours-lowreduce", "hand-lowreduce"), ("hand", "hand-lowreduce")]
        pairs += [("builtin", "hand")]
        for a, b in pairs:
            entry["ratios"][f"{a}/{b}"] = stats.ratio(pooled[a], pooled[b], rounds_a=rounds[a], rounds_b=rounds[b])
        if raw.get("cpu_samples"):
            crounds = {v: raw["cpu_samples"][f"{precision}|{v}"] for v in variants}
            cpooled = {v: [t for r in rs for t in r] for v, rs in crounds.items()}
            entry["cpu_time_s"] = {v: stats.summarize(cpooled[v]) for v in variants}
            entry["cpu_ratios"] = {
                f"{a}/{b}": stats.ratio(cpooled[a], cpooled[b], rounds_a=crounds[a], rounds_b=crounds[b])
                for a, b in pairs
            }
        out[precision] = entry
    return out


def run(
    quick: bool,
    machine: dict[str, Any],
    out: Path,
    backends: list[str] | None = None,
    log_dir: Path | None = None,
) -> list[Path]:
    from bench.task import TaskConfig

    written: list[Path] = []
    for backend in backends or list(BACKENDS):
        spec = BACKENDS[backend]
        precisions = spec["precisions"]
        if quick:
            precisions = {
                p: [x for x in v if x in ("ours", "builtin", "hand")]
                for p, v in precisions.items()
                if p in spec["quick_precisions"]
            }
        cfg = TaskConfig(width=128)  # small: the per-step costs around the model are what is compared
        config = {
            **settings(quick),
            "world_size": 2,
            "threads_per_rank": 1,
            "task": cfg.as_dict(),
            "precisions": precisions,
            "seed": 0,
            "module": spec["module"],
            "backend": backend,
        }
        start = time.perf_counter()
        raw = launch("bench.overhead:worker", config, world=2, threads=1, timeout=900, log_dir=log_dir)
        duration = time.perf_counter() - start
        results = analyse(raw, precisions)
        results["_order"] = raw["order"]
        results["_fit_wall_s"] = raw["fit_wall_s"]
        results["_hooks"] = raw["hooks"]
        data = envelope(
            f"overhead-{backend}",
            machine=machine,
            config={**config, "setup": spec["title"]},
            results=results,
            duration_s=duration,
            quick=quick,
            findings=findings(backend, results),
        )
        base = out / f"overhead-{backend}"
        written.append(write_json(base.with_suffix(".json"), data))
        written.append(plot(backend, results, base.with_suffix(".png"), spec["title"]))
        written.append(
            write_markdown(base.with_suffix(".md"), f"Per-step overhead: {backend}", table(backend, data), data)
        )
    return written


def findings(backend: str, results: dict[str, Any]) -> list[str]:
    """One sentence per ratio whose 95% interval excludes 1 (ours slower or faster)."""
    lines = []
    for precision, entry in results.items():
        if precision.startswith("_"):
            continue
        for kind, ratios in (("wall time", entry["ratios"]), ("CPU time", entry.get("cpu_ratios", {}))):
            for name, r in ratios.items():
                if name.startswith("ours") and r["verdict"] in ("slower", "faster"):
                    lines.append(
                        f"{backend}:{precision} {name} ({kind}) = {stats.fmt_ratio(r)}: {r['verdict']} beyond the "
                        "95% interval, in every round"
                    )
    return lines


def table(backend: str, data: dict[str, Any]) -> str:
    results = data["results"]
    cfg = data["config"]
    rows = []
    for precision, entry in results.items():
        if precision.startswith("_"):
            continue
        st = entry["step_time_s"]
        cells = [precision]
        for v in ("ours", "builtin", "hand"):
            s = st[v]
            cells.append(f"{fmt_ms(s['median'])} ({100 * s['rel_iqr']:.0f}%)")
        r = entry["ratios"]
        cells += [stats.fmt_ratio_p20(r["ours/builtin"]), stats.fmt_ratio_p20(r["ours/hand"])]
        c = entry.get("cpu_ratios", {})
        cells += [
            stats.fmt_ratio(c["ours/builtin"]) if "ours/builtin" in c else "-",
            stats.fmt_ratio(c["ours/hand"]) if "ours/hand" in c else "-",
        ]
        cells.append(stats.fmt_ratio_p20(r["ours-lowreduce/builtin"]) if "ours-lowreduce/builtin" in r else "-")
        rows.append(cells)
    header = [
        "precision",
        "ours ms (IQR)",
        "built-in ms (IQR)",
        "hand-written ms (IQR)",
        "ours / built-in [95% CI]",
        "ours / hand-written [95% CI]",
        "CPU time: ours / built-in",
        "CPU time: ours / hand-written",
        "ours reduce=low / built-in",
    ]
    n = cfg["rounds"] * cfg["steps"]
    body = (
        f"{cfg['setup']}. Model: {cfg['task']['depth']} residual MLP blocks of width {cfg['task']['width']}, "
        f"batch {cfg['task']['batch']} per rank, AdamW, {cfg['threads_per_rank']} thread per rank. "
        f"{cfg['rounds']} interleaved rounds x {cfg['steps']} measured steps per variant ({n} samples; "
        f"{cfg['warmup']} warm-up steps of every fit dropped). A step is the wall time from one batch's start to the "
        "next (fetch, forward, backward, optimizer step, hooks), the slowest rank's. Cells: median step time in ms "
        "and its IQR relative to the median; ratios are of medians with a 95% bootstrap interval, then the ratio of "
        "20th percentiles (p20: other load only adds time, so it is the less disturbed estimate). The CPU-time "
        "columns are the same ratios for the CPU time the ranks' processes used per step (not counting time spent "
        "waiting for a CPU or for the other rank): the steadier measure on a shared machine. A ratio is called "
        "slower/faster only when its whole 95% interval is on one side of 1 *and* every interleaved round agrees. "
        "Per-round ratios are in the JSON.\n\n" + md_table(header, rows)
    )
    hooks = results.get("_hooks") or {}
    if hooks:
        hook_rows = [
            [
                p,
                f"{h['us_per_step']['ours']['median']:.1f} ({h['us_per_step']['ours']['iqr']:.1f})",
                f"{h['us_per_step']['builtin']['median']:.1f} ({h['us_per_step']['builtin']['iqr']:.1f})",
                stats.fmt_ratio(h["ours/builtin"]),
            ]
            for p, h in hooks.items()
        ]
        body += (
            "\n\nThe plugin's own per-step Python, alone (`convert_input` + entering/leaving `forward_context` + "
            "`convert_output`; microseconds per step, IQR; one process, no training):\n\n"
            + md_table(["precision", "ours us", "built-in us", "ours / built-in"], hook_rows)
        )
    if data["findings"]:
        body += "\n\nOutside the spread:\n\n" + "\n".join(f"- {f}" for f in data["findings"])
    body += f"\n\n![step times](overhead-{backend}.png)\n"
    return body


def plot(backend: str, results: dict[str, Any], path: Path, title: str) -> Path:
    plt = pyplot()
    precisions = [p for p in results if not p.startswith("_")]
    variants = ["ours", "ours-lowreduce", "builtin", "hand", "hand-lowreduce"]
    colors = {
        "ours": "#1f77b4",
        "ours-lowreduce": "#aec7e8",
        "builtin": "#ff7f0e",
        "hand": "#2ca02c",
        "hand-lowreduce": "#98df8a",
    }
    fig, ax = plt.subplots(figsize=(max(6, 1.9 * len(precisions)), 4))
    width = 0.16
    for i, v in enumerate(variants):
        xs, meds, lo, hi = [], [], [], []
        for j, p in enumerate(precisions):
            s = results[p]["step_time_s"].get(v)
            if s is None:
                continue
            xs.append(j + (i - 2) * width)
            meds.append(s["median"] * 1e3)
            lo.append((s["median"] - s["p25"]) * 1e3)
            hi.append((s["p75"] - s["median"]) * 1e3)
        if xs:
            ax.bar(
                xs,
                meds,
                width,
                yerr=[lo, hi],
                capsize=2,
                color=colors[v],
                label=VARIANT_NAMES[v].format(backend=backend),
            )
    ax.set_xticks(range(len(precisions)), precisions)
    ax.set_ylabel("median step time, ms (bars: IQR)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
