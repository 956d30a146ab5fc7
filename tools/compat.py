"""Render the compatibility page (Markdown and JSON) from the results of matrix cells: the one renderer of this data.

The page (docs/compatibility.md, shown by the site as written) has, per package, a grid (a row per version of the
package's other dependencies, a column per Lightning minor, a cell saying whether its tests passed; what failed in
footnotes), then every cell in detail: the table the package's README carries too (:func:`package_table`).

A cell's result is a dict: ``session`` (the nox session name), ``package``, ``requested`` (the axis values,
e.g. ``{"torch": "2.13", "lightning": "2.6"}`` or ``{"variant": "lowest"}``), ``status`` (``passed``,
``failed``, ``error`` or ``skipped``), ``installed`` (the versions :mod:`tools.envreport` found), ``tests``
(counts from the JUnit report), ``duration_s`` and ``reason`` (why it failed, when known).
A failed cell stays in the table, marked failing.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

STATUS_MARK = {"passed": "passed", "failed": "**failed**", "error": "**error**", "skipped": "skipped"}
COLUMNS = ("torch", "lightning", "deepspeed", "precision-base")
"""Installed versions shown per cell; torch with its build tag (``+cpu``, ``+cu121``: test counts differ by build)."""


REAL_FIT = "test_cell_fit"
"""Test cases whose class name contains this are the cell's real 2-process fit (tests-integration/test_cell_fit.py)."""


def _outcome(case: ET.Element) -> str:
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    skipped = case.find("skipped")
    if skipped is not None:
        return "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
    return "passed"


def junit_counts(path: Path) -> dict[str, Any]:
    """Outcome counts of a JUnit XML file: the unit tests, and apart from them the real fit (``fit``).

    ``{"tests", "failures", "errors", "skipped"}`` as the test suites state them (``skipped`` there includes
    xfails), then ``unit`` and ``fit``: ``{"passed", "failed", "skipped", "xfailed"}`` counted per test case, with
    ``skip_reasons`` (each distinct reason a test was skipped for, e.g. a CPU feature or a torch release).
    """
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts: dict[str, Any] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in ("tests", "failures", "errors", "skipped"):
            counts[key] += int(suite.get(key, 0))
    for part in ("unit", "fit"):
        counts[part] = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0, "skip_reasons": []}
    for case in root.iter("testcase"):
        part = counts["fit" if REAL_FIT in (case.get("classname") or "") else "unit"]
        outcome = _outcome(case)
        part[outcome] += 1
        if outcome == "skipped":
            reason = (case.find("skipped").get("message") or "").removeprefix("Skipped: ")  # type: ignore[union-attr]
            if reason and reason not in part["skip_reasons"]:
                part["skip_reasons"].append(reason)
    return counts


