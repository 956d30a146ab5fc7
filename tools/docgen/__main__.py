"""``python -m tools.docgen [--check]``: regenerate every cog block of the docs in place, or check they are current.

The same as ``cog -r -I . PAGES`` / ``cog --check -I . PAGES`` over the pages that hold a cog block.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cogapp import Cog

from tools.docgen import ROOT

START = "[[[" + "cog"  # split, so this file is not taken for a page with a block


def pages() -> list[Path]:
    """Every Markdown file of docs/ that holds a cog block."""
    return sorted(p for p in (ROOT / "docs").rglob("*.md") if START in p.read_text(encoding="utf-8"))


def main(argv: list[str]) -> int:
    mode = ["--check", "--diff"] if argv == ["--check"] else ["-r"]
    if argv not in ([], ["--check"]):
        print("usage: python -m tools.docgen [--check]", file=sys.stderr)
        return 2
    files = [str(p.relative_to(ROOT)) for p in pages()]
    return Cog().main(["cog", *mode, "-I", str(ROOT), *files])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
