"""A Griffe extension for the API reference (mkdocs.yml, mkdocstrings ``extensions``): every class page lists the
arguments of the class's constructor.

The plugin packages build each public class from one implementation class (a two-namespace design): the Trainer's
``FSDPPrecision`` derives from ``FSDPPrecisionImpl`` and documents the arguments (``Args:``), while Fabric's
``FSDPPrecision`` and the ``*Impl`` classes take the very same ``__init__`` and only said "the same arguments as
...": every argument one click away. (The package list, not this file, names the packages.)

When a package is loaded, each class whose docstring documents no argument gets the ``Args:`` section of a class of
the same package that has the same constructor (the same ``__init__``, inherited from the same class) and documents
every one of its parameters. mkdocstrings then renders the list on the class's own page, with each argument's type
and default from the signature. The packages' sources are not changed: only the documentation's copy of the
docstring is. A class without a docstring is left alone (mkdocstrings does not show it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import griffe

ARGS_TITLE = re.compile(r"(?:Args|Arguments|Parameters|Params):[ \t]*")
ITEM = re.compile(r"\s*\**(\w+)\s*(?:\([^)]*\))?\s*:")


def args_section(docstring: str) -> str:
    """The ``Args:`` section of a Google-style docstring: its title line and the indented lines below it, or ``""``."""
    lines = docstring.splitlines()
    for start, line in enumerate(lines):
        if ARGS_TITLE.fullmatch(line):
            end = start + 1
            while end < len(lines) and (not lines[end].strip() or lines[end][:1].isspace()):
                end += 1
            return "\n".join(lines[start:end]).rstrip()
    return ""


def documented(section: str) -> set[str]:
    """The argument names an ``Args:`` section documents (``name:``, ``name (type):``, ``*args:``, ``**kwargs:``)."""
    items = [line for line in section.splitlines()[1:] if line.strip()]
    if not items:
        return set()
    indent = len(items[0]) - len(items[0].lstrip())
    names = set()
    for line in items:
        if len(line) - len(line.lstrip()) == indent and (match := ITEM.match(line)):
            names.add(match.group(1))
    return names


def classes(module: Any) -> Iterator[Any]:
    """Every class defined in ``module`` and its submodules (not the names they import)."""
    for member in module.members.values():
        if member.is_alias:
            continue
        if member.is_module:
            yield from classes(member)
        elif member.is_class:
            yield member


def _constructor(cls: Any) -> Any:
    """The ``__init__`` function ``cls`` gets (its own or inherited from a class Griffe has loaded), or None."""
    try:
        init = cls.all_members.get("__init__")
        if init is not None and init.is_alias:
            init = init.final_target
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return init if init is not None and init.is_function else None


def _text(obj: Any) -> str:
    return obj.docstring.value if obj.docstring is not None else ""


def fill_arguments(package: Any) -> list[tuple[str, str]]:
    """Give each class of ``package`` that documents no argument the ``Args:`` section of a class with the same
    constructor that documents all of its parameters; ``[(class path, path of the class it was taken from)]``."""
    by_constructor: dict[str, list[tuple[Any, set[str]]]] = {}
    for cls in classes(package):
        init = _constructor(cls)
        if init is None or args_section(_text(init)):
            continue  # no constructor, or its own docstring documents it (mkdocstrings merges it into the class's)
        names = {p.name for p in init.parameters if p.name not in ("self", "cls")}
        if names:
            by_constructor.setdefault(init.path, []).append((cls, names))
    filled = []
    for group in by_constructor.values():
        donors = sorted(
            (cls.path, section)
            for cls, names in group
            if (section := args_section(_text(cls))) and names <= documented(section)
        )
        if not donors:
            continue
        donor, section = donors[0]
        for cls, _ in group:
            if cls.docstring is None or args_section(_text(cls)):
                continue
            cls.docstring.value = cls.docstring.value.rstrip() + "\n\n" + section
            cls.docstring.__dict__.pop("parsed", None)  # parsed again from the new text, should it have been read
            filled.append((cls.path, donor))
    return filled


class ConstructorArguments(griffe.Extension):
    """Runs :func:`fill_arguments` on every package Griffe loads for mkdocstrings."""

    def on_package(self, *, pkg: Any, **kwargs: Any) -> None:
        fill_arguments(pkg)


if not hasattr(griffe.Extension, "on_package"):  # Griffe before 1.14 names the event on_package_loaded
    ConstructorArguments.on_package_loaded = ConstructorArguments.on_package  # type: ignore[attr-defined]
