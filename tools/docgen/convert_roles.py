"""One-shot: rewrite the Sphinx roles and reST simple tables in the packages' docstrings in mkdocstrings' own syntax,
then drop the Griffe extension that translated them at build time (tools/docgen/sphinx_roles.py).

``:class:`~precision_base.errors.X``` becomes ``[`X`][precision_base.errors.X]`` (a cross-reference) when the
docs render that object (it is in the built site's ``objects.inv``), else plain code, ``X``; a name is resolved as
the extension resolved it (Python's scoping from the docstring's object: its members, then the enclosing class
and module; a full ``precision_*`` path as written; an alias through to what it names). A reST simple table
(``====  ====`` borders) becomes a Markdown table; ``:role:`Title <target>``` keeps its title. Only docstrings
change (the lines Griffe reads them from); code and comments are left alone. A line the rewrite made longer than
ruff's 120 characters is broken at a space outside code and links (a soft line break in Markdown).

    python tools/docgen/convert_roles.py            # builds the site once for its objects.inv, then rewrites
    python tools/docgen/convert_roles.py --inventory site/objects.inv --keep-extension   # rewrite only

Afterwards ``mkdocs build --strict`` must pass (every cross-reference resolves) and ``pytest docs/tests`` finds no
raw role on any page. Without ``--keep-extension`` the extension's module, its line in mkdocs.yml and this script
are removed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.docgen.reference import sources  # noqa: E402
from tools.docgen.sphinx_roles import SPHINX_ROLE, rst_tables_to_markdown  # noqa: E402

TITLED_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|exc|mod|data|obj|const):`([^`<]+?)\s*<([\w.\s]+)>`")
EXTENSION_LINE = "              - tools/docgen/sphinx_roles.py:SphinxRoles\n"


def inventory(path: Path) -> set[str]:
    """The identifiers an ``objects.inv`` (Sphinx inventory v2, as mkdocstrings writes it) lists."""
    head = path.read_bytes().split(b"\n", 4)
    return {line.split(" ", 1)[0] for line in zlib.decompress(head[4]).decode().splitlines() if line.strip()}


def build_inventory() -> Path:
    out = Path(tempfile.mkdtemp()) / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true", "DS_BUILD_OPS": "0"}
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(out)], cwd=ROOT, env=env, check=True)
    return out / "objects.inv"


def _objects(obj: Any) -> Iterator[Any]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


def _candidates(obj: Any, dotted: str, loaded: Any) -> list[str]:
    """The full paths ``dotted`` may name in ``obj``'s docstring (Python's scoping: its members, then the enclosing
    class and module; a package's name as written), each alias followed through to what it names."""
    first, _, rest = dotted.partition(".")
    paths = []
    if first in loaded:
        paths.append(dotted)
    scope = obj
    while not paths and scope is not None:
        if first in scope.members:
            member = scope.members[first]
            paths.append(f"{member.path}.{rest}" if rest else str(member.path))
        scope = scope.parent
    for path in list(paths):
        for _ in range(5):  # an alias of an alias ...
            try:
                found = loaded[path]
            except (KeyError, ValueError, AttributeError):
                break
            if not found.is_alias:
                break
            path = found.target_path
            paths.append(path)
    return paths


def _identifier(obj: Any, dotted: str, loaded: Any, known: set[str]) -> str | None:
    """The shortest identifier the docs render for what ``dotted`` names (None: the docs render nothing for it)."""
    found = [
        p for p in _candidates(obj, dotted, loaded) if p in known and not any(x.startswith("_") for x in p.split("."))
    ]
    return min(found, key=len) if found else None


MAX_LINE = 120  # ruff's line-length (pyproject.toml)


def _breaks(line: str) -> list[int]:
    """Offsets of the spaces in ``line`` where it may be broken: not inside a code span or a link's brackets."""
    out, code, depth = [], False, 0
    for i, ch in enumerate(line):
        if ch == "`":
            code = not code
        elif not code and ch == "[":
            depth += 1
        elif not code and ch == "]":
            depth = max(0, depth - 1)
        elif ch == " " and not code and depth == 0 and line[:i].strip():
            out.append(i)
    return out


def _continuation_indent(line: str, following: str | None) -> str:
    indent = line[: len(line) - len(line.lstrip())]
    if following is not None and following.strip():
        deeper = following[: len(following) - len(following.lstrip())]
        if len(deeper) > len(indent):
            return deeper  # the line's item already continues deeper
    item = re.match(r"(\s*)([-*]|\d+\.) ", line)
    if item:
        return " " * len(item.group(0))
    if re.match(r"\s+[\w*]+(\s*\([^)]*\))?: \S", line):  # a Google-style section item, ``name: text``
        return indent + "    "
    return indent


