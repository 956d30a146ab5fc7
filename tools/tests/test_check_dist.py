"""tools/check_dist.py against wheels built from tiny projects (good ones and ones that break the rules)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.check_dist import check_dir
from tools.packages import Package

PYPROJECT = """
[build-system]
requires = ["hatchling>=1.21"]
build-backend = "hatchling.build"

[project]
name = "{dist}"
dynamic = ["version"]
readme = "README.md"
dependencies = [{deps}]
{entry_points}
[tool.hatch.version]
path = "src/{module}/__about__.py"

[tool.hatch.build.targets.wheel]
packages = ["src/{module}"]

[tool.hatch.build.targets.sdist]
include = ["src", "tests", "README.md", "CHANGELOG.md"]
"""


def make_package(root: Path, dist: str, deps: list[str], entry_point: bool, typed: bool = True) -> Package:
    module = dist.replace("-", "_")
    path = root / "packages" / dist
    src = path / "src" / module
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "__about__.py").write_text('__version__ = "0.3.0"\n')
    if typed:
        (src / "py.typed").write_text("")
    (path / "tests").mkdir()
    (path / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    (path / "README.md").write_text(f"# {dist}\n")
    (path / "CHANGELOG.md").write_text("# Changelog\n")
    backend = dist.removeprefix("precision-")
    eps = f'[project.entry-points."precision_base.plugins"]\n{backend} = "{module}:INFO"\n' if entry_point else ""
    (path / "pyproject.toml").write_text(
        PYPROJECT.format(dist=dist, module=module, deps=", ".join(f'"{d}"' for d in deps), entry_points=eps)
    )
    return Package(dist=dist, module=module, path=path)


def build(pkg: Package, out: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "-q", "--outdir", str(out), str(pkg.path)],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build")
    pytest.importorskip("hatchling")
    root = tmp_path_factory.mktemp("repo")
    out = root / "dist"
    build(make_package(root, "precision-base", ["packaging>=22"], entry_point=False), out)
    build(make_package(root, "precision-fsdp", ["precision-base>=0.1,<1", "torch>=2.6"], entry_point=True), out)
    return root


def test_good_distributions_pass(built: Path) -> None:
    checked, problems = check_dir(built / "dist", root=built)
    assert problems == []
    assert len(checked) == 4


@pytest.mark.parametrize(
    ("dist", "deps", "entry_point", "typed", "expected"),
    [
        ("precision-base", ["packaging>=22", "torch>=2.6"], False, True, "must not depend on torch"),
        ("precision-fsdp", ["precision-base>=0.1,<1", "deepspeed>=0.16"], True, True, "must not depend on deepspeed"),
        ("precision-fsdp", ["precision-base==0.1"], True, True, "floor and a major cap"),
        ("precision-fsdp", ["precision-base>=0.1"], True, True, "floor and a major cap"),
        ("precision-deepspeed", ["precision-base>=0.1,<1"], False, True, "no entry point 'deepspeed'"),
        ("precision-deepspeed", ["precision-base>=0.1,<1"], True, False, "missing precision_deepspeed/py.typed"),
    ],
)
def test_rule_breakers_are_reported(
    tmp_path: Path, dist: str, deps: list[str], entry_point: bool, typed: bool, expected: str
) -> None:
    pytest.importorskip("build")
    pkg = make_package(tmp_path, dist, deps, entry_point, typed)
    build(pkg, tmp_path / "dist")
    _, problems = check_dir(tmp_path / "dist", root=tmp_path)
    assert any(expected in p for p in problems), problems


def test_version_mismatch_and_missing_sdist(built: Path, tmp_path: Path) -> None:
    import shutil

    dist = tmp_path / "dist"
    dist.mkdir()
    for wheel in (built / "dist").glob("precision_fsdp-*.whl"):
        shutil.copy(wheel, dist)
    about = built / "packages" / "precision-fsdp" / "src" / "precision_fsdp" / "__about__.py"
    original = about.read_text()
    about.write_text('__version__ = "0.4.0"\n')
    try:
        _, problems = check_dir(dist, root=built)
    finally:
        about.write_text(original)
    assert any("metadata version 0.3.0 != " in p for p in problems), problems
    assert any("found only ['wheel']" in p for p in problems), problems
