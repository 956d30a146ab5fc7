"""The docs' content generators: one small module per data set, each a function that returns Markdown.

The pages carry the generated text between cog markers (``<!-- [[[cog ... ]]] -->`` ... ``<!-- [[[end]]] -->``),
so a page reads the same on GitHub and on the site; ``python -m tools.docgen`` regenerates them in place
(``cog -r``) and ``python -m tools.docgen --check`` fails when a page's text is out of date (``cog --check``).

* :mod:`tools.docgen.errors` - the spec grammar and every error a user can meet, raised by the real code;
* :mod:`tools.docgen.plugins` - the installed plugins and each backend's dtype table;
* :mod:`tools.docgen.zoo` - the model zoo's results (``docs/zoo.json``);
* :mod:`tools.docgen.audit` - the recorded precision audits (``docs/audit.json``);
* :mod:`tools.docgen.benchmarks` - the benchmarks summary's charts and findings (``docs/benchmarks/*.json``);
* :mod:`tools.docgen.benchmark_pages` and :mod:`tools.docgen.benchmark_index` - each benchmark result's page, and
  ``docs/benchmarks/index.md`` and ``analysis.md``, from the results' JSON (written by ``benchmarks/run.py``);
* :mod:`tools.docgen.reference` - the API reference pages and their navigation (a mkdocs-gen-files script);
* the compatibility data has its one renderer in :mod:`tools.compat`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def fence(text: str, lang: str = "text") -> str:
    return f"```{lang}\n{text}\n```"


def md_escape(text: str) -> str:
    """Text safe inside a Markdown table cell: no HTML, links, emphasis or column breaks."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\`*_[]|":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


def raised(func: Callable[[], Any]) -> BaseException | None:
    try:
        func()
    except Exception as exc:
        return exc
    return None
