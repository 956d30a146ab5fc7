"""Check built wheels and sdists: names, versions, dependencies and contents.

``python -m tools.check_dist dist/`` inspects every ``*.whl`` and ``*.tar.gz`` there (for one package:
``--package precision-fsdp``) and fails with one line per problem:

* the version in the wheel's metadata equals ``__about__.__version__`` of the package in this tree;
* dependencies: none on what the package list (``[tool.precision-plugins]`` in pyproject.toml) forbids it
  (outside extras); plugins require ``precision-base`` with a floor and a major cap and never pin it with ``==``;
  every requirement on a distribution of :data:`BANNED` (extras included) excludes each of its banned versions;
* a plugin wheel registers its backend (from the package list) in the ``precision_base.plugins`` group;
* the wheel holds ``py.typed``, ``__about__.py`` and the LICENSE, no tests, no ``__pycache__``; the sdist holds
  the README, the CHANGELOG, the LICENSE, the pyproject and the tests;
* no wheel carries the repository's test helpers: the modules of a package listed with ``published = false``
  (``precision-testsupport``), whether under its own name or under a ``testing/`` folder (where they lived in
  precision-base); and no wheel or sdist of such a package is checked as if it could be published;
* with ``--release``: the CHANGELOG has an entry for the version (``nox -s bump`` writes it) and the package's own
  ``changelog.d/`` holds no fragment (every package, precision-base included: ``nox -s bump`` renders them); a plugin's
  ``precision-base`` floor is at least the precision-base version in this tree (the one its tests ran against), and
  precision-base has no unreleased changes (``changelog.d/`` fragments): release precision-base first.
"""

from __future__ import annotations

import argparse
import configparser
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from tools.packages import ROOT, Package, find, packages, unpublished_packages

LICENSE_TEXT = "Apache License"

BANNED: dict[str, tuple[tuple[str, ...], str]] = {
    name: (("2.6.2", "2.6.3"), "malicious releases, advisory GHSA-w37p-236h-pfx3: code that runs on `import lightning`")
    for name in ("lightning", "pytorch-lightning")
}
"""Versions no requirement of ours may admit: distribution -> (versions, why)."""


def _metadata(text: str) -> tuple[str, str, list[Requirement]]:
    msg = Parser().parsestr(text)
    return msg["Name"], msg["Version"], [Requirement(r) for r in msg.get_all("Requires-Dist") or []]


def check_requirements(pkg: Package, requires: list[Requirement], base: str = "precision-base") -> list[str]:
    problems = []
    dist = pkg.dist
    for req in requires:  # extras included: `pip install precision-base[lightning]` must not bring them either
        banned, why = BANNED.get(canonicalize_name(req.name), ((), ""))
        admitted = [v for v in banned if req.specifier.contains(v, prereleases=True)]
        if admitted:
            excluded = ",".join(f"!={v}" for v in banned)
            problems.append(
                f"{dist} requires {req}, which admits {req.name} {', '.join(admitted)} ({why}): add {excluded}"
            )
    runtime = [r for r in requires if r.marker is None or "extra" not in str(r.marker)]
    for req in runtime:
        name = canonicalize_name(req.name)
        if name in pkg.forbid:
            problems.append(f"{dist} must not depend on {name}, but declares {req}")
        if name == base:
            ops = {s.operator for s in req.specifier}
            if "==" in ops or ">=" not in ops or "<" not in ops:
                problems.append(f"{dist} must require {base} with a floor and a major cap, got {req}")
    return problems


def unreleased(pkg: Package) -> list[str]:
    """The changelog fragments of ``pkg`` not yet rendered into its CHANGELOG.md (``changelog.d/<name>.<type>.md``)."""
    folder = pkg.path / "changelog.d"
    return sorted(f.name for f in folder.glob("*.md") if f.name != "README.md") if folder.is_dir() else []


def check_rendered(pkg: Package) -> list[str]:
    """A release carries every change of its package: no fragment may wait in ``changelog.d/``."""
    pending = unreleased(pkg)
    if not pending:
        return []
    return [
        f"{len(pending)} changelog fragment(s) in {pkg.path.name}/changelog.d/ are not in CHANGELOG.md "
        f"({', '.join(pending[:3])}{', ...' if len(pending) > 3 else ''}): run `nox -s bump -- {pkg.dist} <how>`, "
        "which renders them into the version's entry"
    ]