def wrap_long_lines(text: str, original: str) -> str:
    """Lines the conversion made longer than :data:`MAX_LINE` broken at a safe space (a soft line break in
    Markdown), the rest continuing on the next line with the indentation the construct needs."""
    before = set(original.split("\n"))
    lines = text.split("\n")
    out: list[str] = []
    for i, line in enumerate(lines):
        following = lines[i + 1] if i + 1 < len(lines) else None
        while len(line) > MAX_LINE and line not in before and not line.lstrip().startswith("|"):
            breaks = _breaks(line)
            if not breaks:
                break
            # the last break that fits; else the first, leaving one long word (a link) alone on its line, which
            # ruff's E501 allows
            cut = max((b for b in breaks if b <= MAX_LINE), default=breaks[0])
            indent = _continuation_indent(line, following)
            out.append(line[:cut].rstrip())
            line = indent + line[cut + 1 :].lstrip()
        out.append(line)
    return "\n".join(out)


def convert_docstring(text: str, obj: Any, loaded: Any, known: set[str], counts: dict[str, int]) -> str:
    original = text
    if "==" in text:
        text = rst_tables_to_markdown(text)

    def one(match: re.Match[str]) -> str:
        short, target, call = match.group(1), re.sub(r"\s+", "", match.group(2)), match.group(3) or ""
        title = (target.rsplit(".", 1)[-1] if short else target) + call
        path = _identifier(obj, target, loaded, known)
        if path is None:
            counts["code"] += 1
            return f"`{title}`"
        counts["link"] += 1
        return f"[`{title}`][]" if title == path else f"[`{title}`][{path}]"

    def titled(match: re.Match[str]) -> str:  # :role:`Title <target>`
        title, target = " ".join(match.group(1).split()), re.sub(r"\s+", "", match.group(2))
        path = _identifier(obj, target, loaded, known)
        counts["link" if path else "code"] += 1
        return f"[`{title}`][{path}]" if path else f"`{title}`"

    text = TITLED_ROLE.sub(titled, text)
    return wrap_long_lines(SPHINX_ROLE.sub(one, text), original)


def convert(known: set[str]) -> dict[str, int]:
    import griffe

    src = sources()
    collection = griffe.ModulesCollection()
    counts = {"link": 0, "code": 0, "files": 0}
    edits: dict[Path, list[tuple[int, int, Any]]] = {}
    for name in src:
        griffe.load(
            name, search_paths=[str(p) for p in src.values()], resolve_aliases=False, modules_collection=collection
        )
    for name in src:
        for obj in _objects(collection[name]):
            doc = obj.docstring
            if doc is None or doc.lineno is None or doc.endlineno is None or obj.filepath is None:
                continue
            edits.setdefault(Path(obj.filepath), []).append((doc.lineno, doc.endlineno, obj))
    for path, spans in edits.items():
        lines = path.read_text(encoding="utf-8").split("\n")
        for start, end, obj in sorted(spans, key=lambda s: s[0], reverse=True):
            raw = "\n".join(lines[start - 1 : end])
            new = convert_docstring(raw, obj, collection, known, counts)
            lines[start - 1 : end] = new.split("\n")
        text = "\n".join(lines)
        if text != path.read_text(encoding="utf-8"):
            path.write_text(text, encoding="utf-8")
            counts["files"] += 1
    return counts


def drop_extension() -> None:
    config = ROOT / "mkdocs.yml"
    text = config.read_text(encoding="utf-8")
    text = text.replace("            extensions:\n" + EXTENSION_LINE, "").replace(EXTENSION_LINE, "")
    config.write_text(text, encoding="utf-8")
    (ROOT / "tools" / "docgen" / "sphinx_roles.py").unlink()
    Path(__file__).unlink()  # one shot: its work is done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", type=Path, help="a built site's objects.inv (default: build the site once)")
    parser.add_argument("--keep-extension", action="store_true", help="leave sphinx_roles.py and mkdocs.yml alone")
    args = parser.parse_args(argv)
    known = inventory(args.inventory or build_inventory())
    counts = convert(known)
    print(f"{counts['link']} roles became cross-references, {counts['code']} plain code, in {counts['files']} files")
    if not args.keep_extension:
        drop_extension()
        print("removed tools/docgen/sphinx_roles.py, its line in mkdocs.yml and tools/docgen/convert_roles.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
