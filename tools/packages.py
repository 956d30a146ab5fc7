"""The three distributions of this repository and where their files live."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_VERSION_RE = re.compile(r'^__version__\s*=\s*["\']([^"\']+)["\']\s*$', re.MULTILINE)


@dataclass(frozen=True)
class Package:
    """One distribution: ``dist`` is its PyPI name, ``module`` its import name, ``path`` its folder."""

    dist: str
    module: str
    path: Path

    @property
    def about(self) -> Path:
        return self.path / "src" / self.module / "__about__.py"

    @property
    def changelog(self) -> Path:
        return self.path / "CHANGELOG.md"

    @property
    def pyproject(self) -> Path:
        return self.path / "pyproject.toml"

    @property
    def tests(self) -> Path:
        return self.path / "tests"

    @property
    def tag(self) -> str:
        """The short name used for nox tags and CI jobs: ``base``, ``fsdp``, ``deepspeed``."""
        return self.module.removeprefix("precision_")

    def version(self) -> str:
        return read_version(self.about)


def read_version(about: Path) -> str:
    match = _VERSION_RE.search(about.read_text(encoding="utf-8"))
    if match is None:
        raise ValueError(f"{about}: no line __version__ = '...'")
    return match.group(1)


def packages(root: Path = ROOT) -> dict[str, Package]:
    """Packages keyed by import name, in dependency order (precision_base first)."""
    found = {}
    for module in ("precision_base", "precision_fsdp", "precision_deepspeed"):
        dist = module.replace("_", "-")
        found[module] = Package(dist=dist, module=module, path=root / "packages" / dist)
    return found


def find(name: str, root: Path = ROOT) -> Package:
    """Look a package up by distribution name, import name or tag (``precision-fsdp``/``precision_fsdp``/``fsdp``)."""
    for pkg in packages(root).values():
        if name in (pkg.dist, pkg.module, pkg.tag):
            return pkg
    known = ", ".join(p.dist for p in packages(root).values())
    raise SystemExit(f"unknown package {name!r}; expected one of {known}")
