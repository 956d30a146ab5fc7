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


def test_the_axes_an_extra_brings_cross_only_the_cells_that_install_it(tmp_path: Path) -> None:
    path = tmp_path / "matrix.toml"
    path.write_text(
        AXES.replace('deepspeed = "0.19"\n[tests]', 'deepspeed = "0.19"\ntorchao = "0.18"\n[tests]')
        + '[axes.torchao]\n"0.13" = { spec = "==0.13.*", env = { WHICH = "floor" } }\n"0.18" = "==0.18.*"\n'
        + '[extras]\nprecision-fsdp = { extras = "fp8", torch = ["2.13"], axes = ["torchao"] }\n'
        + '[[exclude]]\nmatch = { lightning = "2.5", torchao = "0.13" }\nreason = "one floor cell"\n'
    )
    axes = matrix.load(path)
    fsdp = find("fsdp")
    ids = [c.id for c in matrix.cells(fsdp, axes)]
    assert ids == [
        "python='3.11', torch='2.13', lightning='2.5', torchao='0.18'",
        "python='3.11', torch='2.13', lightning='2.6', torchao='0.13'",
        "python='3.11', torch='2.13', lightning='2.6', torchao='0.18'",
        "python='3.11', torch='2.15', lightning='2.6'",  # no fp8 extra there, so no torchao axis
        "python='3.13', torch='2.15', lightning='2.6'",
    ]
    ci = matrix.ci_cell(fsdp, axes)
    assert ci.axes == {"torch": "2.13", "lightning": "2.6", "torchao": "0.18"}
    floor = matrix.cells(fsdp, axes)[1]
    assert matrix.requirements(floor, axes) == ["torch==2.13.*", "lightning==2.6.*", "torchao==0.13.*"]
    assert matrix.environment(floor, axes) == {"WHICH": "floor"}
    assert matrix.extras(fsdp, floor, axes) == "[fp8]"
    assert all("torchao" not in c.axes for c in matrix.cells(find("base"), axes)), "other packages: unchanged"
    assert "torchao" not in matrix.ci_cell(find("base"), axes).axes


def test_the_real_fp8_cells_are_torchaos_floor_and_newest_and_only_the_newest_is_in_ci() -> None:
    """Issue 23: the fp8 precisions are tested on torchao's floor (module swap only) and its newest (both paths);
    the floor cell is in the full matrix (nightly), not in the CI slice."""
    import re

    from tools.packages import ROOT

    real = matrix.load()
    fsdp = find("precision-fsdp")
    floor_line = re.search(
        r'fp8 = \["torchao>=([0-9.]+)"\]', (ROOT / "packages/precision-fsdp/pyproject.toml").read_text()
    )
    assert floor_line is not None
    floor = ".".join(floor_line.group(1).split(".")[:2])
    newest = max(real["axes"]["torchao"], key=lambda v: tuple(map(int, v.split("."))))
    assert floor in real["axes"]["torchao"], "the pyproject floor has a cell"
    torchao_cells = {
        c.axes["torchao"]: c
        for c in matrix.cells(fsdp, real)
        if c.axes.get("lightning") == "2.6" and "torchao" in c.axes
    }
    assert set(torchao_cells) == {floor, newest}
    ci = matrix.ci_cell(fsdp, real)
    assert ci == torchao_cells[newest]
    assert ci != torchao_cells[floor]
    assert matrix.environment(torchao_cells[floor], real) == {"PRECISION_FSDP_TORCHAO_PATHS": "module swap"}
    assert matrix.environment(ci, real) == {"PRECISION_FSDP_TORCHAO_PATHS": "module swap, weight wrapper"}
    assert "packages/precision-fsdp/tests" in matrix.test_paths(fsdp, real)  # runs tests/test_torchao_paths.py
    assert not [c for c in matrix.cells(fsdp, real) if "torchao" in c.axes and matrix.extras(fsdp, c, real) != "[fp8]"]


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


def test_a_cell_report_keeps_what_its_tests_recorded(tmp_path: Path) -> None:
    """packages/precision-fsdp/tests/test_torchao_paths.py records which torchao path each fp8 precision took
    (``record_testsuite_property``); the cell's report carries it as ``recorded``."""
    cell = matrix.Cell("precision-fsdp", "3.11", {"torch": "2.13", "lightning": "2.6", "torchao": "0.13"})
    with matrix.reporting("tests-precision_fsdp(e)", cell, tmp_path) as report:
        report.junit.write_text(
            '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="0" '
            'skipped="0" tests="1"><properties><property name="torchao training paths" value="module swap" />'
            '<property name="fsdp:fp8-rowwise path" value="module swap" /></properties>'
            '<testcase classname="t" name="test_paths" /></testsuite></testsuites>'
        )
    written = json.loads((tmp_path / f"{matrix.slug('tests-precision_fsdp(e)')}.json").read_text())
    assert written["requested"]["torchao"] == "0.13"
    assert written["recorded"] == {"torchao training paths": "module swap", "fsdp:fp8-rowwise path": "module swap"}


