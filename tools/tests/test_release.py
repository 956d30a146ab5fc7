"""The release wiring: ``nox -s bump`` (hatch version + towncrier) on a copy of the real packages' metadata."""

from __future__ import annotations

import datetime
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.packages import ROOT, packages
from tools.tests.fake_repo import copy_tooling


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """noxfile.py, tools/, pyproject.toml and each package's metadata, changelog and version file (no fragments)."""
    copy_tooling(tmp_path)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for pkg in packages().values():
        dest = tmp_path / pkg.path.relative_to(ROOT)
        (dest / "src" / pkg.module).mkdir(parents=True)
        shutil.copy(pkg.about, dest / "src" / pkg.module / "__about__.py")
        for name in ("pyproject.toml", "CHANGELOG.md", "README.md", "LICENSE"):
            shutil.copy(pkg.path / name, dest / name)
        (dest / "changelog.d").mkdir()  # without the repository's pending fragments: only the test's own
        shutil.copy(pkg.path / "changelog.d" / "README.md", dest / "changelog.d" / "README.md")
    return tmp_path


def _nox(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    for tool in ("hatch", "towncrier"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not on PATH: run these tests through `nox -s tools`, which installs it")
    command = [sys.executable, "-m", "nox", "--no-venv", "--no-install", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=repo)


def test_bump_sets_the_version_and_renders_the_fragments(repo: Path) -> None:
    fsdp = repo / "packages" / "precision-fsdp"
    old = (fsdp / "src" / "precision_fsdp" / "__about__.py").read_text()
    (fsdp / "changelog.d" / "15.added.md").write_text("`FSDPPrecision` takes a name inside `plugins=`.\n")
    (fsdp / "changelog.d" / "+typo.fixed.md").write_text("A typo in an error message.\n")
    done = _nox(repo, "-s", "bump", "--", "fsdp", "minor")
    assert done.returncode == 0, done.stdout + done.stderr
    major, minor = (int(x) for x in old.split('"')[1].split(".")[:2])
    new = f"{major}.{minor + 1}.0"
    assert (fsdp / "src" / "precision_fsdp" / "__about__.py").read_text() == f'__version__ = "{new}"\n'
    changelog = (fsdp / "CHANGELOG.md").read_text()
    entry = f"## [{new}] - {datetime.date.today().isoformat()}\n\n### Added\n\n"
    entry += "- `FSDPPrecision` takes a name inside `plugins=`. (#15)\n\n### Fixed\n\n- A typo in an error message.\n"
    assert entry in changelog
    assert changelog.index("<!-- towncrier release notes start -->") < changelog.index(entry)
    assert sorted(p.name for p in (fsdp / "changelog.d").iterdir()) == ["README.md"]  # fragments consumed
    assert (repo / "packages" / "precision-base" / "CHANGELOG.md").read_text() == (
        ROOT / "packages" / "precision-base" / "CHANGELOG.md"
    ).read_text()  # other packages untouched


def test_bump_without_its_two_arguments_says_how_to_call_it(repo: Path) -> None:
    done = _nox(repo, "-s", "bump", "--", "fsdp")
    assert done.returncode == 1
    assert "usage: nox -s bump -- <package> <major|minor|patch|X.Y.Z>" in done.stderr
