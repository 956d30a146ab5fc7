"""Griffe extension (mkdocs.yml ``extensions``), kept only until the docstrings are rewritten: Sphinx roles
(``:class:`~precision_base.errors.X```) become mkdocstrings cross-references, reST simple tables Markdown tables.

``python tools/docgen/convert_roles.py`` rewrites the docstrings once in mkdocstrings' own syntax and then removes this
module and its line in mkdocs.yml.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import griffe

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # loaded by path

from tools.packages import packages

PACKAGES = tuple(packages())
SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|exc|mod|data|obj|const):`(~?)([\w.\s]+?)(\(\))?`")


def _resolve_in_scope(obj: Any, dotted: str) -> str | None:
    """The full path ``dotted`` names when written in ``obj``'s docstring (Python's scoping: own members, then
    the enclosing class and module), or None when it names nothing known there."""
    first, _, rest = dotted.partition(".")
    if first in PACKAGES:
        return dotted
    scope = obj
    while scope is not None:
        members = getattr(scope, "members", {})
        if first in members:
            member = members[first]
            base = member.target_path if member.is_alias else member.path
            return f"{base}.{rest}" if rest else str(base)
        scope = scope.parent
    return None


def sphinx_role_to_markdown(obj: Any, match: re.Match[str]) -> str:
    """One ``:role:`target``` as Markdown: a link to the documented object, else the name as code."""
    short, target, call = match.group(1), re.sub(r"\s+", "", match.group(2)), match.group(3) or ""
    title = (target.rsplit(".", 1)[-1] if short else target) + call
    path = _resolve_in_scope(obj, target)
    if path is None or not _public(path):
        return f"`{title}`"
    # optional: an object that has no page (e.g. a private module's) becomes plain code, not a broken build
    return f'<autoref optional identifier="{path}"><code>{title}</code></autoref>'


TITLED_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|exc|mod|data|obj|const):`([^`<]+?)\s*<([\w.\s]+)>`")


def titled_role_to_markdown(obj: Any, match: re.Match[str]) -> str:
    """``:role:`Title <target>``` as Markdown: a link titled ``Title``, else the title as code."""
    title, target = " ".join(match.group(1).split()), re.sub(r"\s+", "", match.group(2))
    path = _resolve_in_scope(obj, target)
    if path is None or not _public(path):
        return f"`{title}`"
    return f'<autoref optional identifier="{path}"><code>{title}</code></autoref>'


RST_BORDER = re.compile(r"^( *)(=+(?: +=+)+) *$")


def rst_tables_to_markdown(text: str) -> str:
    """reStructuredText simple tables (``====  ====`` borders) in a docstring as Markdown tables."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        border = RST_BORDER.match(lines[i])
        closing = [j for j in range(i + 2, len(lines)) if lines[j] == lines[i]] if border else []
        if not border or len(closing) < 2:
            out.append(lines[i])
            i += 1
            continue
        indent, spans = border.group(1), [m.span() for m in re.finditer(r"=+", lines[i])]

        def cells(line: str, spans: list[tuple[int, int]] = spans) -> list[str]:
            bounds = [start for start, _ in spans[1:]] + [None]
            return [line[start:end].strip() for (start, _), end in zip(spans, bounds, strict=True)]

        head, end = cells(lines[i + 1]), closing[1]
        rows = [cells(line) for line in lines[closing[0] + 1 : end] if line.strip()]
        out.append(indent + "| " + " | ".join(head) + " |")
        out.append(indent + "|" + "---|" * len(head))
        out += [indent + "| " + " | ".join(row) + " |" for row in rows]
        i = end + 1
    return "\n".join(out)


def _public(path: str) -> bool:
    return not any(part.startswith("_") for part in path.split("."))


def _documented_objects(obj: Any) -> Iterator[Any]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _documented_objects(member)


class SphinxRoles(griffe.Extension):  # type: ignore[misc]
    """Docstrings' Sphinx roles as cross-references and reST simple tables as Markdown tables."""

    def on_package(self, *, pkg: Any, **kwargs: Any) -> None:
        for obj in _documented_objects(pkg):
            if obj.docstring is not None and "==" in obj.docstring.value:
                obj.docstring.value = rst_tables_to_markdown(obj.docstring.value)
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = TITLED_ROLE.sub(
                    functools.partial(titled_role_to_markdown, obj), obj.docstring.value
                )
                obj.docstring.value = SPHINX_ROLE.sub(
                    functools.partial(sphinx_role_to_markdown, obj), obj.docstring.value
                )
