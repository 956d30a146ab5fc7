"""The version matrix: cells from ``tools/matrix.toml``, one JSON report per cell, the compatibility table.

nox is the only runner. Each ``tests-<module>(...)`` session is one cell; while it runs, :func:`reporting`
writes ``build/matrix/reports/<session>.json`` (requested and installed versions, status, test counts, the first
failures). ``python -m tools.matrix table`` (the ``compat_table`` nox session, last in ``nox -t matrix``) merges
the reports into ``build/matrix/compatibility.{md,json}``; ``--update-docs`` writes ``docs/compatibility.{md,json}``
and each package README's rows instead (tracked files), ``--merge`` keeps the committed cells that did not run.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from tools.compat import first_failures, junit_counts, write
from tools.packages import ROOT, Package, packages

MATRIX_FILE = ROOT / "tools" / "matrix.toml"
BUILD = ROOT / "build" / "matrix"
REPORTS = BUILD / "reports"
DOCS_TABLE = ROOT / "docs" / "compatibility.md"


def load(path: Path = MATRIX_FILE) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


@dataclass(frozen=True, eq=True)
class Cell:
    """One cell: a package on one Python with one value per crossed axis (or ``variant="lowest"``)."""

    package: str
    python: str
    axes: dict[str, str] = field(default_factory=dict)
    variant: str | None = None

    @property
    def requested(self) -> dict[str, str]:
        return {"python": self.python, **self.axes, **({"variant": self.variant} if self.variant else {})}

    @property
    def id(self) -> str:
        """The nox parameter id, e.g. ``python='3.11', torch='2.13', lightning='2.6'``."""
        return ", ".join(f"{k}={v!r}" for k, v in {"python": self.python, **self.axes}.items())


def _spec(entry: str | dict[str, Any]) -> str:
    return entry if isinstance(entry, str) else str(entry["spec"])


def requirements(cell: Cell, matrix: dict[str, Any]) -> list[str]:
    """``name<spec>`` for each axis of the cell, e.g. ``torch==2.13.*`` (the cell's constraints file)."""
    return [f"{axis}{_spec(matrix['axes'][axis][value])}" for axis, value in cell.axes.items()]


def ci_requirement(axis: str, matrix: dict[str, Any]) -> str:
    """The CI cell's requirement on one axis, e.g. ``torch==2.13.*``."""
    return f"{axis}{_spec(matrix['axes'][axis][str(matrix['ci'][axis])])}"


INDEX_VARIABLES = (
    "UV_DEFAULT_INDEX",
    "UV_INDEX",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
)
"""Where uv and pip read extra package indexes from the environment (CI sets PyTorch's CPU index in them)."""


def cpu_torch_index(env: dict[str, str]) -> str | None:
    """The PyTorch CPU wheel index (``.../whl/cpu``) that ``env`` gives uv or pip, if any."""
    for name in INDEX_VARIABLES:
        for url in env.get(name, "").split():
            if url.rstrip("/").endswith("/whl/cpu"):
                return url
    return None


def lowest_torch_constraint(pkg: Package, matrix: dict[str, Any], env: dict[str, str]) -> str:
    """The torch line of a ``lowest-<module>`` session's constraint file.

    A package that declares a torch floor gets torch at that floor. With PyTorch's CPU index configured (as CI
    does for every session), ``uv --resolution lowest-direct`` would still pick the package index's plain
    ``2.4.0`` (a CUDA build on Linux, several GB) over ``2.4.0+cpu``, because a local version sorts above its public
    one; so the line pins the CPU build, ``torch==2.4.0+cpu``. Without that index it is ``torch==2.4.0`` (what the
    machine's own configuration provides). precision-base declares no torch: the CI cell's torch (``torch==2.13.*``,
    resolved highest, so the CPU index's ``+cpu`` build wins as in the other sessions).
    """
    from packaging.requirements import Requirement
    from packaging.version import Version

    floors = [
        Version(s.version)
        for dep in pkg.dependencies()
        if Requirement(dep).name == "torch"
        for s in Requirement(dep).specifier
        if s.operator == ">="
    ]
    if not floors:
        return ci_requirement("torch", matrix)
    release = (*max(floors).release, 0, 0)[:3]
    floor = ".".join(map(str, release))
    return f"torch=={floor}+cpu" if cpu_torch_index(env) else f"torch=={floor}"


def excluded_notes(matrix: dict[str, Any]) -> list[str]:
    """One sentence per ``[[exclude]]`` rule and ``[left_out] notes`` line: ``python 3.11, torch 2.4: <reason>``
    (axis and version in words, never a Python dict)."""
    rules = [
        ", ".join(f"{axis} {value}" for axis, value in r["match"].items()) + f": {r['reason']}"
        for r in matrix.get("exclude", [])
    ]
    return rules + list(matrix.get("left_out", {}).get("notes", []))


def environment(cell: Cell, matrix: dict[str, Any]) -> dict[str, str]:
    """Environment variables the cell's axis values ask for (``env = {...}`` in ``tools/matrix.toml``)."""
    env: dict[str, str] = {}
    for axis, value in cell.axes.items():
        entry = matrix["axes"][axis][value]
        if isinstance(entry, dict):
            env.update({k: str(v) for k, v in entry.get("env", {}).items()})
    return env


def _excluded(values: dict[str, str], matrix: dict[str, Any]) -> str | None:
    for rule in matrix.get("exclude", []):
        if all(values.get(k) == v for k, v in rule["match"].items()):
            return str(rule["reason"])
    return None


def crossed(pkg: Package, matrix: dict[str, Any]) -> list[str]:
    return list(matrix["crossed"].get(pkg.dist, matrix["crossed"]["default"]))


def extra_axes(pkg: Package, torch: str | None, matrix: dict[str, Any]) -> list[str]:
    """The axes a package's cells on ``torch`` are crossed over besides :func:`crossed`: the ``axes`` of its
    ``[extras]`` entry (e.g. ``torchao`` for precision-fsdp's fp8 extra), where that entry installs the extras."""
    entry = matrix.get("extras", {}).get(pkg.dist)
    if not entry or (torch or str(matrix["ci"]["torch"])) not in entry.get("torch", []):
        return []
    return list(entry.get("axes", []))


def _with_extra_axes(cell: Cell, pkg: Package, matrix: dict[str, Any], given: dict[str, Any]) -> list[Cell]:
    """``cell`` crossed over its :func:`extra_axes`; a value in ``given`` (an ``[[extra]]`` entry) fixes that axis."""
    names = extra_axes(pkg, cell.axes.get("torch"), matrix)
    choices = [[str(given[n])] if n in given else list(matrix["axes"][n]) for n in names]
    return [
        Cell(cell.package, cell.python, {**cell.axes, **dict(zip(names, values, strict=True))}, cell.variant)
        for values in itertools.product(*choices)
    ]


def cells(pkg: Package, matrix: dict[str, Any]) -> list[Cell]:
    """The package's crossed cells at the default Python, then its ``[[extra]]`` cells, minus the excluded ones.
    Each cell is also crossed over the axes its extras bring (:func:`extra_axes`)."""
    names = crossed(pkg, matrix)
    python = str(matrix["python"]["default"])
    found = [
        crossed_cell
        for values in itertools.product(*(matrix["axes"][n] for n in names))
        for crossed_cell in _with_extra_axes(
            Cell(pkg.dist, python, dict(zip(names, values, strict=True))), pkg, matrix, {}
        )
    ]
    for extra in matrix.get("extra", []):
        if extra["package"] in ("all", pkg.dist):
            cell = Cell(pkg.dist, str(extra["python"]), {n: str(extra[n]) for n in names})
            found += _with_extra_axes(cell, pkg, matrix, extra)
    unique = {c.id: c for c in found}.values()
    return [c for c in unique if _excluded(c.requested, matrix) is None]


def ci_cell(pkg: Package, matrix: dict[str, Any]) -> Cell:
    ci = matrix["ci"]
    names = crossed(pkg, matrix) + extra_axes(pkg, str(ci["torch"]), matrix)
    return Cell(pkg.dist, str(ci["python"]), {n: str(ci[n]) for n in names})


def extras(pkg: Package, cell: Cell, matrix: dict[str, Any]) -> str:
    """``"[fp8]"``-style extras of ``pkg`` to install in ``cell`` (``[extras]`` in matrix.toml), or ``""``."""
    entry = matrix.get("extras", {}).get(pkg.dist)
    if not entry or cell.axes.get("torch", matrix["ci"]["torch"]) not in entry.get("torch", []):
        return ""
    return f"[{entry['extras']}]"


def test_paths(pkg: Package, matrix: dict[str, Any]) -> list[str]:
    extra = matrix.get("tests", {})
    return [str(pkg.tests.relative_to(ROOT)), *extra.get(pkg.dist, []), *extra.get("all", [])]


def slug(session_name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in session_name)


def recorded(junit: Path) -> dict[str, str]:
    """What the cell's tests recorded with pytest's ``record_testsuite_property`` (or ``record_property`` under
    junit_family xunit1): ``name -> value`` in junit order, e.g. which torchao training API path each fp8 precision
    took (``packages/precision-fsdp/tests/test_torchao_paths.py``)."""
    import xml.etree.ElementTree as ET

    return {str(prop.get("name")): str(prop.get("value")) for prop in ET.parse(junit).getroot().iter("property")}


class CellFailed(Exception):
    """Raised inside :func:`reporting` to mark the stage that failed; the report is written, nox sees the error."""


@dataclass
class Report:
    session: str
    package: str
    requested: dict[str, str]
    junit: Path
    env: Path
    folder: Path = REPORTS
    started: float = field(default_factory=time.time)

    def write(self, status: str, reason: str = "") -> None:
        data = {
            "session": self.session,
            "package": self.package,
            "requested": self.requested,
            "status": status,
            "reason": reason,
            "installed": json.loads(self.env.read_text()) if self.env.exists() else None,
            "tests": junit_counts(self.junit) if self.junit.exists() else None,
            "recorded": recorded(self.junit) if self.junit.exists() else {},
            "started": self.started,
            "duration_s": round(time.time() - self.started, 1),
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{slug(self.session)}.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


@contextlib.contextmanager
def reporting(session_name: str, cell: Cell, folder: Path = REPORTS) -> Iterator[Report]:
    """Write the cell's report whatever happens: passed, failed (tests ran), error (did not reach them), skipped."""
    name = slug(session_name)
    junit, env = folder / f"{name}.junit.xml", folder / f"{name}.env.json"
    report = Report(session_name, cell.package, cell.requested, junit, env, folder)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in (report.junit, report.env):
        stale.unlink(missing_ok=True)
    try:
        yield report
    except BaseException as exc:  # nox's skip and failure are exceptions too; report, then let nox see them
        if type(exc).__name__ == "_SessionSkip":
            report.write("skipped", str(exc))
        elif report.junit.exists():
            report.write("failed", "; ".join(first_failures(report.junit)) or str(exc))
        else:
            report.write("error", f"did not reach the tests: {exc}")
        raise
    report.write("passed")


def collect(reports: Path = REPORTS) -> list[dict[str, Any]]:
    """Every cell report in ``reports``, in a stable order (package list order, then session name)."""
    order = [p.dist for p in packages().values()]
    found = []
    for path in sorted(reports.glob("*.json")):
        if path.name.endswith(".env.json"):
            continue
        cell = json.loads(path.read_text())
        junit = path.with_name(path.name.removesuffix(".json") + ".junit.xml")
        if junit.exists():  # counted by the current rules (unit tests apart from the real fit, xfails apart)
            cell["tests"] = junit_counts(junit)
        found.append(cell)
    return sorted(found, key=lambda c: (order.index(c["package"]) if c["package"] in order else 99, c["session"]))


def table(update_docs: bool = False, merge: bool = False, reports: Path = REPORTS, out: Path = BUILD) -> Path:
    """Write the compatibility table from the reports into ``out`` (or docs/); returns the Markdown file written."""
    matrix = load()
    results = collect(reports)
    if not results:
        raise SystemExit(f"no cell reports in {reports}: run `nox -t matrix` (or some tests-* cells) first")
    if merge:
        fresh = {r["session"]: r for r in results}
        old = json.loads(DOCS_TABLE.with_suffix(".json").read_text())["cells"]
        results = [fresh.pop(c["session"], c) for c in old] + list(fresh.values())
    for cell in results:
        note = matrix.get("explained", {}).get(cell["session"])
        if note and cell["status"] in ("failed", "error"):
            cell["reason"] = f"{note} First failures: {cell.get('reason', '')}"
    started = [float(c["started"]) for c in results if "started" in c]
    ended = [float(c["started"]) + float(c["duration_s"]) for c in results if "started" in c]
    listed = sum(len(cells(p, matrix)) + 1 for p in packages().values())
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{matrix['python']['default']} by default; see each cell's Python",
        "duration_min": round((max(ended) - min(started)) / 60, 1) if started else None,
        "cell_min": round(sum(float(c["duration_s"]) for c in results if "duration_s" in c) / 60, 1),
        "cells_run": f"{len(results)} cells reported; {listed} are defined",
        "excluded": excluded_notes(matrix),
        "command": "nox -t matrix; nox -s compat_table -- --update-docs" + (" --merge" if merge else ""),
    }
    md = DOCS_TABLE if update_docs else out / "compatibility.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    write(results, meta, md, md.with_suffix(".json"), readmes=update_docs)
    return md


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.matrix", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_table = sub.add_parser("table", help="merge the cell reports into the compatibility table")
    p_table.add_argument("--update-docs", action="store_true", help="write docs/compatibility.* and package READMEs")
    p_table.add_argument("--merge", action="store_true", help="keep the committed cells that did not run")
    p_table.add_argument("--reports", type=Path, default=REPORTS)
    sub.add_parser("list", help="print every cell")
    args = parser.parse_args(argv)
    if args.command == "list":
        matrix = load()
        for pkg in packages().values():
            for cell in cells(pkg, matrix):
                print(f"tests-{pkg.module}({cell.id})")
        return 0
    print(f"wrote {table(args.update_docs, args.merge, args.reports)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
