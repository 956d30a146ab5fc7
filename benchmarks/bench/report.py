"""Statistics, the machine a result ran on and the result files: ``<name>.json``, then its page (``<name>.md``,
``<name>.png``), drawn from that JSON by :mod:`tools.docgen.benchmark_pages`. A *summary* is the median with the
25th/75th percentiles; a *ratio* is called slower/faster only when its whole 95% bootstrap interval is on one side of
1 *and*, for samples taken in interleaved rounds, every round's ratio agrees."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from packaging.utils import canonicalize_name
from scipy import stats

from tools.bench_freshness import MEASURED, ROOT, SCHEMA
from tools.docgen import benchmark_pages
from tools.packages import packages

__all__ = ["ROOT", "SCHEMA"]
DOCS = ROOT / "docs" / "benchmarks"
VERSIONS = ("torch", "lightning", "deepspeed", *(pkg.dist for pkg in packages().values()))
"""The distributions whose versions every result records: the frameworks and every package of the package list."""


def summarize(values: Sequence[float]) -> dict[str, float]:
    p25, med, p75 = (float(v) for v in np.percentile(values, [25, 50, 75]))
    return {"n": len(values), "median": med, "p25": p25, "p75": p75, "iqr": p75 - p25, "rel_iqr": (p75 - p25) / med}


def ratio(a: Sequence[float], b: Sequence[float], rounds_a: Any = None, rounds_b: Any = None) -> dict[str, Any]:
    """median(a) / median(b), its 95% interval, the p20 ratio, per-round ratios and a verdict."""

    def of_medians(x: Any, y: Any, axis: int = -1) -> Any:
        return np.percentile(x, 50, axis=axis) / np.percentile(y, 50, axis=axis)

    res = stats.bootstrap((np.asarray(a), np.asarray(b)), of_medians, n_resamples=2000, method="percentile",
                          rng=np.random.default_rng(0))  # fmt: skip
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
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


def compare(rounds: dict[str, list[list[float]]], pairs: Iterable[tuple[str, str]]) -> tuple[dict[str, Any], Any]:
    """Variants timed in interleaved rounds (variant -> step times per round): each variant's summary over all its
    rounds, and ``"a/b"``: :func:`ratio` with per-round ratios for each pair of ``pairs`` that both ran."""
    pooled = {v: [t for r in rs for t in r] for v, rs in rounds.items()}
    ratios = {f"{a}/{b}": ratio(pooled[a], pooled[b], rounds[a], rounds[b]) for a, b in pairs
              if a in rounds and b in rounds}  # fmt: skip
    return {v: summarize(ts) for v, ts in pooled.items()}, ratios


def _git(*args: str) -> str:
    """``git``'s output in the repository, or "" where there is no git (a GPU node) or no repository."""
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout
    except OSError:
        return ""


def machine_info() -> dict[str, Any]:
    """CPU, cores, memory, versions, commit, load, time and command: recorded with every result."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")), None)
    flags = next((ln.split(":", 1)[1].split() for ln in cpuinfo.splitlines() if ln.startswith("flags")), [])
    installed: dict[str, str] = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    versions = {"python": platform.python_version(), **{d: installed.get(d) for d in VERSIONS}}
    commit = os.environ.get("PRECISION_PLUGINS_COMMIT") or _git("rev-parse", "HEAD").strip()  # the kit's on a node
    dirty = _git("status", "--porcelain", "--", *MEASURED).splitlines()
    return {
        "cpu_model": model or platform.processor(),
        "cpu_flags": [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16") if f in flags],
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "versions": versions,
        "git_commit": commit or None,
        "uncommitted_measured_files": [line[3:] for line in dirty],
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }


def choose(parser: argparse.ArgumentParser, label: str, text: str, allowed: Sequence[str]) -> list[str]:
    """The names in a comma-separated option, or a usage error naming ``allowed`` when one is not in it or none is."""
    chosen = [c.strip() for c in text.split(",") if c.strip()]
    if not chosen or (bad := [c for c in chosen if c not in allowed]):
        parser.error(f"unknown {label}(s) {', '.join(chosen and bad) or '(none)'}; choose from {', '.join(allowed)}")
    return chosen


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A driver's parser (described by ``doc``'s first paragraph) with ``--out FOLDER`` or ``--update-docs``."""
    driver = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    where = driver.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, default=ROOT / "build" / "benchmarks", help="output folder")
    where.add_argument("--update-docs", action="store_true", help=f"write into {DOCS.relative_to(ROOT)}")
    return driver


def parse(driver: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The driver's arguments, ``out`` being :data:`DOCS` under ``--update-docs``."""
    args = driver.parse_args(argv)
    args.out = DOCS if args.update_docs else args.out
    return args


def save(out: Path, name: str, start: float, **data: Any) -> list[Path]:
    """Write ``<name>.json`` (schema, benchmark, duration_s, ``data``, findings), then ``<name>.md`` and ``.png``;
    ``start``: ``perf_counter()`` at the start. Returns the three paths."""
    out.mkdir(parents=True, exist_ok=True)
    data["machine"] = {**data["machine"], "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}
    data = {"schema": SCHEMA, "benchmark": name, "duration_s": time.perf_counter() - start, **data}
    clean = json.loads(json.dumps(data), parse_constant=lambda _: None)  # JSON has no NaN/inf: null instead
    clean["findings"] = benchmark_pages.findings(clean)
    (out / f"{name}.json").write_text(json.dumps(clean, indent=1) + "\n")
    return [out / f"{name}.json", *benchmark_pages.write(out, name)]
