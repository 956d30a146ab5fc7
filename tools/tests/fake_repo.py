"""Build throwaway copies of this repository's layout for the tooling tests: a root pyproject.toml with the
package list, tiny hatchling packages under packages/, and (optionally) the real noxfile.py and tools/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tools.packages import ROOT, Package

PYPROJECT = """
[build-system]
requires = ["hatchling>=1.21"]
build-backend = "hatchling.build"

[project]
name = "{dist}"
dynamic = ["version"]
readme = "README.md"
license = "Apache-2.0"
license-files = ["LICENSE"]
dependencies = [{deps}]
{extras}{entry_points}
[tool.hatch.version]
path = "src/{module}/__about__.py"

[tool.hatch.build.targets.wheel]
packages = ["src/{module}"]

[tool.hatch.build.targets.sdist]
include = ["src", "tests", "README.md", "CHANGELOG.md"]
"""


def write_package_list(root: Path, rows: list[str]) -> None:
    """The root pyproject.toml: copied from this repository with its package list replaced by ``rows``."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    head, rest = text.split("[tool.precision-plugins]\npackages = [\n", 1)
    tail = rest.split("\n]\n", 1)[1]
    body = "".join(f"    {row},\n" for row in rows)
    (root / "pyproject.toml").write_text(f"{head}[tool.precision-plugins]\npackages = [\n{body}]\n{tail}")


def make_package(
    root: Path,
    dist: str,
    deps: list[str],
    entry_point: bool,
    typed: bool = True,
    license_file: bool = True,
    forbid: tuple[str, ...] = (),
    extras: dict[str, list[str]] | None = None,
) -> Package:
    """A buildable package ``packages/<dist>`` (version 0.3.0) with a README, CHANGELOG, LICENSE and one test;
    ``extras``: its ``[project.optional-dependencies]``."""
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
    (path / "CHANGELOG.md").write_text("# Changelog\n\n<!-- towncrier release notes start -->\n")
    if license_file:
        shutil.copy(ROOT / "LICENSE", path / "LICENSE")
    backend = dist.removeprefix("precision-") if entry_point else None
    eps = f'[project.entry-points."precision_base.plugins"]\n{backend} = "{module}:INFO"\n' if backend else ""
    rows = "".join(f"{name} = [{', '.join(repr(d) for d in reqs)}]\n" for name, reqs in (extras or {}).items())
    optional = f"[project.optional-dependencies]\n{rows}" if rows else ""
    quoted = ", ".join(f'"{d}"' for d in deps)
    text = PYPROJECT.format(dist=dist, module=module, deps=quoted, extras=optional, entry_points=eps)
    if not license_file:
        text = text.replace('license-files = ["LICENSE"]\n', "")
    (path / "pyproject.toml").write_text(text)
    return Package(dist=dist, module=module, path=path, backend=backend, forbid=forbid)


def copy_tooling(root: Path) -> None:
    """The real noxfile.py, tools/ (without its tests and caches) and LICENSE, into ``root``."""
    shutil.copy(ROOT / "noxfile.py", root / "noxfile.py")
    shutil.copy(ROOT / "LICENSE", root / "LICENSE")
    shutil.copytree(ROOT / "tools", root / "tools", ignore=shutil.ignore_patterns("tests", "__pycache__"))


def build(pkg: Package, out: Path) -> None:
    """Build the package's sdist, then the wheel from the sdist (as ``python -m build`` and the release do)."""
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "-q", "--outdir", str(out), str(pkg.path)],
        check=True,
        capture_output=True,
    )