def check_release_floor(pkg: Package, requires: list[Requirement], base: Package) -> list[str]:
    """A plugin released from this tree must not admit a precision-base older than the tree's, nor ship while
    precision-base has changes no release carries: its tests ran against this tree's precision-base."""
    problems = []
    pending = unreleased(base)
    if pending:
        problems.append(
            f"{pkg.dist} was tested against unreleased changes of {base.dist} ({base.path.name}/changelog.d/ "
            f"holds {len(pending)}, e.g. {pending[0]}): release {base.dist} first "
            f"(`nox -s bump -- {base.dist} <how>`), then raise {pkg.dist}'s floor to its version"
        )
    tree = Version(base.version())
    for req in requires:
        if canonicalize_name(req.name) != base.dist:
            continue
        floors = [Version(s.version) for s in req.specifier if s.operator == ">="]
        if floors and max(floors) < tree:
            problems.append(
                f"{pkg.dist} requires {req}, but its tests ran against {base.dist} {tree}: "
                f"raise the floor to {base.dist}>={tree}"
            )
    return problems


def helper_modules(helpers: Package) -> set[str]:
    """The module names of an unpublished package: its ``*.py`` files but ``__init__`` and ``__about__``."""
    folder = helpers.src / helpers.module
    return {f.stem for f in folder.glob("*.py")} - {"__init__", "__about__"}


def check_helpers(names: list[str], helpers: list[Package]) -> list[str]:
    """Members of a wheel (``names``) that are the test helpers of an unpublished package, one problem per package."""
    problems = []
    for package in helpers:
        stems = helper_modules(package)
        carried = [
            n
            for n in names
            if n.startswith(f"{package.module}/")
            or ("/testing/" in f"/{n}" and n.endswith(".py") and n.rsplit("/", 1)[-1][:-3] in stems)
        ]
        if carried:
            problems.append(
                f"carries the repository's test helpers {carried[:6]}: they belong to {package.dist} "
                f"(packages/{package.path.name}/), which is never published"
            )
    return problems


