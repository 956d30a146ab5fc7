"""tools/lowest.py: constraints at the floors of a package's published metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.lowest import lowest_constraints, main
from tools.packages import ROOT

PYPROJECT = """
[project]
name = "precision-demo"
dependencies = [
    "precision-base>=0.1,<1",
    "torch>=2.6",
    "lightning >= 2.5.1, <3",
    "deepspeed~=0.16.2",
    "numpy",
    "colorama>=0.4; sys_platform == 'win32'",
]
[project.optional-dependencies]
plots = ["matplotlib>=3.8"]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    return tmp_path


def test_pins_each_floor_and_skips_local_and_inapplicable(project: Path) -> None:
    pins, unpinned = lowest_constraints(project / "pyproject.toml")
    assert pins == ["deepspeed==0.16.2", "lightning==2.5.1", "torch==2.6"]
    assert unpinned == ["numpy"]


def test_extras_add_their_floors(project: Path) -> None:
    pins, _ = lowest_constraints(project / "pyproject.toml", ["plots"])
    assert "matplotlib==3.8" in pins
    with pytest.raises(ValueError, match="no extra 'gpu'"):
        lowest_constraints(project / "pyproject.toml", ["gpu"])


def test_cli_writes_a_constraints_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = project / "c" / "lowest.txt"
    assert main([str(project), "-o", str(out)]) == 0
    assert out.read_text().splitlines() == ["deepspeed==0.16.2", "lightning==2.5.1", "torch==2.6"]
    assert "numpy has no lower bound" in capsys.readouterr().err


def test_the_plugins_floors_cover_their_backends() -> None:
    pins, unpinned = lowest_constraints(ROOT / "packages" / "precision-deepspeed" / "pyproject.toml")
    names = {p.split("==")[0] for p in pins}
    assert {"torch", "lightning", "deepspeed"} <= names
    assert unpinned == []
    base_pins, _ = lowest_constraints(ROOT / "packages" / "precision-base" / "pyproject.toml", ["lightning"])
    assert not any(p.startswith(("torch==", "deepspeed==")) for p in base_pins)
