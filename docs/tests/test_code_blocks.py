"""Issue 21: every code block of the site and the READMEs can be used as copied.

* Every ``python`` block compiles on its own (as pasted into a file: no continuation line at column 0, no
  fragment that only works inside another block).
* A block that imports another example file of the docs (``from quick_fsdp import Model``) stands on a page that
  names that file (``quick_fsdp.py``) before the block: otherwise the copied block fails with
  ``ModuleNotFoundError``, as the quickstart's second example did.
* Every ``bash`` install line that installs torch on a CPU-only machine uses PyTorch's CPU wheel index, and no install
  line puts a plugin into nox's ``.venv``.

The example files themselves (``docs/examples/*.py``, embedded with ``gen:file``) are run on CPU by the tests in
docs/examples (``nox -s docs``); here each block is checked as text, which needs no torch.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md", *(ROOT / "packages").glob("*/README.md")],
    key=lambda p: str(p),
)
EXAMPLES = {p.stem for p in (ROOT / "docs" / "examples").glob("*.py") if not p.stem.startswith("test_")}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```\s*$", re.M | re.S)


def blocks(page: Path) -> list[tuple[int, str, str]]:
    """``(offset, language, code)`` of every fenced block of ``page`` (indented fences dedented)."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        indent = len(m.group("indent"))
        code = "\n".join(line[indent:] for line in m.group("body").splitlines())
        out.append((m.start(), m.group("lang"), code))
    return out


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_python_block_compiles_alone(page: Path) -> None:
    bad = []
    for offset, lang, code in blocks(page):
        if lang not in ("python", "py"):
            continue
        try:
            compile(code, f"{page.name}@{offset}", "exec")
        except SyntaxError as exc:
            bad.append(f"{page.name} block at char {offset}: {exc}")
    assert bad == []


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_a_block_importing_another_example_names_that_file_first(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    missing = []
    for offset, lang, code in blocks(page):
        if lang not in ("python", "py"):
            continue
        for module in re.findall(r"^\s*(?:from|import) (\w+)", code, re.M):
            if module in EXAMPLES and f"{module}.py" not in text[:offset]:
                missing.append(f"{page.name} at char {offset} imports {module} but names no {module}.py before it")
    assert missing == []


def test_the_quickstart_check_catches_the_old_page() -> None:
    """The check above on the quickstart as it was before issue 21 (its second example imported quick_fsdp, a file
    name the page never showed): it must find it."""
    old = "## Train\n\n```python\nclass Model: ...\n```\n\n## Options\n\n```python\nfrom quick_fsdp import Model\n```\n"
    offset = old.index("from quick_fsdp")
    assert "quick_fsdp.py" not in old[:offset]


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_install_lines_use_the_cpu_index_for_torch_and_never_noxs_venv(page: Path) -> None:
    bad = []
    for _offset, lang, code in blocks(page):
        if lang not in ("bash", "console", "sh", ""):
            continue
        for line in code.splitlines():
            if "pip install" not in line:
                continue
            if re.search(r"pip install (-\S+ )*torch(\s|$)", line) and "download.pytorch.org/whl/" not in line:
                bad.append(f"{page.name}: torch without PyTorch's wheel index: {line.strip()}")
            if re.search(r"(^|\s)\.venv/bin/python -m pip install \.?/?packages/", line):
                bad.append(f"{page.name}: a plugin installed into nox's .venv: {line.strip()}")
    assert bad == []
