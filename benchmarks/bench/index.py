"""``index.md`` of a results folder: the headline numbers of every result found there, and links to the details.

Everything on the page is generated from the JSON results, except ``benchmarks/ANALYSIS.md`` (the maintainers'
reading of the committed run: causes found, what was checked), which is included verbatim when present.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import stats
from bench.report import fmt_bytes, fmt_ms, md_table

ANALYSIS = Path(__file__).resolve().parents[1] / "ANALYSIS.md"

PAGES = [
    ("overhead-fsdp", "Per-step overhead: FSDP2"),
    ("overhead-deepspeed", "Per-step overhead: DeepSpeed"),
    ("discovery", "Discovery cost"),
    ("memory", "Memory per rank"),
    ("numerics", "Numerics"),
    ("gpu", "GPU: step overhead and throughput"),
]

INTRO = """# Benchmarks

Our precision plugins measured side by side with Lightning's built-in plugins and with a hand-written torch loop
doing the same casts, autocast and loss scaling (the floor). Every figure is a ratio of two things measured in the
same run, interleaved, on the same machine; spreads are 95% bootstrap intervals of the ratio of medians.

Reproduce: `nox -s bench` (or `python benchmarks/run.py`, about 15 minutes on 2 CPU cores; `--quick` for a smoke
run). On a CUDA machine: `python benchmarks/gpu_bench.py` (under 8 minutes). Each result's page records the
machine (CPU model, cores, torch / Lightning / DeepSpeed versions, commit, load) and the command.

