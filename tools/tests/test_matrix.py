"""tools/matrix.py: cells from the axes file, one report per cell whatever happens, the table from the reports."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import nox.command
import pytest
from nox.sessions import _SessionSkip

from tools import matrix
from tools.packages import find, packages

AXES = """
[axes.torch]
"2.13" = "==2.13.*"
"2.15" = { spec = "==2.15.*", env = { PIP_CONSTRAINT = "/dev/null" } }
[axes.lightning]
"2.5" = "==2.5.*"
"2.6" = "==2.6.*"
[axes.deepspeed]
"0.19" = "==0.19.*"
[python]
default = "3.11"
[crossed]
default = ["torch", "lightning"]
precision-deepspeed = ["torch", "deepspeed", "lightning"]
[ci]
python = "3.11"
torch = "2.13"
lightning = "2.6"
deepspeed = "0.19"
[tests]
precision-base = ["docs/examples"]
all = ["tests-integration/test_cell_fit.py"]
[[extra]]
package = "all"
python = "3.13"
torch = "2.15"
lightning = "2.6"
deepspeed = "0.19"
[[exclude]]
match = { torch = "2.15", lightning = "2.5" }
reason = "Lightning 2.5 predates torch 2.15"
"""


@pytest.fixture
def axes(tmp_path: Path) -> dict[str, object]:
    path = tmp_path / "matrix.toml"
    path.write_text(AXES)
    return matrix.load(path)


def test_cells_cross_the_axes_add_extra_cells_and_drop_excluded_ones(axes: dict[str, object]) -> None:
    fsdp = find("fsdp")
    ids = [c.id for c in matrix.cells(fsdp, axes)]
    assert ids == [
        "python='3.11', torch='2.13', lightning='2.5'",
        "python='3.11', torch='2.13', lightning='2.6'",
        "python='3.11', torch='2.15', lightning='2.6'",
        "python='3.13', torch='2.15', lightning='2.6'",
    ]
    deepspeed = matrix.cells(find("deepspeed"), axes)
    assert deepspeed[0].axes == {"torch": "2.13", "deepspeed": "0.19", "lightning": "2.5"}
    assert matrix.ci_cell(fsdp, axes) in matrix.cells(fsdp, axes)


def test_a_cell_installs_its_specifiers_with_its_environment(axes: dict[str, object]) -> None:
    cell = matrix.cells(find("deepspeed"), axes)[-1]
    assert matrix.requirements(cell, axes) == ["torch==2.15.*", "deepspeed==0.19.*", "lightning==2.6.*"]
    assert matrix.environment(cell, axes) == {"PIP_CONSTRAINT": "/dev/null"}
    assert matrix.ci_requirement("torch", axes) == "torch==2.13.*"
    assert matrix.test_paths(find("base"), axes) == [
        "packages/precision-base/tests",
        "docs/examples",
        "tests-integration/test_cell_fit.py",
    ]


def test_the_real_axes_give_every_package_its_ci_cell() -> None:
    real = matrix.load()
    for pkg in packages().values():
        assert matrix.ci_cell(pkg, real) in matrix.cells(pkg, real), pkg.dist


def test_extras_are_installed_only_on_the_torch_versions_they_were_verified_on() -> None:
    real = matrix.load()
    fsdp, base = find("precision-fsdp"), find("precision-base")
    ci = matrix.ci_cell(fsdp, real)
    assert matrix.extras(fsdp, ci, real) == "[fp8]"  # the CI cell runs the fp8 tests instead of skipping them
    assert matrix.extras(base, matrix.ci_cell(base, real), real) == ""
    old = matrix.Cell("precision-fsdp", "3.10", {"torch": "2.4", "lightning": "2.4"})
    assert matrix.extras(fsdp, old, real) == ""


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="0" tests="3">
<testcase classname="tests.test_a" name="test_bad"><failure message="AssertionError: bf16 expected">t</failure>
</testcase></testsuite></testsuites>
"""


def _run(folder: Path, name: str, outcome: str) -> dict[str, object]:
    """A cell session's body as the noxfile runs it, ending in ``outcome``; returns the report written."""
    cell = matrix.Cell("precision-fsdp", "3.11", {"torch": "2.13", "lightning": "2.6"})
    expected = contextlib.nullcontext() if outcome == "passed" else pytest.raises(BaseException)
    with expected, matrix.reporting(name, cell, folder) as report:
        report.env.write_text(json.dumps({"python": "3.11.7", "versions": {"torch": "2.13.0+cpu"}}))
        if outcome == "failed":
            report.junit.write_text(JUNIT)
            raise nox.command.CommandFailed("pytest exited 1")
        if outcome == "error":
            raise nox.command.CommandFailed("pip could not resolve torch==9")
        if outcome == "skipped":
            raise _SessionSkip("no GPU here")
    written: dict[str, object] = json.loads((folder / f"{matrix.slug(name)}.json").read_text())
    return written


def test_each_cell_reports_how_it_ended(tmp_path: Path) -> None:
    passed = _run(tmp_path, "tests-precision_fsdp(python='3.11', torch='2.13', lightning='2.6')", "passed")
    assert passed["status"] == "passed"
    assert passed["installed"] == {"python": "3.11.7", "versions": {"torch": "2.13.0+cpu"}}
    failed = _run(tmp_path, "tests-precision_fsdp(b)", "failed")
    assert failed["status"] == "failed"
    assert failed["reason"] == "tests.test_a::test_bad: AssertionError: bf16 expected"
    counts = failed["tests"]
    assert isinstance(counts, dict)
    assert {k: counts[k] for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": 3,
        "failures": 1,
        "errors": 0,
        "skipped": 0,
    }
    error = _run(tmp_path, "tests-precision_fsdp(c)", "error")
    assert error["status"] == "error"
    assert error["reason"] == "did not reach the tests: pip could not resolve torch==9"
    assert _run(tmp_path, "tests-precision_fsdp(d)", "skipped")["status"] == "skipped"


def test_the_table_is_written_from_the_reports_into_the_build_folder(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    _run(reports, "tests-precision_fsdp(python='3.11', torch='2.13', lightning='2.6')", "passed")
    _run(reports, "tests-precision_fsdp(python='3.11', torch='2.14', lightning='2.6')", "failed")
    md = matrix.table(reports=reports, out=tmp_path / "out")
    assert md == tmp_path / "out" / "compatibility.md"
    text = md.read_text()
    assert "**1 of 2 cells passed**" in text
    assert "| `python=3.11, torch=2.13, lightning=2.6` | ✅ passed |" in text
    assert "AssertionError: bf16 expected" in text
    assert json.loads(md.with_suffix(".json").read_text())["cells"][0]["status"] == "passed"
