"""The built docs site, read in a real browser (headless Chromium through Playwright) at 1280 px.

Every page of the site is loaded from a local server on 127.0.0.1 and checked for what a reader would see:

* no console error or uncaught exception, except fonts that cannot load offline;
* no code block (``pre``) and no table wider than its container (text cut off at the right edge), at 1280 px
  and at a phone's 390 px: a wide one scrolls sideways inside it (a table keeps its first column in view); output,
  error and tree blocks (``text``) wrap inside their box instead, and every block names its language;
* no raw Sphinx role (``:class:``, ``:func:``, ...) or reST table border shown as text;
* every image loads;
* the copy button of a code block copies no ``$`` prompt;
* at 390 px no inline code span breaks inside a name or runs past the text column;
* no generated table cell shows a Python repr or exception text (a diagnostic is for ``precision-plugins show``),
  no reader's page shows an emoji or wording meant for the project's developers, at either width;
* a full-page screenshot of every page at both widths goes to ``build/docs-screenshots/<width>/`` (or
  ``DOCS_SCREENSHOTS``) for a reviewer to look at.

The site is built once per run with ``mkdocs build --strict`` into a temporary folder, or taken from
``DOCS_SITE_DIR`` when that names an already built site (the nox ``docs`` session builds it once). The browser is
a system Chromium (Debian: ``apt-get install chromium``), found on ``PATH`` or given by ``CHROMIUM``; Playwright's
own browser download is not used. Without a Chromium the tests fail (they are never skipped).

Run as a script to write each page's measurements to a JSON file (page height in px, overflowing blocks, ...)::

    python docs/tests/test_site.py --site site --out measurements.json
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 1280
PHONE_WIDTH = 390  # a common phone's CSS width
HEIGHT = 900
# Fonts come from Google's servers unless the theme is told not to use them; offline they cannot load.
OFFLINE_FONTS = re.compile(r"fonts\.(googleapis|gstatic)\.com|\.woff2?\b|font", re.IGNORECASE)
# Wording for the project's own developers, not for a reader: issue numbers, the maintainers, tests pinning things,
# test files and torchao's source files named in prose. The pages written for contributors (architecture, releasing),
# the changelogs and the API reference (docstrings) are left out.
INTERNAL = re.compile(
    r"\bissues? \d+\b|maintainers'|a test pins|\btests?/test_\w+\.py|torchao/(?:prototype|float8)/[\w/]+\.py"
)
NOT_FOR_READERS = ("/architecture/", "/releasing/", "/changelog/", "/reference/")
# What Python prints, not what a reader is told: an exception line, a traceback, a list or dict repr, an object repr.
PYTHON_REPR = re.compile(
    r"\b\w+(?:Error|Exception): |Traceback \(most recent call last\)|\[\s*'[^'\n]*',\s*'|\{'\w+': |<[\w.]+ object at 0x"
)
# Emoji need an emoji font the reader may not have (a pass mark then shows as an empty box): pictographs, the
# emoji-only marks (check, cross, question, exclamation, star, circle) and the emoji presentation selector.
EMOJI = re.compile("[\U0001f000-\U0001faff\u2705\u274c\u274e\u2753-\u2755\u2757\u2b50\u2b55\ufe0f]")
SCREENSHOTS = Path(os.environ.get("DOCS_SCREENSHOTS", ROOT / "build" / "docs-screenshots"))
RAW_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|exc|mod|data|obj|const|ref):`?|={6,} +={3,}")

# Runs in the page: measures every code block and table against the box it has to fit in.
MEASURE_JS = """
() => {
  const tol = 1;
  const over = (el) => el.scrollWidth > el.clientWidth + tol;
  const blocks = [];
  const describe = (el) => (el.innerText || '').trim().split('\\n')[0].slice(0, 80);
  // a code block wider than its box is fine when it scrolls horizontally (its lines stay as written); one that
  // overflows without scrolling cuts text off
  const scrolls = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const codeBlocks = [];
  for (const pre of document.querySelectorAll('.md-content pre')) {
    const code = pre.querySelector('code') || pre;
    const style = getComputedStyle(code);
    const fenced = pre.closest('[class*="language-"]');
    const language = fenced ? (fenced.className.match(/language-([\\w-]+)/) || [])[1] : '';
    codeBlocks.push({
      white_space: style.whiteSpace, word_break: style.wordBreak, overflow_wrap: style.overflowWrap,
      wide: over(code), scrolls: scrolls(code), text: describe(pre), language: language || '',
    });
    if ((over(code) && !scrolls(code)) || (over(pre) && !scrolls(pre))) {
      blocks.push({kind: 'pre', width: code.scrollWidth, visible: code.clientWidth, text: describe(pre)});
    }
  }
  // a table wider than the column is fine when its wrapper scrolls sideways (extra.css), with its first column
  // (what names the row) sticky; one that overflows without scrolling cuts text off
  const tables = [];
  for (const table of document.querySelectorAll('.md-content table')) {
    const wrap = table.closest('.md-typeset__scrollwrap') || table.parentElement;
    const first = table.querySelector('tr > :first-child');
    const wide = over(table) || over(wrap);
    tables.push({
      wide: wide, scrolls: scrolls(wrap), text: describe(table),
      sticky: first !== null && getComputedStyle(first).position === 'sticky',
    });
    if ((over(table) && !scrolls(table)) || (over(wrap) && !scrolls(wrap))) {
      const width = Math.max(table.scrollWidth, wrap.scrollWidth);
      blocks.push({kind: 'table', width: width, visible: wrap.clientWidth, text: describe(table)});
    }
  }
  const images = [...document.querySelectorAll('.md-content img')].map((img) => ({
    src: img.getAttribute('src'), loaded: img.complete && img.naturalWidth > 0,
  }));
  // what the copy button copies: the theme reads innerText while data-md-copying is set on the code element
  const prompts = [];
  for (const code of document.querySelectorAll('.md-content .highlight code')) {
    code.setAttribute('data-md-copying', '');
    const copied = code.innerText;
    code.removeAttribute('data-md-copying');
    for (const line of copied.split('\\n')) {
      if (/^\\s*[$>] /.test(line) || line.startsWith('>>> ')) prompts.push(line.slice(0, 80));
    }
  }
  const article = document.querySelector('.md-content article') || document.body;
  // inline code in prose: where a span wraps, the characters on both sides of each line break; a break between
  // two letters or digits splits a name
  const inline = {spans: 0, wrapped: 0, splits: [], overflowing: []};
  const right = article.getBoundingClientRect().right;
  const range = document.createRange();
  for (const code of document.querySelectorAll('.md-content code')) {
    // code in a table scrolls with its table (checked above), not with the text column
    if (code.closest('pre') || code.closest('table') || !code.textContent.trim()) continue;
    inline.spans += 1;
    const rects = [...code.getClientRects()];
    // the span's own padding may reach past the column (the theme clones it onto every line), its text may not
    const pad = parseFloat(getComputedStyle(code).paddingRight) || 0;
    if (rects.some((r) => r.right > right + pad + 1)) inline.overflowing.push(code.textContent.slice(0, 80));
    if (rects.length < 2) continue;
    inline.wrapped += 1;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    let top = null, previous = '', seen = '';
    while (walker.nextNode()) {
      const node = walker.currentNode;
      for (let i = 0; i < node.length; i++) {
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const box = range.getClientRects()[0];
        const ch = node.data[i];
        if (box && ch.trim()) {
          if (top !== null && box.top > top + 2 && /[A-Za-z0-9]/.test(previous) && /[A-Za-z0-9]/.test(ch)) {
            inline.splits.push(`${code.textContent.slice(0, 80)} | split as ${seen.slice(-20)}|${ch}`);
          }
          top = box.top;
          previous = ch;
        } else if (box) {
          previous = ch;
        }
        seen += ch;
      }
    }
  }
  return {
    inline_code: inline,
    height: document.documentElement.scrollHeight,
    pre: document.querySelectorAll('.md-content pre').length,
    tables: document.querySelectorAll('.md-content table').length,
    overflowing: blocks,
    code_blocks: codeBlocks,
    table_blocks: tables,
    images: images,
    copied_prompts: prompts,
    table_text: [...document.querySelectorAll('.md-content table')].map((t) => t.innerText).join('\\n'),
    ratio_cells: [...document.querySelectorAll('.md-content td')].map((td) => td.textContent.trim())
      .filter((t) => /\\d \\[/.test(t)),
    text: article.innerText,
  };
}
"""


def chromium_path() -> str:
    """The system Chromium's executable: ``CHROMIUM``, else the first Chromium found on ``PATH``."""
    candidates = [os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"]
    for name in candidates:
        if name and (found := shutil.which(name)):
            return found
    raise RuntimeError(
        "no Chromium found: install one (Debian/Ubuntu: `apt-get install -y chromium`) or set CHROMIUM to its "
        "executable; Playwright's own browser download is not used"
    )


def build_site(out: Path) -> Path:
    """``mkdocs build --strict`` of this repository into ``out``."""
    env = {**os.environ, "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1", "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    return out


def site_pages(site: Path) -> list[str]:
    """URL paths of every page of a built site (``index.html`` files), search and 404 pages left out."""
    pages = []
    for path in sorted(site.rglob("index.html")):
        rel = path.parent.relative_to(site).as_posix()
        if rel.startswith(("search", "assets")):
            continue
        pages.append("/" if rel == "." else f"/{rel}/")
    return pages


@functools.lru_cache(maxsize=1)
def _quiet_handler() -> type[http.server.SimpleHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _console_line(msg: Any) -> str:
    url = (msg.location or {}).get("url", "")
    return f"{msg.text} ({url})" if url else str(msg.text)


def _github_facts(route: Any) -> None:
    """The theme asks GitHub's API for the repository's stars and latest release; that cannot run offline.

    Answered with a fixed reply so the pages are tested the same with and without a network (a stand-in for a
    third-party service, not for anything of ours).
    """
    body = {"stargazers_count": 0, "forks_count": 0, "tag_name": "v0", "name": "v0"}
    route.fulfill(status=200, content_type="application/json", body=json.dumps(body))


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """A static file server for ``site`` on 127.0.0.1 (a free port), running in a daemon thread."""
    handler = functools.partial(_quiet_handler(), directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def measure_site(site: Path, width: int = WIDTH) -> dict[str, dict[str, Any]]:
    """Load every page of ``site`` in headless Chromium at ``width`` px; what each page shows, by URL path."""
    from playwright.sync_api import sync_playwright

    server, base = serve(site)
    results: dict[str, dict[str, Any]] = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": width, "height": HEIGHT})
            errors: list[str] = []
            page.route(re.compile(r"https://api\.github\.com/.*"), _github_facts)
            page.on("console", lambda msg: errors.append(_console_line(msg)) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
            page.on("requestfailed", lambda req: errors.append(f"request failed: {req.url}"))
            for path in site_pages(site):
                errors.clear()
                page.goto(base + path, wait_until="load")
                page.wait_for_load_state("networkidle")
                data = page.evaluate(MEASURE_JS)
                shot = SCREENSHOTS / str(width) / f"{path.strip('/').replace('/', '_') or 'home'}.png"
                shot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(shot), full_page=True)
                data["python_repr"] = sorted(set(m.group(0) for m in PYTHON_REPR.finditer(data.pop("table_text"))))
                text = data.pop("text")
                data["internal"] = sorted(set(INTERNAL.findall(text)))
                data["emoji"] = sorted(set(EMOJI.findall(text)))
                data["raw_roles"] = sorted(set(RAW_ROLE.findall(text)))
                data["raw_role_count"] = len(RAW_ROLE.findall(text))
                data["console_errors"] = [e for e in errors if not OFFLINE_FONTS.search(e)]
                results[path] = data
            browser.close()
    finally:
        server.shutdown()
    return results


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("DOCS_SITE_DIR")
    if given:
        path = Path(given).resolve()
        assert (path / "index.html").is_file(), f"DOCS_SITE_DIR={given} holds no built site (no index.html)"
        return path
    return build_site(tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def measured(site: Path) -> dict[str, dict[str, Any]]:
    return measure_site(site)


@pytest.fixture(scope="module")
def measured_on_a_phone(site: Path) -> dict[str, dict[str, Any]]:
    return measure_site(site, PHONE_WIDTH)


def _report(found: dict[str, Any]) -> str:
    return "\n".join(f"  {page}: {what}" for page, what in found.items())


def test_the_site_has_every_page(site: Path) -> None:
    pages = site_pages(site)
    for expected in ("/", "/quickstart/", "/compatibility/", "/benchmarks/", "/reference/precision_base/"):
        assert expected in pages, f"{expected} missing from the built site: {pages}"


def test_no_console_errors(measured: dict[str, dict[str, Any]]) -> None:
    found = {page: m["console_errors"] for page, m in measured.items() if m["console_errors"]}
    assert not found, f"console errors (offline fonts excepted):\n{_report(found)}"


def test_no_code_block_or_table_overflows_at_1280px(measured: dict[str, dict[str, Any]]) -> None:
    found = {
        page: [f"{b['kind']} {b['width']}px in {b['visible']}px: {b['text']!r}" for b in m["overflowing"]]
        for page, m in measured.items()
        if m["overflowing"]
    }
    total = sum(len(v) for v in found.values())
    assert not found, f"{total} blocks wider than their container at {WIDTH}px:\n{_report(found)}"


def test_no_code_block_or_table_overflows_on_a_phone(measured_on_a_phone: dict[str, dict[str, Any]]) -> None:
    found = {
        page: [f"{b['kind']} {b['width']}px in {b['visible']}px: {b['text']!r}" for b in m["overflowing"]]
        for page, m in measured_on_a_phone.items()
        if m["overflowing"]
    }
    total = sum(len(v) for v in found.values())
    assert not found, f"{total} blocks wider than their container at {PHONE_WIDTH}px:\n{_report(found)}"


def test_every_block_says_what_it_holds(measured: dict[str, dict[str, Any]]) -> None:
    """Every code block carries its language class (``python``, ``bash``, ``text`` for output, errors and trees),
    so that the styles (and these tests) tell code from what is read."""
    blocks = [(page, b) for page, m in measured.items() for b in m["code_blocks"]]
    unnamed = [f"{page}: {b['text']!r}" for page, b in blocks if not b["language"]]
    assert not unnamed, "code blocks without a language:\n" + "\n".join(unnamed)


def test_output_error_and_tree_blocks_wrap_inside_their_box_at_1280px(measured: dict[str, dict[str, Any]]) -> None:
    """Output, error messages and trees (``text`` blocks) wrap their lines inside the box (``pre-wrap``): the end
    of a long error line (its remedy) is on the page, not past the right edge."""
    text = [(page, b) for page, m in measured.items() for b in m["code_blocks"] if b["language"] == "text"]
    assert text, "the site has output blocks"
    unwrapped = [f"{page}: {b['white_space']} {b['text']!r}" for page, b in text if b["white_space"] != "pre-wrap"]
    assert not unwrapped, "text blocks that do not wrap:\n" + "\n".join(unwrapped)
    wide = [f"{page}: {b['text']!r}" for page, b in text if b["wide"]]
    assert not wide, f"text blocks wider than their box at {WIDTH}px:\n" + "\n".join(wide)


def test_wide_code_blocks_scroll_and_keep_their_lines_on_a_phone(
    measured_on_a_phone: dict[str, dict[str, Any]],
) -> None:
    """At 390 px a code block (Python, shell, TOML: not output) wider than the column scrolls horizontally
    (scrollWidth > clientWidth, overflow-x auto) and never wraps: its computed white-space is ``pre`` (no
    continuation line at column 0), and no block may break a name (word-break keep-all, overflow-wrap normal)."""
    blocks = [(page, b) for page, m in measured_on_a_phone.items() for b in m["code_blocks"] if b["language"] != "text"]
    assert blocks, "the site has code blocks"
    wrapping = [f"{page}: {b['white_space']} {b['text']!r}" for page, b in blocks if b["white_space"] != "pre"]
    assert not wrapping, "code blocks that wrap their lines:\n" + "\n".join(wrapping)
    splitting = [
        f"{page}: {b['word_break']}/{b['overflow_wrap']} {b['text']!r}"
        for page, b in blocks
        if (b["word_break"], b["overflow_wrap"]) != ("keep-all", "normal")
    ]
    assert not splitting, "code blocks that may split a name:\n" + "\n".join(splitting)
    wide = [(page, b) for page, b in blocks if b["wide"]]
    assert wide, f"no code block is wider than a {PHONE_WIDTH}px column: this test would show nothing"
    stuck = [f"{page}: {b['text']!r}" for page, b in wide if not b["scrolls"]]
    assert not stuck, "wide code blocks that do not scroll:\n" + "\n".join(stuck)


def _wide_tables_scroll_with_a_sticky_first_column(measured: dict[str, dict[str, Any]], width: int) -> None:
    tables = [(page, t) for page, m in measured.items() for t in m["table_blocks"]]
    wide = [(page, t) for page, t in tables if t["wide"]]
    assert wide, f"no table is wider than a {width}px page's column: this test would show nothing"
    stuck = [f"{page}: {t['text']!r}" for page, t in wide if not (t["scrolls"] and t["sticky"])]
    assert not stuck, f"wide tables at {width}px that do not scroll with a sticky first column:\n" + "\n".join(stuck)


def test_wide_tables_scroll_with_their_first_column_in_view_on_a_phone(
    measured_on_a_phone: dict[str, dict[str, Any]],
) -> None:
    """At 390 px a table wider than the column (the dtype grid, the zoo, the compatibility details) scrolls
    sideways inside the theme's wrapper (overflow-x auto, extra.css), and its first column, which names the row,
    is sticky: every row stays readable without the page itself scrolling sideways."""
    _wide_tables_scroll_with_a_sticky_first_column(measured_on_a_phone, PHONE_WIDTH)


def test_wide_tables_scroll_with_their_first_column_in_view_at_1280px(measured: dict[str, dict[str, Any]]) -> None:
    """At 1280 px too: a table with more columns than the text column holds (the dtype grid with its extra
    precisions, the compatibility details) scrolls inside its own box with the row names in view."""
    _wide_tables_scroll_with_a_sticky_first_column(measured, WIDTH)


def test_no_python_repr_or_exception_text_in_tables(
    measured: dict[str, dict[str, Any]], measured_on_a_phone: dict[str, dict[str, Any]]
) -> None:
    """A generated table says things in words: no exception line, traceback, list, dict or object repr in a cell
    (the dtype table's torchao API path once listed a config's fields), at both widths. Developers' pages are left
    out."""
    found = _at_both_widths(measured, measured_on_a_phone, "python_repr")
    assert not found, f"Python reprs or exception text in tables:\n{_report(found)}"


RATIO_CELL = re.compile(r"^\d[\d.]* \[\d[\d.]*, \d[\d.]*\] (faster|slower|same|rounds disagree)$")


def test_benchmark_ratio_cells_hold_one_ratio_its_interval_and_a_verdict_word(
    measured: dict[str, dict[str, Any]],
) -> None:
    """On the benchmark pages a ratio cell reads ``0.94 [0.91, 0.98] faster``: one ratio, its interval, the verdict
    as a word (p20 and the rest are in the collapsed blocks, in cells of their own)."""
    cells = [(page, c) for page, m in measured.items() if page.startswith("/benchmarks/") for c in m["ratio_cells"]]
    assert cells, "no ratio cell on the benchmark pages: this test would show nothing"
    bad = [f"{page}: {c!r}" for page, c in cells if not RATIO_CELL.match(c)]
    assert not bad, "ratio cells that are not 'ratio [low, high] word':\n" + "\n".join(bad[:20])


def test_every_page_has_a_screenshot_at_both_widths(
    measured: dict[str, dict[str, Any]], measured_on_a_phone: dict[str, dict[str, Any]]
) -> None:
    """The run leaves a full-page screenshot of every page at 1280 and 390 px for a reviewer to look through."""
    for width, pages in ((WIDTH, measured), (PHONE_WIDTH, measured_on_a_phone)):
        shots = {p.stem for p in (SCREENSHOTS / str(width)).glob("*.png") if p.stat().st_size > 0}
        missing = [page for page in pages if (page.strip("/").replace("/", "_") or "home") not in shots]
        assert not missing, f"pages without a {width}px screenshot in {SCREENSHOTS}: {missing}"


def test_inline_code_never_splits_a_name_on_a_phone(measured_on_a_phone: dict[str, dict[str, Any]]) -> None:
    """At 390 px an inline code span in prose that wraps breaks only after punctuation (``.``, ``_``, ``:``, ...,
    where tools/docgen/hooks.py puts a ``<wbr>`` in long spans) or at a space, never between two letters or digits of
    a name (Material's own ``word-break: break-word`` split ``precision_base.pytorch_lightning.PrecisionAudit``
    anywhere), and no span runs past the text column."""
    pages = measured_on_a_phone.items()
    assert sum(m["inline_code"]["spans"] for _, m in pages) > 0, "the site has inline code"
    assert sum(m["inline_code"]["wrapped"] for _, m in pages) > 0, "no inline code wraps: this test would show nothing"
    found = {page: m["inline_code"]["splits"] for page, m in pages if m["inline_code"]["splits"]}
    total = sum(len(v) for v in found.values())
    assert not found, f"{total} inline code spans split inside a name at {PHONE_WIDTH}px:\n{_report(found)}"
    over = {page: m["inline_code"]["overflowing"] for page, m in pages if m["inline_code"]["overflowing"]}
    assert not over, f"inline code wider than the text column at {PHONE_WIDTH}px:\n{_report(over)}"


def test_no_raw_sphinx_roles(measured: dict[str, dict[str, Any]]) -> None:
    found = {page: f"{m['raw_role_count']}x {m['raw_roles']}" for page, m in measured.items() if m["raw_roles"]}
    assert not found, f"raw Sphinx roles shown as text:\n{_report(found)}"


def _at_both_widths(
    measured: dict[str, dict[str, Any]], measured_on_a_phone: dict[str, dict[str, Any]], key: str
) -> dict[str, Any]:
    """``key``'s findings on readers' pages (contributors' pages, changelogs and the API reference left out), at
    1280 and at 390 px."""
    return {
        f"{page} ({width}px)": m[key]
        for width, pages in ((WIDTH, measured), (PHONE_WIDTH, measured_on_a_phone))
        for page, m in pages.items()
        if m[key] and not page.startswith(NOT_FOR_READERS)
    }


def test_no_wording_meant_for_the_projects_developers(
    measured: dict[str, dict[str, Any]], measured_on_a_phone: dict[str, dict[str, Any]]
) -> None:
    """A reader's page names no issue number, no maintainer, no test that pins something, no test file and no
    torchao source file: what a page says is for the user reading it (at both widths)."""
    found = _at_both_widths(measured, measured_on_a_phone, "internal")
    assert not found, f"wording for the project's developers on readers' pages:\n{_report(found)}"


def test_no_emoji_on_readers_pages(
    measured: dict[str, dict[str, Any]], measured_on_a_phone: dict[str, dict[str, Any]]
) -> None:
    """Marks and icons are words or the theme's own icons: an emoji needs a font the reader may not have."""
    found = _at_both_widths(measured, measured_on_a_phone, "emoji")
    assert not found, f"emoji on readers' pages:\n{_report(found)}"


def test_copy_buttons_skip_prompts(measured: dict[str, dict[str, Any]]) -> None:
    found = {page: m["copied_prompts"] for page, m in measured.items() if m["copied_prompts"]}
    assert not found, f"the copy button would copy these prompts (pasted, the command fails):\n{_report(found)}"


def test_every_image_loads(measured: dict[str, dict[str, Any]]) -> None:
    found = {page: [i["src"] for i in m["images"] if not i["loaded"]] for page, m in measured.items()}
    found = {page: srcs for page, srcs in found.items() if srcs}
    assert not found, f"images that did not load:\n{_report(found)}"


def _summary(measured: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        page: {
            "height_px": m["height"],
            "overflowing_blocks": len(m["overflowing"]),
            "code_blocks": m["pre"],
            "tables": m["tables"],
            "raw_roles": m["raw_role_count"],
            "console_errors": len(m["console_errors"]),
            "images_not_loaded": sum(not i["loaded"] for i in m["images"]),
            "copied_prompts": len(m["copied_prompts"]),
        }
        for page, m in measured.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, help="a built site (default: build one into a temporary folder)")
    parser.add_argument("--out", type=Path, help="write the per-page measurements as JSON here")
    parser.add_argument("--width", type=int, default=WIDTH)
    args = parser.parse_args(argv)
    if args.site is None:
        import tempfile

        args.site = build_site(Path(tempfile.mkdtemp()) / "site")
    summary = _summary(measure_site(args.site, args.width))
    text = json.dumps({"width_px": args.width, "pages": summary}, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
