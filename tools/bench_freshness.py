"""Is a committed benchmark result current? Standard library and git only (CI's ``tools`` session runs it without
torch or numpy).

A result is current when (1) its ``schema`` is :data:`SCHEMA`, the version of the harness that writes results now,
and (2) the commit it records (``machine.git_commit``) contains the last commit that changed the code it measures:
the plugins' ``src/`` folders and the harness that ran it (:func:`measured`: the shared harness modules, the
benchmark's own module and its driver, ``benchmarks/run.py`` or ``benchmarks/gpu_bench.py``; the page generators in
tools/docgen/ and this module are outside benchmarks/, they change no measured number). A result from a commit git
does not know, or from a shallow clone, cannot be shown current and counts as a problem. GPU results
(:data:`NEEDS_GPU`) are checked the same way, but a stale one is a warning, not a failure: no CI machine here can
refresh it.

Staleness is information where a contributor works and a failure where results are published:

    python tools/bench_freshness.py [folder]            # one warning line per stale result; exit 0 (CI)
    python tools/bench_freshness.py --check [folder]    # exit 1 on a stale CPU result (nox -s bench -- --check,
                                                        # the release workflow)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "precision-plugins-bench/4"
"""Written into every result; raise it when a result's layout or the meaning of a measured figure changes."""
PACKAGE_SOURCES = ":(glob)packages/*/src/**"
"""Every package's code, whatever the package list holds (git pathspec)."""
MEASURED = (
    PACKAGE_SOURCES,
    "benchmarks/run.py",
    "benchmarks/gpu_bench.py",
    "benchmarks/bench",
)
"""git pathspecs of the code any result measures (each result: :func:`measured`)."""
NEEDS_GPU = ("gpu",)


SHARED = (
    PACKAGE_SOURCES,
    "benchmarks/bench/__init__.py",
    "benchmarks/bench/report.py",
    "benchmarks/bench/runs.py",
)
"""What every benchmark runs: the plugins and the shared harness (statistics and output, training runs; the models,
``precision_testsupport.architectures``, are package sources)."""
OWN = {"memory": ("memory.py",), "memory-real": ("memory.py",), "numerics": ("numerics.py",),
       "discovery": ("discovery.py",), "audit": ("audit.py",), "measure": ("measure.py",)}  # fmt: skip
"""Each benchmark's own modules under benchmarks/bench/ (``overhead-*``: overhead.py)."""


def measured(benchmark: str) -> tuple[str, ...]:
    """The pathspecs of the code ``benchmark`` measures: :data:`SHARED`, its own modules and its driver
    (``benchmarks/run.py``, or ``benchmarks/gpu_bench.py`` for the GPU result); for a benchmark not listed, every
    module under ``benchmarks/bench/``."""
    if benchmark in NEEDS_GPU:
        return (*SHARED, "benchmarks/gpu_bench.py")
    own = ("overhead.py",) if benchmark.startswith("overhead-") else OWN.get(benchmark)
    if own is None:
        return (*(p for p in MEASURED if p != "benchmarks/gpu_bench.py"),)
    return (*SHARED, *(f"benchmarks/bench/{m}" for m in own), "benchmarks/run.py")


REFRESH = "nox -s bench -- --update-docs"


def refresh_command(benchmark: str) -> str:
    """The command that rewrites one committed result."""
    if benchmark in NEEDS_GPU:
        return "nox -s gpu -- --update-docs (on a machine with one CUDA GPU)"
    return f"{REFRESH} --only {benchmark}"


@dataclass(frozen=True)
class Problem:
    benchmark: str
    message: str
    fatal: bool
    """Fails the publishing check (``--check``); GPU results only warn there too."""
    since: str | None = None
    """The first commit to the code the result measures after the one it was measured at (short hash), when that is
    why it is stale."""

    def __str__(self) -> str:
        return f"{self.benchmark}: {self.message}; refresh: {refresh_command(self.benchmark)}"


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)


def last_change(root: Path = ROOT, paths: tuple[str, ...] = MEASURED) -> str:
    """The full hash of the last commit that changed the code at ``paths``."""
    proc = _git(root, "log", "-1", "--format=%H", "HEAD", "--", *paths)
    if proc.returncode or not proc.stdout.strip():
        raise RuntimeError(f"git log found no commit changing the measured code in {root}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def check_result(path: Path, root: Path = ROOT) -> Problem | None:
    """The problem with one result file, or None when it is current."""
    data = json.loads(path.read_text(encoding="utf-8"))
    name = str(data.get("benchmark") or path.stem)
    fatal = name not in NEEDS_GPU
    if data.get("schema") != SCHEMA:
        return Problem(name, f"written by harness schema {data.get('schema')!r}, the harness writes {SCHEMA!r}", fatal)
    if data.get("quick"):
        return Problem(name, "a --quick smoke run was committed; published results need a full run", fatal)
    commit = (data.get("machine") or {}).get("git_commit")
    if not commit:
        return Problem(name, "the result records no source commit", fatal)
    if _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        return Problem(
            name, "this clone is shallow, so the source commit cannot be compared (git fetch --unshallow)", True
        )
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode:
        return Problem(name, f"its source commit {commit} is not in this repository's history", fatal)
    paths = measured(name)
    last = last_change(root, paths)
    if _git(root, "merge-base", "--is-ancestor", last, commit).returncode:
        since = _git(root, "log", "--format=%h %s", f"{commit}..{last}", "--", *paths).stdout.splitlines()
        named = "; ".join(line[:90] for line in since[:3]) + ("; ..." if len(since) > 3 else "")
        return Problem(
            name,
            f"measured at commit {commit[:10]}, older than {last[:10]}, the last change to the code it measures "
            f"({len(since)} commit(s) to the plugins or its harness since: {named})",
            fatal,
            since=since[-1].split()[0] if since else last[:10],
        )
    return None


def check_folder(folder: Path, root: Path = ROOT) -> list[Problem]:
    """Every ``*.json`` result in ``folder`` that is not current."""
    return [p for r in sorted(folder.glob("*.json")) if (p := check_result(r, root)) is not None]


def main(argv: list[str] | None = None) -> int:
    """Print one line per stale result in the folder; with ``--check``, exit 1 when a CPU result is stale."""
    parser = argparse.ArgumentParser(description="Are the committed benchmark results current?")
    parser.add_argument("folder", nargs="?", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--check", action="store_true", help="fail on a stale CPU result (where results are published)")
    args = parser.parse_args(argv)
    problems = check_folder(args.folder)
    for p in problems:
        if args.check:
            print(("STALE " if p.fatal else "stale (warning, refreshed on a GPU machine) ") + str(p))
        else:
            where = "`nox -s bench -- --check` fails on it" if p.fatal else "a GPU result is a warning everywhere"
            print(f"warning: stale benchmark result {p} (not a failure here; {where})")
    if not problems:
        print(f"every result in {args.folder} is current")
    return 1 if args.check and any(p.fatal for p in problems) else 0


if __name__ == "__main__":
    sys.exit(main())