def check_wheel(
    path: Path,
    pkg: Package,
    base: str = "precision-base",
    release_base: Package | None = None,
    helpers: list[Package] | None = None,
) -> list[str]:
    problems: list[str] = []
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        info_dir = next((n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")), None)
        if info_dir is None:
            return [f"{path.name}: no .dist-info folder"]
        name, version, requires = _metadata(zf.read(f"{info_dir}/METADATA").decode())
        entry_points = configparser.ConfigParser()
        if f"{info_dir}/entry_points.txt" in names:
            entry_points.read_string(zf.read(f"{info_dir}/entry_points.txt").decode())
    if canonicalize_name(name) != pkg.dist:
        problems.append(f"{path.name}: metadata name {name!r} is not {pkg.dist!r}")
    if version != pkg.version():
        problems.append(f"{path.name}: metadata version {version} != {pkg.about} version {pkg.version()}")
    problems += [f"{path.name}: {p}" for p in check_requirements(pkg, requires, base)]
    if release_base is not None and pkg.dist != release_base.dist:
        problems += [f"{path.name}: {p}" for p in check_release_floor(pkg, requires, release_base)]
    if f"{info_dir}/licenses/LICENSE" not in names:
        problems.append(f"{path.name}: missing {info_dir}/licenses/LICENSE")
    for required in (f"{pkg.module}/__init__.py", f"{pkg.module}/__about__.py", f"{pkg.module}/py.typed"):
        if required not in names:
            problems.append(f"{path.name}: missing {required}")
    stray = [n for n in names if "__pycache__" in n or n.endswith(".pyc") or "/tests/" in f"/{n}"]
    if stray:
        problems.append(f"{path.name}: must not ship {stray[:5]}")
    problems += [f"{path.name}: {p}" for p in check_helpers(names, helpers or [])]
    outside = [n for n in names if not n.startswith((f"{pkg.module}/", f"{info_dir}/"))]
    if outside:
        problems.append(f"{path.name}: files outside {pkg.module}/: {outside[:5]}")
    backend = pkg.backend
    if backend is not None:
        group = "precision_base.plugins"
        if not entry_points.has_section(group) or backend not in entry_points[group]:
            problems.append(f"{path.name}: no entry point {backend!r} in group {group!r}")
    return problems


def check_sdist(path: Path, pkg: Package, release: bool = False) -> list[str]:
    with tarfile.open(path) as tf:
        members = {m.name.split("/", 1)[1]: m for m in tf.getmembers() if "/" in m.name}
        names = set(members)
        read = {
            n: tf.extractfile(members[n]) for n in ("LICENSE", "CHANGELOG.md") if n in members and members[n].isfile()
        }
        texts = {n: f.read().decode() for n, f in read.items() if f is not None}
    problems = []
    required = ("pyproject.toml", "README.md", "CHANGELOG.md", "LICENSE", "PKG-INFO", f"src/{pkg.module}/__about__.py")
    for name in required:
        if name not in names:
            problems.append(f"{path.name}: missing {name}")
    if "LICENSE" in names and LICENSE_TEXT not in texts.get("LICENSE", ""):
        problems.append(f"{path.name}: LICENSE is not a file holding the license text")
    heading = f"## [{pkg.version()}]"
    if release and heading not in texts.get("CHANGELOG.md", ""):
        problems.append(
            f"{path.name}: CHANGELOG.md has no '{heading}' entry; run `nox -s bump -- {pkg.dist} <how>` first"
        )
    if not any(n.startswith("tests/") for n in names):
        problems.append(f"{path.name}: ships no tests/ (the release workflow runs them from the sdist)")
    if any("__pycache__" in n for n in names):
        problems.append(f"{path.name}: ships __pycache__")
    return problems


def check_dir(
    dist_dir: Path, only: str | None = None, root: Path = ROOT, release: bool = False
) -> tuple[list[str], list[str]]:
    """``(checked file names, problems)`` for the artifacts in ``dist_dir``."""
    checked: list[str] = []
    problems: list[str] = []
    seen: dict[str, set[str]] = {}
    for path in sorted(dist_dir.iterdir()):
        if path.suffix == ".whl":
            dist_name, _, _, _ = parse_wheel_filename(path.name)
            kind = "wheel"
        elif path.name.endswith(".tar.gz"):
            dist_name, _ = parse_sdist_filename(path.name)
            kind = "sdist"
        else:
            continue
        if only is not None and canonicalize_name(dist_name) != canonicalize_name(only):
            continue
        pkg = find(str(dist_name), root, unpublished=True)
        checked.append(path.name)
        if not pkg.published:
            problems.append(
                f"{path.name}: {pkg.dist} is never published (published = false in the package list): "
                "no wheel or sdist of it belongs in a release"
            )
            continue
        base = next(iter(packages(root).values()))
        if kind == "wheel":
            problems += check_wheel(path, pkg, base.dist, base if release else None, unpublished_packages(root))
        else:
            problems += check_sdist(path, pkg, release)
        if release and pkg.dist not in seen:
            problems += [f"{pkg.dist}: {p}" for p in check_rendered(pkg)]
        seen.setdefault(pkg.dist, set()).add(kind)
    for dist, kinds in seen.items():
        if kinds != {"wheel", "sdist"}:
            problems.append(f"{dist}: expected a wheel and an sdist, found only {sorted(kinds)}")
    if not checked:
        problems.append(f"{dist_dir}: no wheel or sdist to check")
    return checked, problems


def license_members(path: Path) -> list[str]:
    """The LICENSE files inside a wheel or sdist, by their path in the archive."""
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    else:
        with tarfile.open(path) as tf:
            names = tf.getnames()
    return [n for n in names if n.rsplit("/", 1)[-1] == "LICENSE"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dist_dir", type=Path)
    parser.add_argument("--package", help="check only this distribution's files")
    parser.add_argument(
        "--release", action="store_true", help="also require a CHANGELOG entry and a current precision-base floor"
    )
    args = parser.parse_args(argv)
    checked, problems = check_dir(args.dist_dir, args.package, release=args.release)
    for name in checked:
        print(f"checked {name}; license files: {', '.join(license_members(args.dist_dir / name)) or 'none'}")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
