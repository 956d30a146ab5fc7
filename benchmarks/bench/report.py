"""Statistics (numpy, ``scipy.stats.bootstrap``) and the output files: one JSON, one markdown page, one PNG each.

Conventions: a *summary* is the median with the 25th/75th percentiles; the *ratio* of A to B is
median(A) / median(B) with a 95% percentile-bootstrap interval (samples resampled independently, fixed seed) and
the 20th-percentile ratio beside it (other load only adds time); it is called slower/faster only when the whole
interval is on one side of 1 *and*, for samples taken in interleaved rounds, every round's ratio agrees.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from packaging.utils import canonicalize_name
from scipy import stats

from bench.freshness import MEASURED, ROOT, SCHEMA

__all__ = ["ROOT", "SCHEMA"]
VERSIONS = ("torch", "lightning", "deepspeed", "precision-base", "precision-fsdp", "precision-deepspeed")


def summarize(values: Sequence[float]) -> dict[str, float]:
    p25, med, p75 = (float(v) for v in np.percentile(values, [25, 50, 75]))
    return {"n": len(values), "median": med, "p25": p25, "p75": p75, "iqr": p75 - p25, "rel_iqr": (p75 - p25) / med}


def _interval(a: Sequence[float], b: Sequence[float], q: float) -> tuple[float, float]:
    def ratio(x: Any, y: Any, axis: int = -1) -> Any:
        return np.percentile(x, q, axis=axis) / np.percentile(y, q, axis=axis)

    res = stats.bootstrap(
        (np.asarray(a), np.asarray(b)), ratio, n_resamples=2000, method="percentile", rng=np.random.default_rng(0)
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def ratio(a: Sequence[float], b: Sequence[float], rounds_a: Any = None, rounds_b: Any = None) -> dict[str, Any]:
    """median(a) / median(b), its 95% interval, the p20 ratio, per-round ratios and a verdict."""
    lo, hi = _interval(a, b, 50)
    out: dict[str, Any] = {
        "ratio": float(np.median(a) / np.median(b)),
        "ci95": [lo, hi],
        "p20": float(np.percentile(a, 20) / np.percentile(b, 20)),
        "verdict": "slower" if lo > 1 else "faster" if hi < 1 else "same within spread",
    }
    if rounds_a and rounds_b:
        per_round = [float(np.median(x) / np.median(y)) for x, y in zip(rounds_a, rounds_b, strict=True)]
        out["per_round"] = per_round
        if (out["verdict"] == "slower" and min(per_round) <= 1) or (out["verdict"] == "faster" and max(per_round) >= 1):
            out["verdict"] = "same within spread (rounds disagree)"
    return out


def fmt_ratio(r: dict[str, Any]) -> str:
    return f"{r['ratio']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]; p20 {r['p20']:.3f}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    unit, size = next(((u, s) for u, s in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)) if abs(n) >= s), ("B", 0))
    return f"{n / size:.2f} {unit}" if size else f"{int(n)} B"


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(cell, row)) + " |" for row in rows])


def machine_info() -> dict[str, Any]:
    """CPU, cores, memory, versions, commit, load, time and command: recorded with every result."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")), None)
    flags = next((ln.split(":", 1)[1].split() for ln in cpuinfo.splitlines() if ln.startswith("flags")), [])
    installed: dict[str, str] = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    versions = {"python": platform.python_version(), **{d: installed.get(d) for d in VERSIONS}}
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", *MEASURED], capture_output=True,
                           text=True).stdout.splitlines()  # fmt: skip
    return {
        "cpu_model": model or platform.processor(),
        "cpu_flags": [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16") if f in flags],
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "versions": versions,
        "git_commit": commit.stdout.strip() or None,
        "uncommitted_measured_files": [line[3:] for line in dirty],
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }


def legend_below(fig: Any, ax: Any, entries: int, columns: int = 3) -> None:
    """The axes' legend below the plot, outside it, in up to ``columns`` columns (readable at page width)."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=min(columns, max(entries, 1)), frameon=False)


def write(
    out: Path, name: str, title: str, body: str, plot: Callable[[Any], Any], start: float, **data: Any
) -> list[Path]:
    """Write ``<name>.json`` (top level: schema, benchmark, duration_s and ``data``: quick, machine, config, results,
    findings), ``<name>.md`` (``body`` and the
    machine) and ``<name>.png`` (the figure ``plot(pyplot)`` returns); ``start``: ``perf_counter()`` at the start."""
    out.mkdir(parents=True, exist_ok=True)
    data["machine"] = {**data["machine"], "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}
    data = {"schema": SCHEMA, "benchmark": name, "duration_s": time.perf_counter() - start, **data}
    clean = json.loads(json.dumps(data), parse_constant=lambda _: None)  # JSON has no NaN/inf: null instead
    (out / f"{name}.json").write_text(json.dumps(clean, indent=1) + "\n")
    m = data["machine"]
    quick = " (quick smoke run: too few samples to quote)" if data.get("quick") else ""
    facts = [
        f"CPU: {m['cpu_model']} ({m['usable_cpus']} usable CPUs; flags: {', '.join(m['cpu_flags']) or 'none of note'})",
        f"memory: {m['memory_total_bytes'] / 2**30:.1f} GiB",
        "versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v),
        f"commit {str(m['git_commit'])[:10]}, {m['time_utc']}; load average (1, 5, 15 min) at start "
        f"{m['load_average_1_5_15']}, at end {m['load_average_at_end']} on {m['usable_cpus']} CPUs",
        *(
            [
                f"uncommitted changes to {len(dirty)} measured file(s) at the start: {', '.join(dirty[:5])}"
                + (", ... (all in the JSON)" if len(dirty) > 5 else "")
            ]
            if (dirty := m.get("uncommitted_measured_files"))
            else []
        ),
        f"command: `{m['command']}`; duration {data['duration_s']:.0f} s",
    ]
    findings = "".join(f"\n- {f}" for f in data.get("findings", []))
    (out / f"{name}.md").write_text(
        f"# {title}\n\n{body.strip()}\n{findings}\n\n![{title}]({name}.png)\n\n## Machine{quick}\n\n"
        + "\n".join(f"- {f}" for f in facts)
        + "\n"
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # figures at most ~8 in wide, shown at the page's ~800 px width: text stays at 11-13 pt there
    with plt.rc_context({"font.size": 12, "axes.titlesize": 13, "axes.labelsize": 12, "legend.fontsize": 11,
                         "xtick.labelsize": 11, "ytick.labelsize": 11}):  # fmt: skip
        fig = plot(plt)
        fig.savefig(out / f"{name}.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return [out / f"{name}.{ext}" for ext in ("json", "md", "png")]
