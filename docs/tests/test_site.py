"""The built docs site, read in a real browser (headless Chromium through Playwright) at 1280 px and at 390 px.

Every page of the site is loaded from a local server on 127.0.0.1 at both widths (a desktop's 1280 px and a phone's
390 px) and checked for what a reader would see, everything measured in the page:

* no console error or uncaught exception, except fonts that cannot load offline;
* nothing on a page reaches past the window's right edge (no page scrolls sideways); no code block (``pre``) and
  no table wider than its container (text cut off at the right edge): a wide one scrolls sideways inside its own
  box, and a table keeps its first column in view while it scrolls (its wrapper is scrolled in the page and the
  first cell's position compared); every table's box stays inside the text column;
* output, error and tree blocks (``text``) and command lines with their output (``console``) wrap inside their
  box; code (Python, shell, TOML) keeps its lines, and every block names its language, so the two can be told apart;
  at 1280 px a line of Python on a reader's page (at most 88 columns) fits its box without scrolling (on a phone
  it may scroll);
* no raw Sphinx role (``:class:``, ``:func:``, ...) or reST table border shown as text;
* every image loads;
* the copy button of a code block copies no ``$`` prompt;
* no inline code span breaks inside a name or runs past the text column;
* no generated table cell shows a Python repr or exception text (a diagnostic is for ``precision-plugins show``),
  no reader's page shows an emoji or wording meant for the project's developers;
* the class pages of ``FSDPPrecision`` and ``DeepSpeedPrecision`` (Trainer and Fabric) list every constructor
  argument; the navigation has the "Contributing" group and the API reference's two groups per package (what users
  import, then the internals) reaching every reference page; the home page gives the clone line and the example
  files' paths;
* a full-page PNG screenshot of every page at both widths goes into the built site, ``_screenshots/<page>-<width>.png``
  (``DOCS_SCREENSHOTS`` names another folder), for a reviewer to look through.

Each check runs at both widths (the tests take the ``at_width`` fixture, parametrized 1280 px / 390 px), except
Python fitting its box without scrolling, asked at 1280 px only (on a phone code may scroll inside its box). The
guards that a test sees something (a code block wide enough to scroll, inline code that wraps) hold at 390 px.

The site is built once per run with ``mkdocs build --strict`` into a temporary folder, or taken from
``DOCS_SITE_DIR`` when that names an already built site (the nox ``docs`` session builds ``site/`` once, so the
screenshots land in ``site/_screenshots/``). The browser is a system Chromium (Debian: ``apt-get install
chromium``), found on ``PATH`` or given by ``CHROMIUM``; Playwright's own browser download is not used. Without a
Chromium the tests fail (they are never skipped).

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
SCREENSHOTS = "_screenshots"  # the folder of the built site the screenshots go to (or DOCS_SCREENSHOTS)
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
  // (what names the row) sticky; one that overflows without scrolling cuts text off. The wrapper, the table's own
  // box, stays inside the text column (.md-content, whose margins the theme's wrapper may reach into); a table in a
  // closed <details> is not drawn (no box) and has nothing to fit.
  const column = (document.querySelector('.md-content') || document.body).getBoundingClientRect();
  const tables = [];
  for (const table of document.querySelectorAll('.md-content table')) {
    const wrap = table.closest('.md-typeset__scrollwrap') || table.parentElement;
    const first = table.querySelector('tr > :first-child');
    const wide = over(table) || over(wrap);
    const box = wrap.getBoundingClientRect();
    tables.push({
      wide: wide, scrolls: scrolls(wrap), text: describe(table),
      sticky: first !== null && getComputedStyle(first).position === 'sticky',
      fits: (box.width === 0 && box.height === 0) || (box.left >= column.left - 1 && box.right <= column.right + 1),
      right: Math.round(box.right), column_right: Math.round(column.right),
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
  // nothing reaches past the window's right edge (html's overflow-x: hidden would cut it off; a phone would let the
  // page move sideways): every element of the main area, where it is drawn; one inside a box that scrolls or clips
  // sideways (a code block, a table's wrapper, a sidebar) is measured by that box instead
  const windowWidth = document.documentElement.clientWidth;
  const main = document.querySelector('.md-main') || document.body;
  const clips = new Map();
  const clippedAbove = (el) => {
    const parent = el.parentElement;
    if (!parent || parent === main) return false;
    if (!clips.has(parent)) {
      clips.set(parent, getComputedStyle(parent).overflowX !== 'visible' || clippedAbove(parent));
    }
    return clips.get(parent);
  };
  const past = new Set();
  for (const el of main.querySelectorAll('*')) {
    if (clippedAbove(el)) continue;
    const box = el.getBoundingClientRect();
    if ((box.width > 0 || box.height > 0) && box.right > windowWidth + 1) past.add(el);
  }
  const name = (el) => el.tagName.toLowerCase() + (typeof el.className === 'string' && el.className.trim()
    ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
  const pastTheEdge = [...past].filter((el) => !past.has(el.parentElement)).slice(0, 10).map((el) => (
    `${name(el)} reaches ${Math.round(el.getBoundingClientRect().right)}px: ${describe(el).slice(0, 60)}`
  ));
  // the site's navigation (the primary nav, the same on every page): each link with the titles of the sections
  // it is in, outermost first
  const nav = [];
  const clean = (el) => (el ? el.textContent.trim().replace(/\\s+/g, ' ') : '');
  const primary = document.querySelector('.md-nav--primary');
  for (const a of primary ? primary.querySelectorAll('a.md-nav__link') : []) {
    if (a.closest('.md-nav--secondary')) continue;  // the page's own table of contents
    const sections = [];
    for (let li = a.closest('li.md-nav__item--nested'); li; li = li.parentElement.closest('li.md-nav__item--nested')) {
      sections.unshift(clean(li.querySelector(':scope > .md-nav__link, :scope > .md-nav__container > .md-nav__link')));
    }
    nav.push({sections: sections, title: clean(a), path: new URL(a.href, location.href).pathname});
  }
  // the API reference: each class and the arguments its Parameters section lists (the first code of each item is
  // the argument's name), not counting its methods' sections
  const classes = [];
  for (const cls of document.querySelectorAll('.md-content .doc-class')) {
    const heading = cls.querySelector('.doc-heading');
    const params = [];
    for (const title of cls.querySelectorAll('.doc-section-title')) {
      if (title.closest('.doc-object') !== cls || !/^param/i.test(title.textContent.trim())) continue;
      const list = title.closest('table') || (title.closest('p') || title).nextElementSibling;
      for (const item of list ? list.querySelectorAll('.doc-section-item') : []) {
        const code = item.querySelector('code');
        if (code) params.push(code.textContent.trim());
      }
    }
    classes.push({id: heading ? heading.id : '', params: params});
  }
  return {
    page_width: document.documentElement.scrollWidth,
    window_width: windowWidth,
    past_the_edge: pastTheEdge,
    nav: nav,
    classes: classes,
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

# Runs in the page after MEASURE_JS: scrolls every table that is wider than its wrapper to its right end, waits for a
# frame, and measures where the first cell of its first body row is drawn: with a fixed first column it still starts
# inside the wrapper's visible box (at its left edge); without, it has moved out to the left with its row. Each
# wrapper is scrolled back to the start before the screenshot.
SCROLL_TABLES_JS = """
async () => {
  const frame = () => new Promise((resolve) => {
    requestAnimationFrame(() => requestAnimationFrame(resolve));
    setTimeout(resolve, 200);
  });
  const wide = [];
  for (const table of document.querySelectorAll('.md-content table')) {
    const wrap = table.closest('.md-typeset__scrollwrap') || table.parentElement;
    const cell = table.querySelector('tbody tr > :first-child') || table.querySelector('tr > :first-child');
    if (cell && wrap.scrollWidth > wrap.clientWidth + 1) wide.push({table, wrap, cell});
  }
  if (!wide.length) return [];
  for (const w of wide) w.wrap.scrollLeft = w.wrap.scrollWidth;
  await frame();
  const found = wide.map((w) => {
    const box = w.wrap.getBoundingClientRect();
    const left = box.left + w.wrap.clientLeft;
    const right = left + w.wrap.clientWidth;
    const cell = w.cell.getBoundingClientRect();
    return {
      text: (w.table.innerText || '').trim().split('\\n')[0].slice(0, 80),
      scrolled_px: Math.round(w.wrap.scrollLeft),
      cell_left_px: Math.round(cell.left - left),
      cell_right_px: Math.round(cell.right - left),
      visible_px: Math.round(right - left),
      in_view: w.wrap.scrollLeft > 0 && cell.left >= left - 1 && cell.left < right - 1,
    };
  });
  for (const w of wide) w.wrap.scrollLeft = 0;
  await frame();
  return found;
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


def screenshots_folder(site: Path) -> Path:
    """Where the screenshots go: ``DOCS_SCREENSHOTS`` when set, else ``_screenshots/`` in the built site itself."""
    given = os.environ.get("DOCS_SCREENSHOTS")
    return Path(given).resolve() if given else site / SCREENSHOTS


def screenshot_name(path: str, width: int) -> str:
    """``reference_precision_fsdp.plugin-1280.png`` for the page ``/reference/precision_fsdp.plugin/`` at 1280 px."""
    return f"{path.strip('/').replace('/', '_') or 'home'}-{width}.png"


def measure_site(site: Path, width: int = WIDTH, shots: Path | None = None) -> dict[str, dict[str, Any]]:
    """Load every page of ``site`` in headless Chromium at ``width`` px; what each page shows, by URL path. A
    full-page screenshot of each page goes to ``shots`` (default: :func:`screenshots_folder`)."""
    from playwright.sync_api import sync_playwright

    shots = screenshots_folder(site) if shots is None else shots
    shots.mkdir(parents=True, exist_ok=True)
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
                data["scrolled_tables"] = page.evaluate(SCROLL_TABLES_JS)
                page.screenshot(path=str(shots / screenshot_name(path, width)), full_page=True)
                data["python_repr"] = sorted(set(m.group(0) for m in PYTHON_REPR.finditer(data.pop("table_text"))))
                text = data.pop("text")
                data["internal"] = sorted(set(INTERNAL.findall(text)))
                data["emoji"] = sorted(set(EMOJI.findall(text)))
                data["raw_roles"] = sorted(set(RAW_ROLE.findall(text)))
                data["raw_role_count"] = len(RAW_ROLE.findall(text))
                data["shows"] = [s for s in HOME_PAGE_SHOWS if s in text]
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


@pytest.fixture(scope="module", params=[WIDTH, PHONE_WIDTH], ids=lambda width: f"{width}px")
def at_width(request: pytest.FixtureRequest) -> tuple[int, dict[str, dict[str, Any]]]:
    """``(width, measurements)`` at 1280 px, then at 390 px: a test that takes it runs once per width (each width's
    pages are loaded once, by ``measured`` and ``measured_on_a_phone``)."""
    width: int = request.param
    return width, request.getfixturevalue("measured" if width == WIDTH else "measured_on_a_phone")


def _report(found: dict[str, Any]) -> str:
    return "\n".join(f"  {page}: {what}" for page, what in found.items())


def test_the_site_has_every_page(site: Path) -> None:
    pages = site_pages(site)
    for expected in ("/", "/quickstart/", "/compatibility/", "/benchmarks/", "/reference/precision_base/"):
        assert expected in pages, f"{expected} missing from the built site: {pages}"


def test_no_console_errors(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    width, measured = at_width
    found = {page: m["console_errors"] for page, m in measured.items() if m["console_errors"]}
    assert not found, f"console errors at {width}px (offline fonts excepted):\n{_report(found)}"


def test_nothing_reaches_past_the_windows_right_edge(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """No page is wider than the window (nothing scrolls the page sideways, nothing is cut off at its right edge): no
    element of the main area ends past the window's right edge, unless it is inside a box that scrolls sideways (a
    code block, a table's wrapper), which is measured instead. Measured in the page at 1280 and 390 px."""
    width, measured = at_width
    found = {page: m["past_the_edge"] for page, m in measured.items() if m["past_the_edge"]}
    assert not found, f"elements past the right edge of a {width}px window:\n{_report(found)}"


def test_no_code_block_or_table_overflows(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    width, measured = at_width
    found = {
        page: [f"{b['kind']} {b['width']}px in {b['visible']}px: {b['text']!r}" for b in m["overflowing"]]
        for page, m in measured.items()
        if m["overflowing"]
    }
    total = sum(len(v) for v in found.values())
    assert not found, f"{total} blocks wider than their container at {width}px:\n{_report(found)}"


def test_every_block_says_what_it_holds(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """Every code block carries its language class (``python``, ``bash``, ``text`` for output, errors and trees),
    so that the styles (and these tests) tell code from what is read."""
    _, measured = at_width
    blocks = [(page, b) for page, m in measured.items() for b in m["code_blocks"]]
    unnamed = [f"{page}: {b['text']!r}" for page, b in blocks if not b["language"]]
    assert not unnamed, "code blocks without a language:\n" + "\n".join(unnamed)


READ_NOT_RUN = ("text", "console")  # output, errors, trees; command lines with their output


def test_output_error_and_tree_blocks_wrap_inside_their_box(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """Output, error messages and trees (``text`` blocks) and command lines with their output (``console``) wrap
    their lines inside the box (``pre-wrap``): the end of a long error line (its remedy) is on the page, not past
    the right edge, at 1280 px and on a phone."""
    width, measured = at_width
    read = [(page, b) for page, m in measured.items() for b in m["code_blocks"] if b["language"] in READ_NOT_RUN]
    assert read, "the site has output blocks"
    unwrapped = [f"{page}: {b['white_space']} {b['text']!r}" for page, b in read if b["white_space"] != "pre-wrap"]
    assert not unwrapped, f"output blocks that do not wrap at {width}px:\n" + "\n".join(unwrapped)
    wide = [f"{page}: {b['text']!r}" for page, b in read if b["wide"]]
    assert not wide, f"output blocks wider than their box at {width}px:\n" + "\n".join(wide)


def test_code_blocks_keep_their_lines_and_wide_ones_scroll(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """A code block (Python, shell, TOML: not output) never wraps: its computed white-space is ``pre`` (no
    continuation line at column 0), and no block may break a name (word-break keep-all, overflow-wrap normal); one
    wider than the column scrolls horizontally (scrollWidth > clientWidth, overflow-x auto). On a phone some blocks
    are that wide (else this test would show nothing there)."""
    width, measured = at_width
    blocks = [(p, b) for p, m in measured.items() for b in m["code_blocks"] if b["language"] not in READ_NOT_RUN]
    assert blocks, "the site has code blocks"
    wrapping = [f"{page}: {b['white_space']} {b['text']!r}" for page, b in blocks if b["white_space"] != "pre"]
    assert not wrapping, f"code blocks that wrap their lines at {width}px:\n" + "\n".join(wrapping)
    splitting = [
        f"{page}: {b['word_break']}/{b['overflow_wrap']} {b['text']!r}"
        for page, b in blocks
        if (b["word_break"], b["overflow_wrap"]) != ("keep-all", "normal")
    ]
    assert not splitting, f"code blocks that may split a name at {width}px:\n" + "\n".join(splitting)
    wide = [(page, b) for page, b in blocks if b["wide"]]
    if width == PHONE_WIDTH:
        assert wide, f"no code block is wider than a {PHONE_WIDTH}px column: this test would show nothing"
    stuck = [f"{page}: {b['text']!r}" for page, b in wide if not b["scrolls"]]
    assert not stuck, f"wide code blocks that do not scroll at {width}px:\n" + "\n".join(stuck)


def test_python_on_a_readers_page_fits_its_box_at_1280px(measured: dict[str, dict[str, Any]]) -> None:
    """At 1280 px a Python block of a reader's page (at most 88 columns: docs/ruff.toml, test_code_blocks) fits its
    box without scrolling, clear of the copy button (extra.css: the grid's full width, 0.8em code). On a phone code
    may scroll inside its box (the issue's own exception), so this runs at 1280 px only. The API reference's
    docstrings and signatures are the packages' code, not the pages' examples, and are left out."""
    python = [
        (page, b)
        for page, m in measured.items()
        if not page.startswith(("/reference/", "/changelog/"))
        for b in m["code_blocks"]
        if b["language"] in ("python", "py")
    ]
    assert python, "the readers' pages show Python"
    wide = [f"{page}: {b['text']!r}" for page, b in python if b["wide"]]
    assert not wide, f"Python blocks wider than their box at {WIDTH}px:\n" + "\n".join(wide)


def test_wide_tables_scroll_with_a_sticky_first_column(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """A table wider than the column (the dtype grid with its extra precisions, the zoo, the compatibility details)
    scrolls sideways inside the theme's wrapper (overflow-x auto, extra.css), and its first column, which names the
    row, is sticky, at 1280 px and on a phone: every row stays readable without the page itself scrolling."""
    width, measured = at_width
    tables = [(page, t) for page, m in measured.items() for t in m["table_blocks"]]
    wide = [(page, t) for page, t in tables if t["wide"]]
    assert wide, f"no table is wider than a {width}px page's column: this test would show nothing"
    stuck = [f"{page}: {t['text']!r}" for page, t in wide if not (t["scrolls"] and t["sticky"])]
    assert not stuck, f"wide tables at {width}px that do not scroll with a sticky first column:\n" + "\n".join(stuck)


def test_a_scrolled_table_keeps_its_first_column_in_view(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """Measured, not read from the styles: each wide table's wrapper is scrolled to its right end in the page, and
    the first cell of its first row is still drawn inside the wrapper's visible box (without a working sticky
    column it would have moved out to the left with the rest of its row)."""
    width, measured = at_width
    scrolled = [(page, t) for page, m in measured.items() for t in m["scrolled_tables"]]
    assert scrolled, f"no table is wider than a {width}px page's column: this test would show nothing"
    lost = [
        f"{page}: scrolled {t['scrolled_px']}px, first cell at {t['cell_left_px']}..{t['cell_right_px']}px of "
        f"{t['visible_px']}px: {t['text']!r}"
        for page, t in scrolled
        if not t["in_view"]
    ]
    assert not lost, f"scrolled tables whose first column left the view at {width}px:\n" + "\n".join(lost)


def test_every_table_stays_inside_the_text_column(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """A table's box (the theme's scroll wrapper) never reaches past the text column: a table fits it or scrolls
    inside it, at 1280 px and on a phone."""
    width, measured = at_width
    found = {
        page: [f"ends at {t['right']}px, column at {t['column_right']}px: {t['text']!r}" for t in bad]
        for page, m in measured.items()
        if (bad := [t for t in m["table_blocks"] if not t["fits"]])
    }
    assert not found, f"tables reaching past the text column at {width}px:\n{_report(found)}"


def test_no_python_repr_or_exception_text_in_tables(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """A generated table says things in words: no exception line, traceback, list, dict or object repr in a cell
    (the dtype table's torchao API path once listed a config's fields), at both widths. Developers' pages are left
    out."""
    width, measured = at_width
    found = _on_readers_pages(measured, "python_repr")
    assert not found, f"Python reprs or exception text in tables at {width}px:\n{_report(found)}"


RATIO_CELL = re.compile(r"^\d[\d.]* \[\d[\d.]*, \d[\d.]*\] (faster|slower|same|rounds disagree)$")


def test_benchmark_ratio_cells_hold_one_ratio_its_interval_and_a_verdict_word(
    at_width: tuple[int, dict[str, dict[str, Any]]],
) -> None:
    """On the benchmark pages a ratio cell reads ``0.94 [0.91, 0.98] faster``: one ratio, its interval, the verdict
    as a word (p20 and the rest are in the collapsed blocks, in cells of their own)."""
    _, measured = at_width
    cells = [(page, c) for page, m in measured.items() if page.startswith("/benchmarks/") for c in m["ratio_cells"]]
    assert cells, "no ratio cell on the benchmark pages: this test would show nothing"
    bad = [f"{page}: {c!r}" for page, c in cells if not RATIO_CELL.match(c)]
    assert not bad, "ratio cells that are not 'ratio [low, high] word':\n" + "\n".join(bad[:20])


def _is_png(path: Path) -> bool:
    try:
        with path.open("rb") as png:
            return png.read(8) == b"\x89PNG\r\n\x1a\n"
    except OSError:
        return False


def test_every_page_has_a_screenshot_in_the_built_site(
    site: Path, at_width: tuple[int, dict[str, dict[str, Any]]]
) -> None:
    """The run leaves a full-page PNG screenshot of every page at 1280 and 390 px in the built site
    (``_screenshots/<page>-<width>.png``, or ``DOCS_SCREENSHOTS``) for a reviewer to look through."""
    width, measured = at_width
    folder = screenshots_folder(site)
    missing = [page for page in measured if not _is_png(folder / screenshot_name(page, width))]
    assert not missing, f"pages without a {width}px PNG screenshot in {folder}: {missing}"


def test_inline_code_never_splits_a_name(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """An inline code span in prose that wraps breaks only after punctuation (``.``, ``_``, ``:``, ...,
    where tools/docgen/hooks.py puts a ``<wbr>`` in long spans) or at a space, never between two letters or digits of
    a name (Material's own ``word-break: break-word`` split ``precision_base.pytorch_lightning.PrecisionAudit``
    anywhere on a phone), and no span runs past the text column, at 1280 px and at 390 px (where some do wrap)."""
    width, measured = at_width
    pages = measured.items()
    assert sum(m["inline_code"]["spans"] for _, m in pages) > 0, "the site has inline code"
    if width == PHONE_WIDTH:
        wrapped = sum(m["inline_code"]["wrapped"] for _, m in pages)
        assert wrapped > 0, "no inline code wraps: this test would show nothing"
    found = {page: m["inline_code"]["splits"] for page, m in pages if m["inline_code"]["splits"]}
    total = sum(len(v) for v in found.values())
    assert not found, f"{total} inline code spans split inside a name at {width}px:\n{_report(found)}"
    over = {page: m["inline_code"]["overflowing"] for page, m in pages if m["inline_code"]["overflowing"]}
    assert not over, f"inline code wider than the text column at {width}px:\n{_report(over)}"


def test_no_raw_sphinx_roles(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    width, measured = at_width
    found = {page: f"{m['raw_role_count']}x {m['raw_roles']}" for page, m in measured.items() if m["raw_roles"]}
    assert not found, f"raw Sphinx roles shown as text at {width}px:\n{_report(found)}"


def _on_readers_pages(measured: dict[str, dict[str, Any]], key: str) -> dict[str, Any]:
    """``key``'s findings on readers' pages (contributors' pages, changelogs and the API reference left out)."""
    return {page: m[key] for page, m in measured.items() if m[key] and not page.startswith(NOT_FOR_READERS)}


def test_no_wording_meant_for_the_projects_developers(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """A reader's page names no issue number, no maintainer, no test that pins something, no test file and no
    torchao source file: what a page says is for the user reading it (at both widths)."""
    width, measured = at_width
    found = _on_readers_pages(measured, "internal")
    assert not found, f"wording for the project's developers on readers' pages at {width}px:\n{_report(found)}"


def test_no_emoji_on_readers_pages(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """Marks and icons are words or the theme's own icons: an emoji needs a font the reader may not have."""
    width, measured = at_width
    found = _on_readers_pages(measured, "emoji")
    assert not found, f"emoji on readers' pages at {width}px:\n{_report(found)}"


# The classes whose arguments a reader looks up: each page lists every constructor argument itself (Fabric's classes
# and the Trainer's share one constructor; tools/docgen/class_arguments.py gives the page the documented list).
CLASS_PAGES = {
    "precision_fsdp.plugin.FSDPPrecision": "/reference/precision_fsdp.plugin/",
    "precision_fsdp.fabric.FSDPPrecision": "/reference/precision_fsdp.fabric/",
    "precision_deepspeed.plugin.DeepSpeedPrecision": "/reference/precision_deepspeed.plugin/",
    "precision_deepspeed.fabric.DeepSpeedPrecision": "/reference/precision_deepspeed.fabric/",
}


@functools.cache
def constructor_arguments(path: str) -> tuple[str, ...]:
    """The parameters of the ``__init__`` the class at ``path`` has (its own or inherited), read from the source by
    Griffe (the docs' own reader of the packages), ``self`` left out."""
    import griffe

    from tools.docgen.reference import sources

    package, name = path.split(".", 1)
    loaded = griffe.load(package, search_paths=[str(p) for p in sources().values()], resolve_aliases=False)
    init = loaded[name].all_members["__init__"]
    init = init.final_target if init.is_alias else init
    return tuple(p.name for p in init.parameters if p.name not in ("self", "cls"))


@pytest.mark.parametrize("path", sorted(CLASS_PAGES))
def test_the_class_page_lists_every_constructor_argument(
    path: str, at_width: tuple[int, dict[str, dict[str, Any]]]
) -> None:
    """``FSDPPrecision`` and ``DeepSpeedPrecision``, for the Trainer and for Fabric: the class's own page lists each
    argument (``precision``, ``scaler``, ...) in its Parameters section, not "see another class"."""
    width, measured = at_width
    page = CLASS_PAGES[path]
    assert page in measured, f"{page} missing from the built site"
    shown = [c for c in measured[page]["classes"] if c["id"] == path]
    assert shown, f"{path} is not documented on {page} at {width}px"
    expected = constructor_arguments(path)
    assert "precision" in expected, expected
    missing = [name for name in expected if name not in shown[0]["params"]]
    assert not missing, f"{path} on {page} at {width}px lists {shown[0]['params']}, not {missing}"


def _nav(measured: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {page: m["nav"] for page, m in measured.items()}


def test_the_navigation_has_a_contributing_group(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    """Every page's navigation has a "Contributing" group holding the architecture and releasing pages."""
    width, measured = at_width
    found = {}
    for page, nav in _nav(measured).items():
        group = {entry["title"] for entry in nav if entry["sections"] == ["Contributing"]}
        if not {"Architecture", "Releasing"} <= group:
            found[page] = sorted(group)
    assert not found, f"pages at {width}px whose navigation lacks Contributing > Architecture, Releasing:\n" + _report(
        found
    )


def test_the_api_reference_navigation_groups_each_package_and_reaches_every_module(
    site: Path, at_width: tuple[int, dict[str, dict[str, Any]]]
) -> None:
    """In every page's navigation, the API reference holds one section per package: the package's page, then "What
    users import", then "Internals"; together they link every page of the reference, each once."""
    width, measured = at_width
    reference = sorted(p for p in site_pages(site) if p.startswith("/reference/"))
    assert reference, "the site has an API reference"
    found = {}
    for page, nav in _nav(measured).items():
        entries = [entry for entry in nav if entry["sections"][:1] == ["API reference"]]
        linked = sorted(entry["path"] for entry in entries)
        problems = []
        if linked != reference:
            problems.append(f"links {len(linked)} pages, the reference has {len(reference)}")
        for package in sorted({entry["sections"][1] for entry in entries if len(entry["sections"]) > 1}):
            under = [entry for entry in entries if entry["sections"][1:2] == [package]]
            if (under[0]["sections"], under[0]["title"]) != (["API reference", package], package):
                problems.append(f"{package}: starts with {under[0]['title']!r}, not the package's own page")
            order = list(dict.fromkeys((entry["sections"][2:] or ["(no group)"])[0] for entry in under[1:]))
            if order[:1] != ["What users import"] or not set(order) <= {"What users import", "Internals"}:
                problems.append(f"{package}: groups {order}")
        if problems:
            found[page] = problems
    assert not found, f"API reference navigation at {width}px:\n{_report(found)}"


HOME_PAGE_SHOWS = (
    "git clone https://github.com/precision-plugins/precision-plugins",
    "docs/examples/quick_fsdp.py",
    "docs/examples/quick_deepspeed.py",
)


def test_the_home_page_gives_the_clone_line_and_the_example_files_paths(
    at_width: tuple[int, dict[str, dict[str, Any]]],
) -> None:
    """The home page shows how to get the code (the ``git clone`` line) and where each example file is in the
    checkout, at both widths."""
    width, measured = at_width
    shown = measured["/"]["shows"]
    missing = [s for s in HOME_PAGE_SHOWS if s not in shown]
    assert not missing, f"the home page at {width}px does not show {missing}"


def test_copy_buttons_skip_prompts(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    width, measured = at_width
    found = {page: m["copied_prompts"] for page, m in measured.items() if m["copied_prompts"]}
    assert not found, f"the copy button would copy these prompts at {width}px (pasted, the command fails):\n" + _report(
        found
    )


def test_every_image_loads(at_width: tuple[int, dict[str, dict[str, Any]]]) -> None:
    width, measured = at_width
    found = {page: [i["src"] for i in m["images"] if not i["loaded"]] for page, m in measured.items()}
    found = {page: srcs for page, srcs in found.items() if srcs}
    assert not found, f"images that did not load at {width}px:\n{_report(found)}"


def _summary(measured: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        page: {
            "height_px": m["height"],
            "width_px": m["page_width"],
            "past_the_right_edge": len(m["past_the_edge"]),
            "overflowing_blocks": len(m["overflowing"]),
            "scrolled_tables_losing_their_first_column": sum(not t["in_view"] for t in m["scrolled_tables"]),
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