def first_failures(path: Path, limit: int = 3) -> list[str]:
    """``test id: first line of the message`` for the first failing test cases of a JUnit XML file."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        for kind in ("failure", "error"):
            node = case.find(kind)
            if node is not None:
                message = (node.get("message") or node.text or "").strip().splitlines()
                out.append(f"{case.get('classname')}::{case.get('name')}: {message[0] if message else kind}"[:300])
                break
        if len(out) >= limit:
            break
    return out


AXIS_ORDER = ("python", "torch", "deepspeed", "lightning", "variant")


def _cell_label(requested: dict[str, str]) -> str:
    keys = sorted(requested, key=lambda k: AXIS_ORDER.index(k) if k in AXIS_ORDER else len(AXIS_ORDER))
    return ", ".join(f"{k}={requested[k]}" for k in keys)


def _version_key(value: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in value.split("."))


def row_order(cell: dict[str, Any]) -> tuple[Any, ...]:
    """A stable row order: axis cells by numeric versions (python, torch, deepspeed, lightning), then variants."""
    requested = cell["requested"]
    variant = requested.get("variant")
    return (variant is not None, variant or "", *(_version_key(requested.get(k, "0")) for k in AXIS_ORDER[:-1]))


def _installed(cell: dict[str, Any], name: str) -> str:
    installed = cell.get("installed") or {}
    if name == "torch" and installed.get("torch_build"):
        return str(installed["torch_build"])  # with its build tag: +cpu, +cu121, ...
    value = installed.get("versions", {}).get(name)
    return str(value) if value else "-"


def _counts(part: dict[str, Any]) -> str:
    text = f"{part['passed']} passed, {part['failed']} failed, {part['skipped']} skipped"
    return text + (f", {part['xfailed']} xfailed" if part.get("xfailed") else "")


def _unit_tests(cell: dict[str, Any]) -> str:
    t = cell.get("tests") or {}
    if "unit" in t:
        return _counts(t["unit"])
    if t:  # a report from before the unit/fit split
        passed = t.get("tests", 0) - t.get("failures", 0) - t.get("errors", 0) - t.get("skipped", 0)
        return f"{passed} passed, {t.get('failures', 0) + t.get('errors', 0)} failed, {t.get('skipped', 0)} skipped"
    return "-"


def _real_fit(cell: dict[str, Any]) -> str:
    fit = (cell.get("tests") or {}).get("fit")
    if not fit or not any(fit[k] for k in ("passed", "failed", "skipped")):
        return "-"
    if fit["failed"]:
        return f"**{fit['failed']} of {fit['passed'] + fit['failed'] + fit['skipped']} failed**"
    if fit["passed"]:
        return f"trains ({fit['passed']} checks)" + (f", {fit['skipped']} skipped" if fit["skipped"] else "")
    return "skipped: " + "; ".join(fit["skip_reasons"])


def _cpu(cell: dict[str, Any]) -> str:
    flags = (cell.get("installed") or {}).get("cpu_flags")
    if not flags:
        return "-"
    fp16 = "yes" if flags.get("avx512_fp16") or flags.get("amx_fp16") else "no"
    return f"native fp16: {fp16}"


AXIS_TITLES = {"torch": "torch", "lightning": "Lightning", "deepspeed": "DeepSpeed", "python": "Python"}


def _grid_result(cell: dict[str, Any], notes: list[str]) -> str:
    tests = cell.get("tests") or {}
    if cell["status"] == "passed":
        skipped = f", {tests['skipped']} skipped" if tests.get("skipped") else ""
        return f"{tests.get('tests', 0) - tests.get('skipped', 0)} passed{skipped}"
    notes.append(f"`{cell['session']}`: {cell.get('reason') or cell['status']}".replace("\n", " "))
    return f"**{cell['status'].upper()}** [^{len(notes)}]"


def package_grid(group: list[dict[str, Any]], notes: list[str]) -> list[str]:
    """One package's cells as a grid (a row per version of its other dependencies, a column per Lightning minor),
    the ``lowest`` cell's versions and the exact versions installed; a failing cell's reason is added to ``notes``
    (the page's footnotes)."""
    grid = [c for c in group if "variant" not in c["requested"]]
    lines: list[str] = []
    if grid:
        axes = sorted({a for c in grid for a in c["requested"]}, key=lambda a: (a == "lightning", a))
        columns = sorted({c["requested"].get("lightning", "") for c in grid}, key=_version_key)
        row_axes = [a for a in axes if a != "lightning"]
        rows = sorted(
            {tuple(c["requested"].get(a, "") for a in row_axes) for c in grid},
            key=lambda r: [_version_key(v) for v in r],
        )
        head = [AXIS_TITLES.get(a, a) for a in row_axes] + [f"Lightning {v}" if v else "result" for v in columns]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in rows:
            found = {
                c["requested"].get("lightning", ""): c
                for c in grid
                if tuple(c["requested"].get(a, "") for a in row_axes) == row
            }
            results = [_grid_result(found[v], notes) if v in found else "not run" for v in columns]
            lines.append("| " + " | ".join([*row, *results]) + " |")
        lines.append("")
    for cell in group:
        if cell["requested"].get("variant") == "lowest":
            versions = (cell.get("installed") or {}).get("versions", {})
            floors = ", ".join(f"{AXIS_TITLES[k]} {versions[k]}" for k in AXIS_TITLES if versions.get(k))
            lines += [  # what the lowest cell really installed: precision-base declares no torch floor
                f"The `lowest` cell (each direct dependency at the floor its metadata declares, "
                f"`uv --resolution lowest-direct`) installed {floors}: {_grid_result(cell, notes)}.",
                "",
            ]
    exact = sorted(
        {
            f"{AXIS_TITLES.get(k, k)} {v}"
            for c in group
            for k, v in ((c.get("installed") or {}).get("versions") or {}).items()
            if v and k in ("torch", "lightning", "deepspeed")
        },
        key=lambda t: (t.split()[0], _version_key(t.split()[-1]), t),
    )
    return [*lines, f"Installed exactly: {', '.join(exact)}.", ""]


def package_table(group: list[dict[str, Any]]) -> list[str]:
    """The markdown table of one package's cells (stable order), why each failing cell failed, and skip reasons."""
    header = ["cell", "result", "unit tests", "real fit", *COLUMNS, "python", "CPU"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    group = sorted(group, key=row_order)
    for cell in group:
        row = [
            f"`{_cell_label(cell['requested'])}`",
            STATUS_MARK.get(cell["status"], cell["status"]),
            _unit_tests(cell),
            _real_fit(cell),
            *(_installed(cell, name) for name in COLUMNS),
            str((cell.get("installed") or {}).get("python", "-")),
            _cpu(cell),
        ]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    failing = [c for c in group if c["status"] != "passed"]
    if failing:
        lines += ["Why cells failed:", ""]
        lines += [f"- `{c['session']}`: {c.get('reason') or 'see the session log'}" for c in failing]
        lines.append("")
    reasons = skip_reasons(group)
    if reasons:
        lines += ["Why tests were skipped (the cells where each reason applied):", ""]
        lines += [f"- {reason} ({cells} of {len(group)} cells)" for reason, cells in reasons]
        lines.append("")
    return lines


_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?(?:\+\w+)?")


def _numbers(version: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", version)]


_REPO_PATH = re.compile(r"\s*\((?:tools|packages|tests-integration|docs|benchmarks)/[^)]*\)")


def skip_reasons(group: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """Each reason tests were skipped for in ``group``, as a reader reads it, with the number of cells it applied
    in: reasons that differ only in a version number are one line naming each version ("torch 2.4.0+cu121 or
    2.4.1+cu121"), and a repository path in parentheses (where a developer looks) is left out."""
    merged: dict[str, tuple[list[list[str]], set[str]]] = {}
    for cell in group:
        tests = cell.get("tests") or {}
        for part in ("unit", "fit"):
            for reason in (tests.get(part) or {}).get("skip_reasons", []):
                text = _REPO_PATH.sub("", reason)
                versions = _VERSION.findall(text)
                slots, cells = merged.setdefault(_VERSION.sub("\0", text), ([[] for _ in versions], set()))
                for slot, version in zip(slots, versions, strict=True):
                    if version not in slot:
                        slot.append(version)
                cells.add(_cell_label(cell["requested"]))
    out = []
    for key, (slots, cells) in merged.items():
        parts = key.split("\0")
        filled = (" or ".join(sorted(slot, key=_numbers)) + rest for slot, rest in zip(slots, parts[1:], strict=True))
        text = parts[0] + "".join(filled)
        out.append((text, len(cells)))
    return out


README_MARK = "<!-- compatibility:start"
README_START = f"{README_MARK} (generated by `nox -s compat_table -- --update-docs`; do not edit by hand) -->"
README_END = "<!-- compatibility:end -->"


def update_readme(readme: Path, group: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Write this package's part of the compatibility table into its README, between the two markers.

    A README without the markers gets a "Compatibility" section with them appended.
    """
    passed = sum(1 for c in group if c["status"] == "passed")
    block = "\n".join(
        [
            README_START,
            f"From the matrix run of {meta.get('date', '?')} ({meta.get('machine', '?')}): {passed} of {len(group)} "
            "cells passed. The whole table is in the docs: "
            "<https://precision-plugins.github.io/precision-plugins/compatibility/>.",
            "",
            *package_table(group),
            README_END,
        ]
    )
    text = readme.read_text(encoding="utf-8")
    if README_MARK in text and README_END in text:  # the marker's wording may have changed since
        head, rest = text.split(README_MARK, 1)
        tail = rest.split(README_END, 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n## Compatibility\n\n" + block + "\n"
    readme.write_text(text, encoding="utf-8")


def render_markdown(cells: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    passed = sum(1 for c in cells if c["status"] == "passed")
    lines = [
        "# Compatibility",
        "",
        "<!-- generated by `nox -s compat_table -- --update-docs` (tools/matrix.py); do not edit by hand -->",
        "",
        f"Generated from a run of the version matrix on {meta.get('date', '?')} "
        f"({meta.get('machine', '?')}); the run took {meta.get('duration_min', '?')} minutes"
        + (f" ({meta['cell_min']} minutes of cells one after another)" if meta.get("cell_min") else "")
        + ". "
        f"**{passed} of {len(cells)} cells passed**"
        + (f" ({meta['cells_run']})" if meta.get("cells_run") else "")
        + ". Versions are the ones actually installed in each cell. "
        "Cells that fail are listed with the reason, not dropped.",
        "",
    ]
    by_package: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        by_package.setdefault(cell["package"], []).append(cell)
    notes: list[str] = []
    for package, group in by_package.items():
        lines += [f"## {package}", "", *package_grid(group, notes)]
        lines += ["Every cell:", "", *package_table(group)]
    pythons = sorted({str((c.get("installed") or {}).get("python", "?")) for c in cells}, key=_version_key)
    lines += ["## How these were run", ""]
    lines.append(f"- Python {', '.join(pythons)}, CPU only: GPU-only tests skip, and count as skipped above.")
    lines += [f"- {item}" for item in meta.get("excluded") or []]
    lines.append("")
    lines += [
        "## Reproduce",
        "",
        "```",
        meta.get("command", "nox -t matrix"),
        "```",
        "",
    ]
    lines += [f"[^{i}]: {note}" for i, note in enumerate(notes, 1)]
    return "\n".join(lines).rstrip("\n") + "\n"


def write(
    cells: list[dict[str, Any]], meta: dict[str, Any], md_path: Path, json_path: Path, readmes: bool = True
) -> None:
    """Write the table as Markdown and JSON; with ``readmes``, also each package README's rows (packages/ beside)."""
    json_path.write_text(json.dumps({"meta": meta, "cells": cells}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(cells, meta), encoding="utf-8")
    if not readmes:
        return
    packages_dir = md_path.resolve().parents[1] / "packages"
    by_package: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        by_package.setdefault(cell["package"], []).append(cell)
    for package, group in by_package.items():
        readme = packages_dir / package / "README.md"
        if readme.is_file():
            update_readme(readme, group, meta)
