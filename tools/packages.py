"""The distributions of this repository: read from ``[tool.precision-plugins]`` in the root ``pyproject.toml``.

That table is the one list of packages. The nox sessions, CI planning (:mod:`tools.ci_plan`), the dist checks,
the release workflow, the lowest-version cells and the docs hooks all read it through :func:`packages`, so adding
a backend is a new folder under ``packages/`` and one line in that table.

A row with ``published = false`` is a workspace package that is never built for an index (``precision-testsupport``,
the repository's own test helpers): :func:`packages` leaves it out unless asked (``unpublished=True``), the nox
sessions install it from its folder where tests need it (:func:`unpublished_packages`), and
``tools/check_dist.py`` refuses its wheel and any wheel that carries its modules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent

_VERSION_RE = re.compile(r'^__version__\s*=\s*["\']([^"\']+)["\']\s*$', re.MULTILINE)


@dataclass(frozen=True)
class Package:
    """One distribution: ``dist`` is its PyPI name, ``module`` its import name, ``path`` its folder.

    ``backend`` is the name it registers in the ``precision_base.plugins`` entry-point group (``None`` for
    precision-base); ``forbid`` the distributions it must never depend on at run time; ``published`` False for a
    workspace package that is never built for an index.
    """

    dist: str
    module: str
    path: Path
    backend: str | None = None
    forbid: tuple[str, ...] = ()
    published: bool = True

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
    def src(self) -> Path:
        return self.path / "src"

    @property
    def tag(self) -> str:
        """The short name used for nox tags and CI jobs: ``base``, ``fsdp``, ``deepspeed``."""
        return self.module.removeprefix("precision_")

    def version(self) -> str:
        return read_version(self.about)

    def dependencies(self) -> list[str]:
        """The package's run-time requirements (``[project] dependencies``, not its extras), as written."""
        return list(tomllib.loads(self.pyproject.read_text(encoding="utf-8"))["project"].get("dependencies", []))

    def requires(self, name: str) -> bool:
        """Whether the package's run-time dependencies (not its extras) name the distribution ``name``."""
        return any(Requirement(dep).name == name for dep in self.dependencies())


def read_version(about: Path) -> str:
    match = _VERSION_RE.search(about.read_text(encoding="utf-8"))
    if match is None:
        raise ValueError(f"{about}: no line __version__ = '...'")
    return match.group(1)


def packages(root: Path = ROOT, *, unpublished: bool = False) -> dict[str, Package]:
    """Published packages keyed by import name, in the table's order (dependency order: precision_base first);
    with ``unpublished=True`` the workspace packages marked ``published = false`` too."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    try:
        rows = config["tool"]["precision-plugins"]["packages"]
    except KeyError:
        raise SystemExit(f"{root / 'pyproject.toml'}: no [tool.precision-plugins] packages = [...] table") from None
    found = {}
    for row in rows:
        dist = row["dist"]
        module = row.get("module", dist.replace("-", "_"))
        path = root / "packages" / dist
        if not (path / "pyproject.toml").is_file():
            raise SystemExit(f"{root / 'pyproject.toml'} lists {dist}, but {path}/pyproject.toml does not exist")
        published = row.get("published", True)
        if published or unpublished:
            found[module] = Package(dist, module, path, row.get("backend"), tuple(row.get("forbid", ())), published)
    return found


def unpublished_packages(root: Path = ROOT) -> list[Package]:
    """The workspace packages that are never published (``published = false``), in the table's order."""
    return [pkg for pkg in packages(root, unpublished=True).values() if not pkg.published]


def find(name: str, root: Path = ROOT, *, unpublished: bool = False) -> Package:
    """Look a package up by distribution name, import name or tag (``precision-fsdp``/``precision_fsdp``/``fsdp``).

    Only published ones (the release workflow and ``nox -s build -- <name>`` refuse any other name), unless
    ``unpublished=True`` (``tools/check_dist.py``, which names the package in its refusal).
    """
    for pkg in packages(root, unpublished=unpublished).values():
        if name in (pkg.dist, pkg.module, pkg.tag):
            return pkg
    known = ", ".join(p.dist for p in packages(root).values())
    raise SystemExit(f"unknown package {name!r}; expected one of {known}")
