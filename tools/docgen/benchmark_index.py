"""``index.md`` and ``analysis.md`` of a results folder, generated from the ``*.json`` results found there: every number
and every verdict on these pages comes from the JSON (nothing is hand-written), and each result's freshness against
the code it measured (:mod:`tools.bench_freshness`) is stated. ``benchmarks/run.py`` and ``benchmarks/gpu_bench.py``
write them after their results (:func:`write`).

Every page of a folder drawn again from its JSON, without measuring (:func:`redraw`)::

    python -m tools.docgen.benchmark_index --redraw docs/benchmarks
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tools import bench_freshness as freshness
from tools.bench_freshness import SCHEMA
from tools.docgen import benchmark_pages
from tools.docgen.benchmark_pages import CPU_TIME, INTERVAL, VERDICTS, details, fmt_bytes, fmt_ratio, md_table, reading
from tools.packages import find

OVERHEAD = {f"overhead-{b}" + ("" if m == "mlp" else f"-{m}"): (b, m) for m in ("mlp", "llama", "resnet")
            for b in ("fsdp", "deepspeed")}  # fmt: skip
PAGES = {**{n: f"Per-step overhead: {'FSDP2' if b == 'fsdp' else 'DeepSpeed'}, {m}" for n, (b, m) in OVERHEAD.items()},
         "discovery": "Discovery cost", "memory": "Memory per rank", "memory-real": "Memory on real models",
         "numerics": "Numerics", "audit": "The audit's cost", "measure": "recommend --measure on real models",
         "gpu": "GPU: one CUDA GPU"}  # fmt: skip
TARGET_HAND_16_MIXED = 1.03
TARGET_REAL_UPPER = 1.03
TARGET_FP8_GATHER = 0.55
DECODER_LABELS = {
    "llama": "Decoder (tiny Llama: embedding and lm_head 29% of its parameters)",
    "llama-prop": "Decoder with TinyLlama-1.1B's proportions (embedding and lm_head 11.9%)",
}
DS = find("deepspeed").dist  # the package list names it
INTRO = f"""# Benchmarks

Our precision plugins measured side by side with Lightning's built-in plugins and with a hand-written torch loop
doing the same casts, autocast and loss scaling (the floor), on a residual MLP and on two real architectures built
from transformers configs (a Llama decoder and a BatchNorm ResNet). Every figure is a ratio of two things measured
in the same run, interleaved, on the same machine; spreads are 95% bootstrap intervals of the ratio of medians.
This page and [the reading of the results](analysis.md) are generated from the JSON files beside them; a result's
own page has every figure, and its terms explained.

Reproduce: `nox -s bench -- --update-docs` (or `python benchmarks/run.py --update-docs`; without it results go to
`build/benchmarks/`; `--quick` for a smoke run; `--only NAME,...` for a subset). On a machine with one CUDA GPU:
`nox -s gpu`. Each result's page records the machine, its load at the start and end, the commit and the command.

