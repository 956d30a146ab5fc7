"""``index.md`` of the results folder: one section per benchmark result found there (stub; filled in later)."""

from __future__ import annotations

from pathlib import Path


def write(out: Path, durations: dict[str, float]) -> Path:
    path = out / "index.md"
    path.write_text(
        "# Benchmarks\n\n"
        + "\n".join(f"- [{p.stem}]({p.name})" for p in sorted(out.glob("*.md")) if p.name != "index.md")
        + "\n"
    )
    return path
