"""Checking a plugin's declared requirements against what is installed, without importing it."""

from __future__ import annotations

from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement


def unmet_requirements(requires: tuple[str, ...]) -> list[str]:
    """Return one sentence per requirement in ``requires`` that the environment does not satisfy.

    Requirements whose environment marker does not apply are ignored. Pre-releases and local versions
    (``2.13.0+cpu``) count as satisfying a floor.
    """
    problems: list[str] = []
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            problems.append(f"requirement {text!r} is not valid PEP 508 ({exc})")
            continue
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            installed = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            problems.append(f"needs {req}, which is not installed")
            continue
        if req.specifier and not req.specifier.contains(installed, prereleases=True):
            problems.append(f"needs {req}, found {req.name} {installed}")
    return problems