**What the CPU comparison can and cannot say.** Lightning's built-in `FSDPPrecision` hard-codes
`torch.autocast("cuda")`: on CPU its `*-mixed` precisions run no autocast and reduce gradients in bf16/fp16, and at
`16-mixed` its `ShardedGradScaler` disables itself (no loss scaling). Ours autocasts on the model's device, reduces
in fp32 by default and scales the fp16 loss. So for FSDP `*-mixed`, "ours vs built-in" compares two different
computations; "ours vs hand-written" compares the same work (autocast + `GradScaler`), and the
`ours reduce=low` column separates the reduction's part. There a fourth variant, Lightning's own `MixedPrecision`
plugin with `device="cpu"` ("Lightning AMP": CPU autocast, a `GradScaler` for `16-mixed`) under a user's
fp32-reducing `fully_shard` policy, does the same work as ours inside the same Lightning loop. The hand-written loop
has no Lightning loop around it: Lightning's training loop, for one, broadcasts a SIGTERM flag from rank 0 at every
step (`_TrainingEpochLoop._broadcast_sigterm_tensor`), a collective the hand-written loop does not run, so "ours vs
hand-written" includes Lightning's own per-step cost and "Lightning AMP vs hand-written" shows that cost alone.
Lightning's own `DeepSpeedStrategy` refuses the CPU, so both DeepSpeed Lightning variants run on {DS}'s
`DeepSpeedCPUStrategy`.
"""


def load(out: Path) -> tuple[dict[str, Any], list[str]]:
    """The results of the current schema in ``out``, and a line per result left out (older harness)."""
    found, dropped = {}, []
    for name in PAGES:
        path = out / f"{name}.json"
        if path.exists():
            data = json.loads(path.read_text())
            if data.get("schema") == SCHEMA:
                found[name] = data
            else:
                dropped.append(f"`{name}.json` was written by harness schema {data.get('schema')!r}, not {SCHEMA!r}: "
                               f"left out; refresh: `{freshness.refresh_command(name)}`")  # fmt: skip
    return found, dropped


INDEX_CELLS = {"ours / built-in": "ours/builtin", "ours / hand-written": "ours/hand",
               "ours / Lightning AMP": "ours/amp"}  # fmt: skip
"""The index's overhead ratio columns (CPU time in the table, wall time in the block below it): header -> ratio."""
READING = reading(
    "**ms**: ours' median step time (wall clock) in milliseconds.",
    benchmark_pages.RATIO + " The table divides CPU time per step, the block below it wall time.",
    INTERVAL, VERDICTS, benchmark_pages.ROUND, CPU_TIME,
)  # fmt: skip
"""What the index's overhead table uses, explained above it."""


def like_for_like(d: dict[str, Any], precision: str) -> tuple[str, str]:
    """The ratio that compares ours with the same work at ``precision`` and its words: ours / built-in where the
    built-in does the same work and ran; else ours / Lightning AMP (the same work in the same loop) where it ran; else
    ours / hand-written."""
    ratios = d["results"][precision]["wall"]["ratios"]
    if precision not in (d["config"].get("builtin_skips") or {}) and "ours/builtin" in ratios:
        return "ours/builtin", "ours / built-in"
    if "ours/amp" in ratios:
        return "ours/amp", "ours / Lightning AMP (the built-in does other work or failed)"
    return "ours/hand", "ours / hand-written (the built-in does other work or failed)"


def _overhead_rows(d: dict[str, Any], kind: str = "cpu") -> list[list[str]]:
    """A row per precision: backend, model, precision, ours' median ms, then :data:`INDEX_CELLS` in ``kind`` time."""
    return [[d["config"]["backend"], d["config"].get("model", "mlp"), p,
             f"{o['median'] * 1e3:.2f}" if (o := e["wall"]["step_s"].get("ours")) else "failed",
             *(fmt_ratio(x) if (x := e[kind]["ratios"].get(r)) else "-" for r in INDEX_CELLS.values())]
            for p, e in d["results"].items()]  # fmt: skip


def _gpu_section(found: dict[str, Any], out: Path) -> str:
    if "gpu" not in found:
        return ("## GPU\n\nNot run yet: no GPU result is committed. On a machine with one CUDA GPU, "
                "`nox -s gpu -- --update-docs` writes it here (about 8 minutes).")  # fmt: skip
    d = found["gpu"]
    m = d["machine"]
    return (f"## GPU\n\n{m.get('gpu')}, commit {str(m['git_commit'])[:10]}, {m['time_utc']}: "
            f"[the full report](gpu.md).\n\n" + "\n".join(f"- {f}" for f in benchmark_pages.findings(d)))  # fmt: skip


def stale_words(problem: freshness.Problem) -> str:
    """How a page marks a stale result: "stale since <commit>" (the first change to the code it measures after it
    was measured), or why it cannot be shown current."""
    if problem.since:  # a reader gets the commit, not the commits' messages (a contributor's warning has them)
        return (f"**stale since {problem.since}**: the code it measures changed after it ran; refresh: "
                f"`{freshness.refresh_command(problem.benchmark)}`")  # fmt: skip
    return f"**stale**: {problem.message}"


