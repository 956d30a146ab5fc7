"""tools/ci_plan.py: only the packages a change touches, everything for shared files, the full matrix nightly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.ci_plan import main, select, touched_packages

SESSIONS = [
    {"session": "tests-precision_base(torch='2.13', lightning='2.6')", "tags": ["base", "matrix", "ci"]},
    {"session": "tests-precision_base(torch='2.14', lightning='2.6')", "tags": ["base", "matrix"]},
    {"session": "tests-precision_fsdp(torch='2.13', lightning='2.6')", "tags": ["fsdp", "matrix", "ci"]},
    {"session": "lowest-precision_fsdp", "tags": ["fsdp", "matrix", "lowest"]},
    {
        "session": "tests-precision_deepspeed(torch='2.13', deepspeed='0.19', lightning='2.6')",
        "tags": ["deepspeed", "matrix", "ci"],
    },
    {"session": "lint", "tags": ["ci", "lint"]},
    {"session": "integration", "tags": ["ci"]},
    {"session": "docs", "tags": ["docs"]},
    {"session": "compat_table", "tags": ["matrix", "table"]},
]


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        (["packages/precision-fsdp/src/precision_fsdp/plugin.py"], {"fsdp"}),
        (["packages/precision-deepspeed/README.md", "docs/index.md"], {"deepspeed"}),
        (["tests-integration/test_fsdp_resume.py"], {"fsdp"}),
        (["packages/precision-base/src/precision_base/spec.py"], {"base", "fsdp", "deepspeed"}),
        (["packages/precision-testsupport/src/precision_testsupport/models.py"], {"base", "fsdp", "deepspeed"}),
        (["noxfile.py"], {"base", "fsdp", "deepspeed"}),
        ([".github/workflows/ci.yml"], {"base", "fsdp", "deepspeed"}),
        (["docs/index.md"], set()),
        (None, {"base", "fsdp", "deepspeed"}),
    ],
)
def test_touched_packages(changed: list[str] | None, expected: set[str]) -> None:
    assert touched_packages(changed) == expected


def test_a_plugin_change_runs_only_that_plugin_and_the_shared_checks() -> None:
    chosen = select(SESSIONS, ["packages/precision-fsdp/src/precision_fsdp/plugin.py"], full=False)
    assert chosen == ["tests-precision_fsdp(torch='2.13', lightning='2.6')", "lint", "integration"]


def test_a_base_change_runs_every_packages_ci_cell() -> None:
    chosen = select(SESSIONS, ["packages/precision-base/src/precision_base/registry/__init__.py"], full=False)
    assert [c for c in chosen if c.startswith("tests-")] == [
        "tests-precision_base(torch='2.13', lightning='2.6')",
        "tests-precision_fsdp(torch='2.13', lightning='2.6')",
        "tests-precision_deepspeed(torch='2.13', deepspeed='0.19', lightning='2.6')",
    ]


def test_full_runs_every_matrix_cell() -> None:
    chosen = select(SESSIONS, None, full=True)
    assert "lowest-precision_fsdp" in chosen
    assert "tests-precision_base(torch='2.14', lightning='2.6')" in chosen
    assert "docs" not in chosen
    assert "compat_table" not in chosen  # it needs every cell's report: the workflow's own last job


def test_cli_prints_a_github_output_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listed = tmp_path / "sessions.json"
    listed.write_text(json.dumps(SESSIONS))
    assert main(["--sessions-json", str(listed), "--full"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("sessions=")
    assert len(json.loads(line.removeprefix("sessions="))) == 7


def test_the_real_noxfile_lists_a_ci_slice() -> None:
    import subprocess
    import sys

    from tools.packages import ROOT

    pytest.importorskip("nox")
    out = subprocess.run([sys.executable, "-m", "nox", "-l", "--json"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    chosen = select(json.loads(out.stdout), None, full=False)
    for needed in ("lint", "typecheck", "build", "integration", "tools"):
        assert needed in chosen
    assert sum(name.startswith("tests-") for name in chosen) == 3