def test_the_table_is_written_from_the_reports_into_the_build_folder(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    _run(reports, "tests-precision_fsdp(python='3.11', torch='2.13', lightning='2.6')", "passed")
    _run(reports, "tests-precision_fsdp(python='3.11', torch='2.14', lightning='2.6')", "failed")
    md = matrix.table(reports=reports, out=tmp_path / "out")
    assert md == tmp_path / "out" / "compatibility.md"
    text = md.read_text()
    assert "**1 of 2 cells passed**" in text
    assert "| `python=3.11, torch=2.13, lightning=2.6` | passed |" in text
    assert "AssertionError: bf16 expected" in text
    assert json.loads(md.with_suffix(".json").read_text())["cells"][0]["status"] == "passed"


def _fake_wheel(folder: Path, name: str, version: str) -> Path:
    """An installable, empty wheel ``name==version`` (enough for a resolver to choose between builds)."""
    import zipfile

    dist = f"{name}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    info = f"{dist}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


@pytest.mark.parametrize("cpu_index", [True, False])
def test_lowest_sessions_ask_for_cpu_torch_where_the_cpu_index_is_configured(tmp_path: Path, cpu_index: bool) -> None:
    """Issue 21: `uv pip install --resolution lowest-direct` of `torch>=2.4` picks the package index's plain
    2.4.0 (a CUDA build on Linux) over PyTorch's 2.4.0+cpu. A real uv resolution over two wheel folders standing in
    for the two indexes shows it, and that the lowest sessions' torch line picks the CPU build."""
    import shutil
    import subprocess
    import sys

    from tools.packages import ROOT, find

    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is not on PATH: run these tests through `nox -s tools`, which installs it")
    pypi, cpu = tmp_path / "pypi", tmp_path / "cpu"
    pypi.mkdir()
    cpu.mkdir()
    for version in ("2.4.0", "2.4.1", "2.13.0"):
        _fake_wheel(pypi, "torch", version)
        _fake_wheel(cpu, "torch", f"{version}+cpu")
    real = matrix.load(ROOT / "tools" / "matrix.toml")
    fsdp = find("precision-fsdp")
    env = {"UV_EXTRA_INDEX_URL": "https://download.pytorch.org/whl/cpu"} if cpu_index else {}
    line = matrix.lowest_torch_constraint(fsdp, real, env)
    assert line == ("torch==2.4.0+cpu" if cpu_index else "torch==2.4.0")
    (tmp_path / "req.txt").write_text("torch>=2.4\n")  # precision-fsdp's own torch requirement
    (tmp_path / "c.txt").write_text(line + "\n")

    env_uv = {"PATH": "", "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_NO_CONFIG": "1"}

    def resolve(*more: str) -> str:
        command = [uv, "pip", "compile", "--python", sys.executable, "--no-index", "--find-links", str(pypi)]
        command += ["--find-links", str(cpu)]
        command += ["--resolution", "lowest-direct", "--no-header", "--no-annotate", "-q", str(tmp_path / "req.txt")]
        done = subprocess.run([*command, *more], capture_output=True, text=True, check=True, env=env_uv)
        return done.stdout.strip()

    assert resolve() == "torch==2.4.0"  # the finding: the plain build, even where the CPU index is there
    assert resolve("-c", str(tmp_path / "c.txt")) == line  # what the lowest session asks for
    base = matrix.lowest_torch_constraint(find("precision-base"), real, env)
    assert base == matrix.ci_requirement("torch", real)  # no torch floor of its own: the CI cell's torch


def test_excluded_cells_are_said_in_words_never_as_a_python_dict() -> None:
    """Issue 21: the compatibility page printed `{'python': '3.11', 'torch': '2.4'}: ...`."""
    from tools.packages import ROOT

    notes = matrix.excluded_notes(matrix.load(ROOT / "tools" / "matrix.toml"))
    assert notes
    assert not [n for n in notes if "{" in n or "'" in n.split(":")[0]]
    assert "python 3.11, torch 2.4: torch 2.4 runs in the floor cells (Python 3.10) and the lowest cells" in notes
    page = (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
    assert "{'" not in page