def _freshness_lines(found: dict[str, Any], out: Path) -> list[str]:
    lines = []
    for name, d in found.items():
        m = d["machine"]
        problem = None
        try:
            problem = freshness.check_result(out / f"{name}.json")
        except RuntimeError:  # a folder outside this repository's history
            pass
        state = "current when this page was written" if problem is None else stale_words(problem)
        dirty = m.get("uncommitted_measured_files") or []
        lines.append(
            f"- [{PAGES[name]}]({name}.md): {d['duration_s']:.0f} s, {m['time_utc']}, "
            f"commit {str(m['git_commit'])[:10]} ({state}); load average at start {m['load_average_1_5_15'][0]}, "
            "at end "
            f"{m.get('load_average_at_end', ['?'])[0]} on {m['usable_cpus']} CPUs"
            + (
                f"; measured with uncommitted changes to {len(dirty)} measured file(s) ({', '.join(dirty[:3])}"
                f"{', ...' if len(dirty) > 3 else ''}; all listed in the JSON)"
                if dirty
                else ""
            )
            + (" (quick smoke run)" if d["quick"] else "")
        )
    return lines


def write(out: Path) -> Path:
    """Write ``out/index.md`` and ``out/analysis.md`` from the ``*.json`` results in ``out``; return index's path."""
    out.mkdir(parents=True, exist_ok=True)  # also when every benchmark failed before writing
    found, dropped = load(out)
    parts = [INTRO]
    overhead = [row for n in OVERHEAD if n in found for row in _overhead_rows(found[n])]
    if overhead:
        wall = [row for n in OVERHEAD if n in found for row in _overhead_rows(found[n], "wall")]
        head = ["backend", "model", "precision", "ours ms"]
        parts.append(
            f"## Per-step overhead (2 processes on CPU)\n\n{READING}\n\n"
            + md_table([*head, *(f"{k}, CPU time" for k in INDEX_CELLS)], overhead)
            + "\n\n" + details("The same ratios in wall time",
                               md_table([*head, *(f"{k}, wall time" for k in INDEX_CELLS)], wall))
        )  # fmt: skip
    if "memory" in found:
        header = ["setup", "ranks", "tracked tensor bytes (rank 0)", "peak RSS delta"]
        rows = [[r["setup"], r["world"], fmt_bytes(sum(r["bytes"].values())), fmt_bytes(r["peak_rss_delta"])]
                for r in found["memory"]["results"] if r["precision"] == "bf16-mixed"]  # fmt: skip
        parts.append("## Memory per rank (bf16-mixed)\n\n" + md_table(header, rows))
    for name in ("discovery", "memory", "memory-real", "numerics", "audit", "measure"):
        if name in found and (said := benchmark_pages.findings(found[name])):
            parts.append(f"## {PAGES[name]}\n\n" + "\n".join(f"- {f}" for f in said))
    parts.append(_gpu_section(found, out))
    total = sum(d["duration_s"] for d in found.values() if d["machine"].get("gpu") is None)
    parts.append(
        "## Results on this page\n\n"
        + (f"The CPU benchmarks took {total / 60:.1f} minutes in all on this machine at the load shown.\n\n" if total
           else "")
        + "\n".join(_freshness_lines(found, out) + [f"- {line}" for line in dropped])
    )  # fmt: skip
    (out / "index.md").write_text("\n\n".join(p.strip() for p in parts) + "\n")
    (out / "analysis.md").write_text(analysis(found, dropped))
    return out / "index.md"


