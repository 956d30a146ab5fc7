"""mkdocs hooks (mkdocs.yml ``hooks``): where mkdocstrings finds the packages, and line breaks in inline code.

Before any plugin reads its configuration, the Python handler of mkdocstrings gets each published package's
``src/`` from the package list as its ``paths`` (mkdocs.yml names no package).

A long inline code span may wrap only between the parts of a name.

Inline code never breaks inside a name (extra.css: word-break keep-all, overflow-wrap normal); CSS has no way to
allow a break only after a dot or an underscore, so a span longer than :data:`LONG_CODE` characters gets a
``<wbr>`` after ``.``, ``_``, ``:``, ``/``, ``=``, ``(`` and ``,`` between word characters:
``precision_base.<wbr>pytorch_<wbr>lightning``. Tables scroll instead (extra.css), so their cells are left alone.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

CODE_PRE_OR_TABLE = re.compile(r"(<pre\b.*?</pre>|<table\b.*?</table>)|<code>(.*?)</code>", re.DOTALL)
WRAP_AFTER = re.compile(r"(?<=\w)([._:/=(,])(?=\w)")
LONG_CODE = 20  # characters: a shorter span always fits a phone's line, so it moves to the next line whole


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).strip()


def wrap_inline_code(html: str) -> str:
    """``<wbr>`` at the allowed breaks of every long inline ``<code>`` span outside code blocks and tables."""

    def span(match: re.Match[str]) -> str:
        if match.group(1) is not None or len(_text(match.group(2))) <= LONG_CODE:
            return match.group(0)
        parts = re.split(r"(<[^>]+>|&\w+;|&#\d+;)", match.group(2))
        inner = "".join(part if part.startswith(("<", "&")) else WRAP_AFTER.sub(r"\1<wbr>", part) for part in parts)
        return f"<code>{inner}</code>"

    return CODE_PRE_OR_TABLE.sub(span, html)


@event_priority(100)  # before mkdocstrings' own on_config, which builds its handlers from this configuration
def on_config(config: Any) -> Any:
    root = Path(__file__).resolve().parents[2]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from tools.docgen.reference import sources

    handler = config["plugins"]["mkdocstrings"].config["handlers"].setdefault("python", {})
    handler["paths"] = [str(src) for src in sources().values()]
    return config


def on_page_content(html: str, **_: Any) -> str:
    return wrap_inline_code(html)