**What the CPU comparison can and cannot say.** Lightning's built-in `FSDPPrecision` hard-codes
`torch.autocast("cuda")`. On CPU its `*-mixed` precisions therefore run *no* autocast: the FSDP2 policy built from
its `mixed_precision_config` casts the parameters to bf16/fp16 and every op (LayerNorm, softmax, the loss) runs in
that dtype, and gradients are reduced in bf16/fp16. Ours autocasts on the device the model is on and reduces in
fp32 by default. So for FSDP `*-mixed`, "ours vs built-in" on CPU compares two different computations, not two
implementations of one: the step-time ratio mixes the cost of autocast and of fp32 reduction with plugin overhead.
The `ours, reduce_dtype = compute dtype` column and the hook timings separate the parts; the numerics page shows
what the built-in's missing autocast does to the result. The built-in's `16-mixed` also gets no loss scaling on CPU
(its `ShardedGradScaler` is a CUDA scaler and disables itself). Lightning's own `DeepSpeedStrategy` refuses the CPU,
so both DeepSpeed Lightning variants run on precision-deepspeed's `DeepSpeedCPUStrategy`; only the precision
plugin differs between them. On this CPU (no AVX-512 BF16/FP16) bf16 and fp16 compute are several times slower
than fp32: compare plugins within a precision, never precisions with each other.
"""


def _load(out: Path, name: str) -> dict[str, Any] | None:
    path = out / f"{name}.json"
    if not path.exists():
        return None
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def overhead_rows(data: dict[str, Any], backend: str) -> list[list[str]]:
    rows = []
    for precision, entry in data["results"].items():
        if precision.startswith("_"):
            continue
        r = entry["ratios"]
        c = entry.get("cpu_ratios", {})
        st = entry["step_time_s"]

        def cpu(name: str, c: dict[str, Any] = c) -> str:
            return stats.fmt_ratio(c[name]) + f" ({c[name]['verdict']})" if name in c else "-"

        rows.append(
            [
                backend,
                precision,
                fmt_ms(st["ours"]["median"]),
                stats.fmt_ratio_p20(r["ours/builtin"]) + f" ({r['ours/builtin']['verdict']})",
                stats.fmt_ratio_p20(r["ours/hand"]) + f" ({r['ours/hand']['verdict']})",
                cpu("ours/builtin"),
                cpu("ours/hand"),
            ]
        )
    return rows


def discovery_lines(data: dict[str, Any]) -> list[str]:
    res = data["results"]
    proc = res["process_wall_s"]
    lines = []
    cmp0 = res["comparisons"]
    for label in ("import precision_base", "precision-plugins list", "resolve('fsdp:bf16-mixed')"):
        c = cmp0.get(label, {}).get("0", {})
        s = proc.get(label, {}).get("0")
        if s is None:
            continue
        text = f"`{label}`: {s['median'] * 1e3:.0f} ms in a fresh interpreter"
        if "extra_over_pass_s" in c:
            text += f" ({c['extra_over_pass_s'] * 1e3:+.0f} ms over `python -c pass`"
            if "vs_import_lightning" in c:
                text += f"; {stats.fmt_ratio(c['vs_import_lightning'])} x `import lightning`"
            text += ")"
        heavy = res["modules"].get(label, {}).get("heavy")
        if heavy is not None:
            text += f"; heavy modules imported: {', '.join(heavy) or 'none'}"
        lines.append(text)
    lines += data.get("findings", [])[:1]
    return lines


def memory_rows(data: dict[str, Any]) -> list[list[str]]:
    rows = []
    for r in data["results"]:
        if r["precision"] != "bf16-mixed":
            continue
        rank0 = r["per_rank"][0]
        tracked = sum(v for v in rank0["bytes"].values())
        rows.append([r["config"], r["world"], fmt_bytes(tracked), fmt_bytes(rank0["peak_rss_delta"])])
    return rows


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def numerics_rows(data: dict[str, Any]) -> list[list[str]]:
    """NaN results (a run that diverged) arrive as ``null`` from the JSON and show as "nan"."""
    rows = []
    for r in data["results"]:
        diverged = r.get("nonfinite_losses", 0) > 0 and r.get("eval_loss") is None
        rows.append(
            [
                r["name"],
                "nan (diverged)" if diverged else _num(r.get("eval_loss"), ".4f"),
                _num(r.get("eval_loss_diff_vs_32"), "+.4f"),
                _num(r.get("weight_rel_l2_vs_32"), ".4f"),
            ]
        )
    return rows


def write(out: Path, durations: dict[str, float] | None = None) -> Path:
    parts = [INTRO]
    found = {name: _load(out, name) for name, _ in PAGES}
    rows = []
    for backend in ("fsdp", "deepspeed"):
        data = found.get(f"overhead-{backend}")
        if data:
            rows += overhead_rows(data, backend)
    if rows:
        parts.append(
            "## Per-step overhead (2 processes on CPU)\n\n"
            + md_table(
                [
                    "backend",
                    "precision",
                    "ours: median step ms",
                    "wall: ours / built-in [95% CI]",
                    "wall: ours / hand-written [95% CI]",
                    "CPU time: ours / built-in",
                    "CPU time: ours / hand-written",
                ],
                rows,
            )
            + "\n\nRatios above 1 mean ours is slower; a verdict needs the whole 95% interval on one side of 1 and "
            "every interleaved round to agree. Wall time is what a user waits; CPU time (per step, of the ranks' "
            "processes) leaves out waiting for a CPU the other load holds, and is the steadier figure here. Details, "
            "IQRs, per-round ratios, `reduce_dtype` variants and the plugin-only hook timings: "
            "[FSDP2](overhead-fsdp.md), [DeepSpeed](overhead-deepspeed.md)."
        )
    if found.get("discovery"):
        parts.append(
            "## Discovery cost\n\n"
            + "\n".join(f"- {x}" for x in discovery_lines(found["discovery"]))
            + "\n\nDetails and scaling with 1/10/100 installed plugins: [discovery](discovery.md)."
        )
    if found.get("memory"):
        parts.append(
            "## Memory per rank (bf16-mixed)\n\n"
            + md_table(
                ["setup", "ranks", "tracked tensor bytes (rank 0)", "peak RSS delta"], memory_rows(found["memory"])
            )
            + "\n\nAll precisions and the split by role (parameters, fp32 master, gradients, optimizer state): "
            "[memory](memory.md)."
        )
    if found.get("numerics"):
        parts.append(
            "## Numerics\n\n"
            + md_table(
                ["run", "eval loss", "- 32-true", "weights: rel. L2 from 32-true"], numerics_rows(found["numerics"])
            )
            + "\n\nLoss curves and details: [numerics](numerics.md)."
        )
    if found.get("gpu"):
        parts.append("## GPU\n\nSee [GPU: step overhead and throughput](gpu.md).")
    else:
        parts.append(
            "## GPU\n\nNo GPU result is committed yet: `python benchmarks/gpu_bench.py` on a CUDA machine writes "
            "`gpu.json`, `gpu.md` and `gpu.png` here (FSDP1, FSDP2, DeepSpeed ZeRO-2; bf16-mixed and 16-mixed; "
            "tokens/s and MFU)."
        )
    if ANALYSIS.exists():
        parts.append(ANALYSIS.read_text().strip())
    runs = [(name, title, d) for (name, title), d in ((p, found[p[0]]) for p in PAGES) if d]
    if runs:
        lines = [
            f"- [{title}]({name}.md): {d['duration_s']:.0f} s, {d['machine']['time_utc']}, commit "
            f"{d['machine']['git_commit']}, load at start {d['machine']['load_average_1_5_15']}"
            + (" (quick smoke run)" if d.get("quick") else "")
            for name, title, d in runs
        ]
        parts.append("## Runs on this page\n\n" + "\n".join(lines))
    path = out / "index.md"
    path.write_text("\n\n".join(p.strip() for p in parts) + "\n")
    return path