# ---- analysis.md: the verdicts and the targets, in sentences generated from the numbers -------------------------
def _target(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def _overhead_reading(name: str, d: dict[str, Any]) -> list[str]:
    backend, _model = OVERHEAD[name]
    out = [f"### {PAGES[name]}\n"]
    loads = (d["machine"]["load_average_1_5_15"][0], d["machine"].get("load_average_at_end", ["?"])[0])
    out.append(f"{d['config']['rounds']} interleaved rounds x {d['config']['steps']} steps per variant, load average "
               f"{loads[0]} at the start and {loads[1]} at the end on {d['machine']['usable_cpus']} CPUs. "
               f"[Details]({name}.md).\n")  # fmt: skip
    for precision, e in d["results"].items():
        sentences = []
        for label, key in (
            ("ours / built-in", "ours/builtin"),
            ("ours / Lightning AMP", "ours/amp"),
            ("ours / hand-written", "ours/hand"),
            ("Lightning AMP / hand-written", "amp/hand"),
        ):
            w, c = e["wall"]["ratios"].get(key), e["cpu"]["ratios"].get(key)
            if w and c:
                sentences.append(f"{label}: wall {fmt_ratio(w)}; CPU time {fmt_ratio(c)}")
        skipped = (d["config"].get("builtin_skips") or {}).get(precision)
        skip = (
            f" The built-in does less work here on a CPU: {skipped}. The like-for-like figures are ours / "
            "Lightning AMP (same loop) and ours / hand-written (no Lightning loop)."
            if skipped
            else ""
        )
        if not sentences:  # only ours ran: the other variants failed (named below)
            ours = e["wall"]["step_s"].get("ours")
            sentences = [f"ours only, median step {ours['median'] * 1e3:.2f} ms" if ours else "no variant ran"]
            skip = ""
        out.append(f"- `{backend}:{precision}`: " + "; ".join(sentences) + "." + skip)
    out += [f"- `{backend}:{k.split('|')[0]}`, {k.split('|')[1]} failed: `{err}`" for k, err in
            (d.get("errors") or {}).items()]  # fmt: skip
    return out


def _targets(found: dict[str, Any]) -> list[str]:
    out = ["## Targets\n"]
    for name in ("overhead-fsdp", "overhead-deepspeed"):
        hooks = (found.get(name) or {}).get("hooks") or {}
        if hooks:
            over = [f"`{p}` {fmt_ratio(h['ours/builtin'])}" for p, h in hooks.items() if h["ours/builtin"]["ratio"] > 1]
            us = "; ".join(f"`{p}` {h['us_per_step']['ours']['median']:.1f} vs "
                           f"{h['us_per_step']['builtin']['median']:.1f}" for p, h in hooks.items())  # fmt: skip
            out.append(f"- The plugin's own per-step hooks at most the built-in's at every precision "
                       f"({OVERHEAD[name][0]}, µs per step ours vs built-in: {us}): {_target(not over)}"
                       + (f"; above 1: {', '.join(over)}." if over else "."))  # fmt: skip
    fsdp = found.get("overhead-fsdp")
    if fsdp and "16-mixed" in fsdp["results"]:
        cpu = fsdp["results"]["16-mixed"]["cpu"]["ratios"]
        r = cpu["ours/hand"]
        line = (
            f"- MLP, `fsdp:16-mixed`, ours / hand-written doing the same work (autocast + `GradScaler`), CPU "
            f"time, at most {TARGET_HAND_16_MIXED}: {fmt_ratio(r, 3)}: {_target(r['ratio'] <= TARGET_HAND_16_MIXED)}."
        )
        if "ours/amp" in cpu and "amp/hand" in cpu:
            a, h = cpu["ours/amp"], cpu["amp/hand"]
            line += (f" Split by the Lightning AMP run (the same work in the same Lightning loop): ours / Lightning "
                     f"AMP {fmt_ratio(a, 3)}, at most {TARGET_HAND_16_MIXED}: "
                     f"{_target(a['ratio'] <= TARGET_HAND_16_MIXED)}; Lightning AMP / hand-written {fmt_ratio(h, 3)} "
                     "(Lightning's loop alone).")  # fmt: skip
        out.append(line)
    real = [n for n, (_b, m) in OVERHEAD.items() if m != "mlp" and n in found]
    for name in real:
        for precision, e in found[name]["results"].items():
            key, words = like_for_like(found[name], precision)
            r = e["wall"]["ratios"].get(key)
            failed = (found[name].get("errors") or {}).get(f"{precision}|builtin")
            because = f" The built-in failed: `{failed}`." if failed else ""
            if r is None:
                ours_failed = (found[name].get("errors") or {}).get(f"{precision}|ours")
                out.append(f"- {PAGES[name]}, `{precision}`: not run on this machine: `{ours_failed}`." if ours_failed
                           else f"- {PAGES[name]}, `{precision}`: no ratio: only ours ran.{because}")  # fmt: skip
                continue
            ok = r["ci95"][0] <= 1 <= r["ci95"][1] and r["ci95"][1] <= TARGET_REAL_UPPER
            out.append(f"- {PAGES[name]}, `{precision}`, {words}, step time (wall): the interval includes 1 and its "
                       f"upper end is at most {TARGET_REAL_UPPER}: {fmt_ratio(r, 3)}: {_target(ok)}."
                       + because)  # fmt: skip
    mem = {(r["model"], r["setup"], r["precision"]): r for r in (found.get("memory-real") or {}).get("results", [])}
    for model, label in DECODER_LABELS.items():
        fp8, bf16 = mem.get((model, "ours-default", "fp8-tensorwise")), mem.get((model, "ours-default", "bf16-mixed"))
        if fp8 and bf16 and not fp8["error"] and not bf16["error"] and bf16["gathered_bytes_per_step"]:
            r = fp8["gathered_bytes_per_step"] / bf16["gathered_bytes_per_step"]
            out.append(f"- {label}, all-gather bytes per step, `fsdp:fp8-tensorwise` / `fsdp:bf16-mixed`, at most "
                       f"{TARGET_FP8_GATHER}: {r:.3f}: {_target(r <= TARGET_FP8_GATHER)}.")  # fmt: skip
    if len(out) == 1:
        out.append("- No result here to check a target against.")
    return out


def analysis(found: dict[str, Any], dropped: list[str]) -> str:
    loads = [d["machine"]["load_average_1_5_15"][0] for d in found.values()]
    loads += [d["machine"].get("load_average_at_end", [None])[0] for d in found.values()]
    known = [x for x in loads if x is not None]
    cpus = {d["machine"]["usable_cpus"] for d in found.values()}
    parts = [
        "# Reading the results\n",
        "Generated from the JSON results in this folder by `tools/docgen/benchmark_index.py`: every number and verdict "
        "below is computed from them. Each result's own page has its tables and chart.\n",
        reading(
            benchmark_pages.RATIO + " Each comparison is given in wall time and in CPU time per step.",
            INTERVAL,
            VERDICTS,
            benchmark_pages.ROUND,
            CPU_TIME,
        )
        + "\n",
    ]
    if known:
        parts.append(f"The machine's 1-minute load average ranged from {min(known)} to {max(known)} across the "
                     f"results, on {', '.join(map(str, sorted(cpus)))} usable CPUs: above the CPU count, runs wait "
                     "for a CPU, which widens wall-time intervals; CPU time per step leaves that wait "
                     "out.\n")  # fmt: skip
    parts += _targets(found)
    parts.append("\n## Per-step overhead\n")
    for name in OVERHEAD:
        if name in found:
            parts += [*_overhead_reading(name, found[name]), ""]
    for name in ("memory", "memory-real", "numerics", "discovery", "audit", "measure"):
        if name in found:
            parts.append(f"## {PAGES[name]}\n")
            parts += [f"- {f}" for f in benchmark_pages.findings(found[name])] or ["- Nothing beyond the tables."]
            parts.append("")
    if dropped:
        parts += ["## Left out\n", *(f"- {line}" for line in dropped)]
    return "\n".join(parts).rstrip() + "\n"


def redraw(out: Path) -> list[Path]:
    """Every result in ``out`` of the current harness schema drawn again from its JSON, measuring nothing: its page and
    chart (:func:`tools.docgen.benchmark_pages.write`), the ``findings`` its JSON stores brought up to the current
    wording (nothing else in the JSON changes), then ``index.md`` and ``analysis.md`` (:func:`write`). Returns the
    paths written."""
    found, _dropped = load(out)  # a result of an older schema keeps its page; write() lists it as left out
    written = []
    for name, d in found.items():
        said = benchmark_pages.findings(d)
        if d.get("findings") != said:
            d["findings"] = said
            (out / f"{name}.json").write_text(json.dumps(d, indent=1) + "\n")  # as bench.report.save writes it
            written.append(out / f"{name}.json")
        written += benchmark_pages.write(out, name)
    return [*written, write(out), out / "analysis.md"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a results folder's index.md and analysis.md from its JSON; "
                                     "--redraw: every result's page and chart too. Measures nothing.")  # fmt: skip
    parser.add_argument("folder", type=Path, nargs="?", default=freshness.ROOT / "docs" / "benchmarks")
    parser.add_argument("--redraw", action="store_true", help="draw every result's page and chart again from its JSON")
    args = parser.parse_args(argv)
    paths = redraw(args.folder) if args.redraw else [write(args.folder), args.folder / "analysis.md"]
    print("\n".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
