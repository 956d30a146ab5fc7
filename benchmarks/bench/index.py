"""``index.md`` of a results folder: the headline numbers of every result found there and links to the details;
in ``docs/benchmarks`` also ``analysis.md`` (the maintainers' reading of the committed run) verbatim."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report import SCHEMA, fmt_bytes, fmt_ratio, md_table

PAGES = {"overhead-fsdp": "Per-step overhead: FSDP2", "overhead-deepspeed": "Per-step overhead: DeepSpeed",
         "discovery": "Discovery cost", "memory": "Memory per rank", "numerics": "Numerics",
         "gpu": "GPU: step overhead and throughput", "fp8-gpu": "GPU: FP8 against bf16-mixed"}  # fmt: skip
INTRO = """# Benchmarks

Our precision plugins measured side by side with Lightning's built-in plugins and with a hand-written torch loop
doing the same casts, autocast and loss scaling (the floor). Every figure is a ratio of two things measured in the
same run, interleaved, on the same machine; spreads are 95% bootstrap intervals of the ratio of medians.

Reproduce: `python benchmarks/run.py` (results into `build/benchmarks/`; `--update-docs` writes this folder;
`--quick` for a smoke run). On a CUDA machine: `python benchmarks/gpu_bench.py`. Each page records the machine.

**What the CPU comparison can and cannot say.** Lightning's built-in `FSDPPrecision` hard-codes
`torch.autocast("cuda")`: on CPU its `*-mixed` precisions run no autocast (every op, LayerNorm and softmax
included, in bf16/fp16) and reduce gradients in bf16/fp16; ours autocasts on the model's device and reduces in fp32
by default. So for FSDP `*-mixed`, "ours vs built-in" compares two different computations; the
`ours reduce=low` column separates the parts. Lightning's own `DeepSpeedStrategy` refuses the
CPU, so both DeepSpeed Lightning variants run on precision-deepspeed's `DeepSpeedCPUStrategy`. On a CPU without
AVX-512 BF16/FP16, bf16 and fp16 compute are slower than fp32: compare plugins within a precision.
"""


def _overhead_rows(d: dict[str, Any]) -> list[list[str]]:
    cells = [("wall", "ours/builtin"), ("wall", "ours/hand"), ("cpu", "ours/builtin"), ("cpu", "ours/hand")]
    return [[d["config"]["backend"], p, f"{e['wall']['step_s']['ours']['median'] * 1e3:.2f}",
             *(f"{fmt_ratio(e[k]['ratios'][r])} ({e[k]['ratios'][r]['verdict']})" for k, r in cells)]
            for p, e in d["results"].items()]  # fmt: skip


def write(out: Path) -> Path:
    """Write ``out/index.md`` from the ``*.json`` results in ``out``; return its path."""
    out.mkdir(parents=True, exist_ok=True)  # also when every benchmark failed before writing
    loaded = {n: json.loads((out / f"{n}.json").read_text()) for n in PAGES if (out / f"{n}.json").exists()}
    found = {n: d for n, d in loaded.items() if d.get("schema") == SCHEMA}  # results of an older harness: left out
    parts = [INTRO]
    overhead = [row for n in ("overhead-fsdp", "overhead-deepspeed") if n in found for row in _overhead_rows(found[n])]
    if overhead:
        header = ["backend", "precision", "ours: step ms", *(f"{k}: ours / {v}" for k in ("wall", "CPU")
                                                              for v in ("built-in", "hand-written"))]  # fmt: skip
        parts.append(
            "## Per-step overhead (2 processes on CPU)\n\nAbove 1: ours is slower.\n\n" + md_table(header, overhead)
        )
    if "memory" in found:
        header = ["setup", "ranks", "tracked tensor bytes (rank 0)", "peak RSS delta"]
        rows = [[r["setup"], r["world"], fmt_bytes(sum(r["bytes"].values())), fmt_bytes(r["peak_rss_delta"])]
                for r in found["memory"]["results"] if r["precision"] == "bf16-mixed"]  # fmt: skip
        parts.append("## Memory per rank (bf16-mixed)\n\n" + md_table(header, rows))
    for name, d in found.items():
        if d["findings"] and not name.startswith("overhead"):
            parts.append(f"## {PAGES[name]}\n\n" + "\n".join(f"- {f}" for f in d["findings"]))
    if "gpu" not in found:
        parts.append("## GPU\n\nNo GPU result here yet: `python benchmarks/gpu_bench.py` on a CUDA machine.")
    if (out / "analysis.md").exists():
        parts.append((out / "analysis.md").read_text().strip())
    runs = [f"- [{PAGES[n]}]({n}.md): {d['duration_s']:.0f} s, {d['machine']['time_utc']}, commit "
            f"{d['machine']['git_commit']}" + (" (quick smoke run)" if d["quick"] else "")
            for n, d in found.items()]  # fmt: skip
    parts.append("## Results on this page\n\n" + "\n".join(runs))
    (out / "index.md").write_text("\n\n".join(p.strip() for p in parts) + "\n")
    return out / "index.md"
