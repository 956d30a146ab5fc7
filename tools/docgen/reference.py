"""The API reference: one page per public module of each published package, and their navigation.

Run by mkdocs-gen-files (tools/docgen/site.py) at build time: the pages are never committed. Each page holds a
mkdocstrings ``:::`` block; each object is documented once, where it is defined. A name a module re-exports from
another public module is not documented again: the module lists it with a link to where it is documented. Names
re-exported from a private module are documented where they are exported (the private module has no page).
The navigation is ``reference/SUMMARY.md``, read by mkdocs-literate-nav (``- API reference: reference/``). Each
package's modules come in two groups: those that define what the package itself exports or that the readers' pages
and the examples name (what users import), then the rest (internals, for plugin authors and contributors).

A class that takes the constructor of a class documenting its arguments (Fabric's ``FSDPPrecision`` and
``DeepSpeedPrecision``, the ``*Impl`` classes) lists those arguments on its own page: the Griffe extension
tools/docgen/class_arguments.py, which mkdocs.yml gives mkdocstrings, copies the ``Args:`` section when the
package is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tools.docgen import ROOT
from tools.packages import packages

DOCS = ROOT / "docs"


def sources() -> dict[str, Path]:
    """``{module: src folder}`` of the package list's published packages."""
    return {p.module: p.src for p in packages().values() if getattr(p, "published", True)}


def _public(path: str) -> bool:
    return not any(part.startswith("_") for part in path.split("."))


def _public_modules(package: Any) -> Iterator[Any]:
    yield package
    for member in package.members.values():
        if not member.is_alias and member.is_module and _public(member.name):
            yield from _public_modules(member)


def blocks(package_name: str) -> dict[str, str]:
    """The ``:::`` block of every public module of a package, by module path."""
    import griffe

    src = sources()
    if package_name not in src or not (src[package_name] / package_name).is_dir():
        return {}
    package = griffe.load(package_name, search_paths=[str(p) for p in src.values()], resolve_aliases=False)
    out = {}
    for mod in _public_modules(package):
        own: list[str] = []
        links: list[tuple[str, str]] = []
        for member_name, member in mod.members.items():
            if member_name.startswith("_"):
                continue
            if member.is_alias:
                if mod.exports is None or member_name not in mod.exports:
                    continue  # an import, not an export
                target = member.target_path
                if _public(target.rsplit(".", 1)[0]) and target.split(".", 1)[0] in src:
                    links.append((member_name, target))
                    continue
            elif member.is_module:
                continue
            own.append(member_name)
        members = "[" + ", ".join(own) + "]" if own else "false"
        block = f"::: {mod.path}\n    options:\n      members_order: source\n      members: {members}\n"
        block += "      show_submodules: false\n"
        if links:
            rows = ["| name | documented at |", "|---|---|"]
            rows += [f"| `{n}` | [`{t}`][{t}] |" for n, t in links]
            block += f"\nAlso exported by `{mod.path}` (documented where it is defined):\n\n" + "\n".join(rows) + "\n"
        out[mod.path] = block
    return out


def _contributors_pages() -> set[str]:
    """The pages of mkdocs.yml's "Contributing" nav group (``architecture.md``, ...), read from the nav."""
    import yaml

    class Lenient(yaml.SafeLoader):
        pass

    Lenient.add_multi_constructor("", lambda loader, suffix, node: None)  # mkdocs.yml's !!python/name tags
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Lenient)["nav"]
    group = next((e["Contributing"] for e in nav if isinstance(e, dict) and "Contributing" in e), [])
    return {page for entry in group for page in entry.values()}


def guides_text() -> str:
    """What readers read: every page under docs/ but the contributors' pages, the changelogs and the generated
    benchmark pages, and the example files the pages embed."""
    skip = _contributors_pages()
    texts = []
    for path in sorted(DOCS.rglob("*.md")):
        rel = path.relative_to(DOCS).as_posix()
        if rel in skip or rel.startswith(("benchmarks/", "changelog")):
            continue
        texts.append(path.read_text(encoding="utf-8"))
    texts += [path.read_text(encoding="utf-8") for path in sorted((DOCS / "examples").rglob("*.py"))]
    return "\n".join(texts)


def in_guides(modules: list[str], text: str) -> list[str]:
    """The ``modules`` that ``text`` names (as a module or the prefix of a name in one)."""
    return [m for m in modules if re.search(rf"(?<![\w.]){re.escape(m)}(?![\w])", text)]


def pages() -> dict[str, str]:
    """``{path under reference/: page text}`` for every public module, and ``SUMMARY.md``, the section's nav."""
    out: dict[str, str] = {}
    nav: list[str] = []
    text = guides_text()
    for name, src in sources().items():
        found = blocks(name)
        folder = src.relative_to(src.parents[2]) / name
        if not found:
            out[f"{name}.md"] = f"# `{name}`\n\n!!! note\n    `{name}` has no source in this tree.\n"
            nav.append(f"* [{name}]({name}.md)")
            continue
        modules = sorted(m for m in found if m != name)  # in the nav and the list: alphabetical, findable
        exported = re.findall(r"\]\[([\w.]+)\]", found[name])  # what the package itself exports, linked
        homes = {max((m for m in modules if t.startswith(m + ".")), key=len, default="") for t in exported}
        used = sorted(set(in_guides(modules, text)) | (homes - {""}))
        groups = [("What users import", used), ("Internals", [m for m in modules if m not in used])]
        listing = "".join(
            f"\n**{title}**"
            + (" (for plugin authors and contributors)" if title == "Internals" else "")
            + ":\n\n"
            + "\n".join(f"- [`{m}`]({m}.md)" for m in group)
            + "\n"
            for title, group in groups
            if group
        )
        out[f"{name}.md"] = (
            f"# `{name}`\n\nGenerated from the docstrings in `{folder.as_posix()}`.\n\n{found[name]}\n"
            "## Modules\n\nOne page per module: first the modules whose names users import (the package's exports and "
            f"what the guides name), then the internals.\n{listing}"
        )
        out.update({f"{m}.md": f"# `{m}`\n\n{found[m]}" for m in modules})
        nav += [f"* {name}", f"    * [{name}]({name}.md)"]
        for title, group in groups:
            if group:
                nav += [f"    * {title}", *(f"        * [{m}]({m}.md)" for m in group)]
    out["SUMMARY.md"] = "\n".join(nav) + "\n"
    return out
