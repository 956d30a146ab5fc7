"""Checking a plugin's declared requirements against what is installed, without importing it."""

from __future__ import annotations

import functools
from typing import Optional


@functools.cache
def installed_version(name: str) -> Optional[str]:
    """The installed version of distribution ``name``, or ``None``; cached, since reading metadata is slow.

    [`precision_base.clear_cache`][] forgets what was cached.
    """
    from importlib import metadata  # imported on first use: `import precision_base` stays cheap

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def unmet_requirements(requires: tuple[str, ...], extra: str = "") -> list[str]:
    """Return one sentence per requirement in ``requires`` that the environment does not satisfy.

    Requirements whose environment marker does not apply are ignored, and so are those of optional extras; with
    ``extra`` (e.g. ``"fp8"``), only the lines of that extra (``Requires-Dist: x; extra == "fp8"``) are checked.
    Pre-releases and local versions (``2.13.0+cpu``) count as satisfying a floor.
    """
    # packaging is imported here, not at module level: `import precision_base` stays cheap
    from packaging.requirements import InvalidRequirement, Requirement

    problems: list[str] = []
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            problems.append(f"requirement {text!r} is not valid PEP 508 ({exc})")
            continue
        # `extra` is set to "" so that lines for optional extras (Requires-Dist: x; extra == "docs") never apply
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        if extra and (req.marker is None or req.marker.evaluate({"extra": ""})):
            continue  # a line of the distribution itself, not of the extra: checked with extra=""
        installed = installed_version(req.name)
        shown = f"{req.name}{req.specifier}" if extra else str(req)  # the extra's marker is said by the caller
        if installed is None:
            problems.append(f"needs {shown}, which is not installed")
        elif req.specifier and not req.specifier.contains(installed, prereleases=True):
            problems.append(f"needs {shown}, found {req.name} {installed}")
    return problems
