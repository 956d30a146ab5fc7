"""Writing results: one JSON, one markdown page and one PNG per benchmark, into ``docs/benchmarks/``.

Every JSON result has the same top level (``schema`` names its version)::

    {"schema": "precision-plugins-bench/1", "benchmark": "<name>", "quick": bool,
     "machine": {...machine_info()...}, "duration_s": float, "config": {...}, "results": ..., "findings": [...]}
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.machine import ROOT

SCHEMA = "precision-plugins-bench/1"
DOCS = ROOT / "docs" / "benchmarks"


def envelope(
    benchmark: str,
    *,
    machine: dict[str, Any],
    config: dict[str, Any],
    results: Any,
    duration_s: float,
    quick: bool,
    findings: Sequence[str] = (),
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "quick": quick,
        "machine": machine,
        "duration_s": round(duration_s, 2),
        "config": config,
        "results": results,
        "findings": list(findings),
    }


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(data), indent=1, sort_keys=False) + "\n")
    return path


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub/mkdocs markdown table; cells are str()-ed and pipes escaped."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_md(machine: dict[str, Any]) -> str:
    v = machine.get("versions", {})
    mem = machine.get("memory_total_bytes")
    parts = [
        f"CPU: {machine.get('cpu_model')} ({machine.get('usable_cpus')} usable of {machine.get('logical_cpus')} "
        f"logical CPUs; flags: {', '.join(machine.get('cpu_flags') or []) or 'none of note'})",
        f"memory: {mem / 2**30:.1f} GiB" if mem else "memory: ?",
        "versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val),
        f"commit {machine.get('git_commit')}, {machine.get('time_utc')}, load average at start "
        f"{machine.get('load_average_1_5_15')}",
        f"command: `{machine.get('command')}`",
    ]
    return "\n".join(f"- {p}" for p in parts)


def write_markdown(path: Path, title: str, body: str, data: dict[str, Any]) -> Path:
    quick = " (quick smoke run: too few samples to quote)" if data.get("quick") else ""
    text = (
        f"# {title}\n\n{body.strip()}\n\n## Machine{quick}\n\n{machine_md(data['machine'])}\n"
        f"- duration of this benchmark: {data['duration_s']:.0f} s\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def fmt_bytes(n: float | None) -> str:
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def pyplot() -> Any:
    """matplotlib's pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
