"""Constraints that pin every dependency of a package to the floor its published metadata declares.

``python -m tools.lowest packages/precision-fsdp [--extra lightning]`` prints, for each requirement of
``[project].dependencies`` (and of the named extras) that has a lower bound, ``name==<floor>``. Requirements
on this repository's own distributions are left out: the local tree provides them. A requirement without a
lower bound is reported on stderr, since "lowest" cannot mean anything for it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

LOCAL_DISTRIBUTIONS = frozenset({"precision-base", "precision-fsdp", "precision-deepspeed"})


def floor_of(req: Requirement) -> str | None:
    """The version a ``>=`` (or ``==``/``~=``) specifier starts at; ``None`` when there is no lower bound."""
    floors = [spec.version for spec in req.specifier if spec.operator in (">=", "==", "~=", "===")]
    if not floors:
        return None
    if len(floors) > 1:
        raise ValueError(f"{req}: more than one lower bound")
    return floors[0].rstrip(".*")


def requirements(pyproject: Path, extras: Iterable[str] = ()) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    raw = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise ValueError(f"{pyproject}: no extra {extra!r} (has {sorted(optional)})")
        raw.extend(optional[extra])
    return [Requirement(r) for r in raw]


def lowest_constraints(pyproject: Path, extras: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """``(pins, unpinned)``: ``name==floor`` lines, and requirements that have no floor to pin."""
    pins: dict[str, str] = {}
    unpinned: list[str] = []
    for req in requirements(pyproject, extras):
        name = canonicalize_name(req.name)
        if name in LOCAL_DISTRIBUTIONS:
            continue
        if req.marker is not None and not req.marker.evaluate():
            continue
        floor = floor_of(req)
        if floor is None:
            unpinned.append(str(req))
            continue
        if name in pins and pins[name] != floor:
            raise ValueError(f"{pyproject}: {name} has two floors, {pins[name]} and {floor}")
        pins[name] = floor
    return [f"{name}=={floor}" for name, floor in sorted(pins.items())], unpinned


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("package_dir", type=Path, help="folder holding the package's pyproject.toml")
    parser.add_argument("--extra", action="append", default=[], help="also pin the floors of this extra")
    parser.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    args = parser.parse_args(argv)
    pins, unpinned = lowest_constraints(args.package_dir / "pyproject.toml", args.extra)
    text = "".join(f"{line}\n" for line in pins)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    for req in unpinned:
        print(f"warning: {req} has no lower bound; not pinned", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
