"""Issue 21: every code block of the site and the READMEs can be used as copied.

* Every ``python`` block compiles on its own (as pasted into a file: no continuation line at column 0, no
  fragment that only works inside another block).
* A block that imports another example file of the docs (``from quick_fsdp import Model``) stands on a page that
  names that file (``quick_fsdp.py``) before the block: otherwise the copied block fails with
  ``ModuleNotFoundError``, as the quickstart's second example did.
* Every ``bash`` install line that installs torch on a CPU-only machine uses PyTorch's CPU wheel index, and no install
  line puts a plugin into nox's ``.venv``.

Every ``python`` block also runs alone, on CPU (``CUDA_VISIBLE_DEVICES=""``, ``OMP_NUM_THREADS=1``), with this
interpreter, in an empty folder, saved under the file name its page gives it (``<!-- save-as: NAME.py -->`` before
the fence, or the embedded file's name), and must exit 0:

* A block embedded from a file (its body ``--8<--``, the path ``docs/examples/X.py``, ``--8<--``: pymdownx.snippets'
  block form, which puts the file in when the site is built; ruff's Markdown formatting leaves it alone, as it does not
  parse as Python) *is* that file, and ``pytest docs/examples`` in the same ``nox -s docs`` session
  runs every such file with its expected output. Here the test checks that a test of docs/examples runs that
  file, so the 2-process fits are not run twice.
* Every other block is run here (:func:`test_python_block_runs_alone`).
* A block that cannot run alone says so where it stands, in an HTML comment directly before its fence:
  ``<!-- not-run-alone: REASON -->`` (a fragment of the block above, an error case tools/docgen/errors.py provokes
  when it writes the page, a GPU-only line). The test asserts that the reason is given (at least three words);
  nothing is skipped silently.

``bash``/``console`` blocks: every ``precision-plugins ...`` command line (``$``-prefixed in a ``console`` block) is
run with this environment's ``precision-plugins`` and must exit 0, or with the status the block prints after it
(``(exit code N)``); a synopsis's optional ``[--flag]`` parts are left out. Install lines (``pip install ...``)
cannot run here (this machine has no route to PyTorch's wheel index, and an install would change the shared
environment), so they are checked statically: every package they install is a folder of the repository's package
list (``[tool.precision-plugins]`` in pyproject.toml) with the extras it names declared in its metadata, torch only
from PyTorch's own index (``https://download.pytorch.org/whl/cpu`` or ``/whl/cuXYZ``), and nothing else but nox.
The install lines themselves run in the release rehearsal (tests-integration, nightly).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md", *(ROOT / "packages").glob("*/README.md")],
    key=lambda p: str(p),
)
EXAMPLES = {p.stem for p in (ROOT / "docs" / "examples").glob("*.py") if not p.stem.startswith("test_")}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```\s*$", re.M | re.S)


SNIPPET = re.compile(r"--8<--\n(?P<path>[\w./-]+)\n--8<--")


def blocks(page: Path) -> list[tuple[int, str, str]]:
    """``(offset, language, code)`` of every fenced block of ``page`` (indented fences dedented); a block that
    embeds a file (pymdownx.snippets' block form, ``--8<--`` / the path / ``--8<--``) is that file's text, as the
    site shows it."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        indent = len(m.group("indent"))
        code = "\n".join(line[indent:] for line in m.group("body").splitlines())
        if snippet := SNIPPET.fullmatch(code.strip()):
            code = (ROOT / snippet.group("path")).read_text(encoding="utf-8").rstrip("\n")
        out.append((m.start(), m.group("lang"), code))
    return out


def embedded(page: Path, offset: int) -> str | None:
    """The file the fenced block at ``offset`` embeds (its body ``--8<--``, the path, ``--8<--``), else None."""
    m = FENCE.match(page.read_text(encoding="utf-8"), offset)
    snippet = SNIPPET.fullmatch(m.group("body").strip()) if m else None
    return snippet.group("path") if snippet else None


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


COLUMNS = 88
"""The widest line of Python a page shows (docs/ruff.toml): at 1280 px the text column is 748 px and code is 12.8 px
(docs/stylesheets/extra.css), so 88 columns fit beside the copy button; test_site.py measures it in the browser."""


SITE_PAGES = [page for page in PAGES if page.is_relative_to(ROOT / "docs")]
"""The pages of the site (the READMEs are read on GitHub and PyPI, in a wider column)."""


@pytest.mark.parametrize("page", SITE_PAGES, ids=_id)
def test_python_on_a_page_fits_the_text_column(page: Path) -> None:
    """Every Python block a page of the site shows, embedded examples included, is at most 88 columns wide: it
    reads without scrolling in the page's text column at 1280 px."""
    wide = [
        f"{page.name} block at char {offset}: {len(line)} columns: {line.strip()[:60]!r}"
        for offset, lang, code in blocks(page)
        if lang in ("python", "py")
        for line in code.splitlines()
        if len(line) > COLUMNS
    ]
    assert wide == []


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


# ---- every block runs alone ---------------------------------------------------------------------------------------
NOT_RUN = re.compile(r"<!-- not-run-alone: (?P<reason>.*?) -->")
SAVE_AS = re.compile(r"<!-- save-as: (?P<name>[\w.-]+\.py) -->|[Ss]ave(?: this| it)? as `(?P<prose>[\w.-]+\.py)`")
EXAMPLE_TESTS = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "examples").glob("test_*.py"))


def _line(page: Path, offset: int) -> int:
    return page.read_text(encoding="utf-8")[:offset].count("\n") + 1


def _comment_before(page: Path, offset: int) -> str:
    """The last non-blank line before the fence at ``offset`` (where a block's marker stands)."""
    before = page.read_text(encoding="utf-8")[:offset].rstrip().splitlines()
    return before[-1].strip() if before else ""


def _save_as(page: Path, offset: int) -> str:
    """The file name the page gives the block at ``offset``: ``<!-- save-as: NAME.py -->`` or "Save (this) as
    `NAME.py`" in the prose between the previous block and this one; ``block.py`` when it names none."""
    before = page.read_text(encoding="utf-8")[:offset]
    prose = before[before.rfind("```") + 3 :] if "```" in before else before
    names = [m.group("name") or m.group("prose") for m in SAVE_AS.finditer(prose)]
    return names[-1] if names else "block.py"


def python_blocks() -> list[tuple[Path, int, str, str, str]]:
    """``(page, line, code, the comment before it, its file name)`` of every ``python`` block of the site and the
    READMEs."""
    out = []
    for page in PAGES:
        for offset, lang, code in blocks(page):
            if lang not in ("python", "py"):
                continue
            path = embedded(page, offset)
            # an embedded block's marker is its snippet line; its file name the embedded file's
            comment = f"--8<--\n{path}\n--8<--" if path else _comment_before(page, offset)
            out.append((page, _line(page, offset), code, comment, Path(path).name if path else _save_as(page, offset)))
    return out


PYTHON_BLOCKS = python_blocks()
TO_RUN = [b for b in PYTHON_BLOCKS if not SNIPPET.fullmatch(b[3]) and not NOT_RUN.fullmatch(b[3])]


def _block_id(block: tuple[Path, int, str, str, str]) -> str:
    return f"{_id(block[0])}:{block[1]}"


def _cpu_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PRECISION_PLUGINS_AUDIT")}
    return {**env, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"}


@pytest.fixture(scope="module")
def ran_blocks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every block of :data:`TO_RUN`, each in its own process and its own empty folder, as many at a time as this
    machine has cores (the blocks are independent; this halves the docs session's time on CI's 2 cores)."""

    # the folders are made here, in one thread: pytest's TempPathFactory creates its base folder on first use and is
    # not thread-safe (made from the pool's threads, the first calls raced: "block is not a normalized and relative
    # path" in a fresh nox venv)
    folders = [tmp_path_factory.mktemp("block") for _ in TO_RUN]

    def run(job: tuple[tuple[Path, int, str, str, str], Path]) -> subprocess.CompletedProcess[str]:
        block, folder = job
        (folder / block[4]).write_text(block[2] + "\n", encoding="utf-8")
        cmd = [sys.executable, block[4]]
        return subprocess.run(cmd, cwd=folder, env=_cpu_env(), capture_output=True, text=True, timeout=300)

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip(map(_block_id, TO_RUN), pool.map(run, zip(TO_RUN, folders, strict=True)), strict=True))


@pytest.mark.parametrize("block", TO_RUN, ids=_block_id)
def test_python_block_runs_alone(
    block: tuple[Path, int, str, str, str], ran_blocks: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    page, line, _code, _comment, name = block
    done = ran_blocks[_block_id(block)]
    assert done.returncode == 0, (
        f"{_id(page)} line {line}, run alone as {name}, exited {done.returncode}:\n{done.stderr[-3000:]}"
    )


def test_blocks_that_do_not_run_alone_say_why() -> None:
    marked = [(b, NOT_RUN.fullmatch(b[3])) for b in PYTHON_BLOCKS]
    vague = [_block_id(b) for b, m in marked if m and len(m.group("reason").split()) < 3]
    assert vague == [], "a <!-- not-run-alone: ... --> marker needs its reason"
    assert TO_RUN, "no block was found to run"


@pytest.mark.parametrize("block", [b for b in PYTHON_BLOCKS if SNIPPET.fullmatch(b[3])], ids=_block_id)
def test_an_embedded_example_is_run_by_docs_examples(block: tuple[Path, int, str, str, str]) -> None:
    page, line, _code, comment, _name = block
    m = SNIPPET.fullmatch(comment)
    assert m is not None
    path = ROOT / m.group("path")
    assert path.is_file(), f"{_id(page)}:{line} embeds {m.group('path')}, which does not exist"
    run_by = (path.name, f'"{path.parent.name}"', f"import {path.parent.name}", f"from {path.parent.name}")
    assert path.name.startswith("test_") or any(s in EXAMPLE_TESTS for s in run_by), (
        f"{_id(page)}:{line} embeds {m.group('path')}, which no test in docs/examples runs"
    )


# ---- shell blocks -------------------------------------------------------------------------------------------------
def _shell_blocks() -> list[tuple[Path, int, str, str]]:
    return [
        (page, _line(page, offset), lang, code)
        for page in PAGES
        for offset, lang, code in blocks(page)
        if lang in ("bash", "console", "sh", "")
    ]


def cli_commands() -> list[tuple[str, list[str], int]]:
    """``(where, argv, expected exit status)`` of every ``precision-plugins`` line of a shell block."""
    out = []
    for page, line, lang, code in _shell_blocks():
        lines = code.splitlines()
        for i, text in enumerate(lines):
            command = text[2:] if lang == "console" and text.startswith("$ ") else ("" if lang == "console" else text)
            if not command.startswith("precision-plugins "):
                continue
            command = re.sub(r"\s\[[^\]]*\]", "", command.split("  #")[0].split(" # ")[0]).strip()
            status = 0
            for after in lines[i + 1 :]:
                if after.startswith("$ "):
                    break
                if m := re.fullmatch(r"\(exit code (\d+)\)", after.strip()):
                    status = int(m.group(1))
            out.append((f"{_id(page)}:{line + 1 + i}", shlex.split(command), status))
    return out


def _cli() -> str:
    here = Path(sys.executable).parent / "precision-plugins"
    found = str(here) if here.exists() else shutil.which("precision-plugins")
    assert found, "the precision-plugins command is not installed in this environment"
    return found


@pytest.fixture(scope="module")
def ran_cli() -> dict[str, subprocess.CompletedProcess[str]]:
    """Every line of :func:`cli_commands`, each in its own process, as many at a time as this machine has cores."""
    cli, commands = _cli(), cli_commands()

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cli, *argv[1:]], env=_cpu_env(), capture_output=True, text=True, timeout=300, cwd=ROOT)

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip([c[0] for c in commands], pool.map(run, [c[1] for c in commands]), strict=True))


@pytest.mark.parametrize(("where", "argv", "status"), cli_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_cli_line_runs_with_the_status_the_page_shows(
    where: str, argv: list[str], status: int, ran_cli: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    done = ran_cli[where]
    assert done.returncode == status, f"{where}: {shlex.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}"


def _repo_packages() -> dict[str, set[str]]:
    """Package folder (``packages/<dist>``) -> the extras its metadata declares."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["precision-plugins"]
    out = {}
    for entry in table["packages"]:
        meta = tomllib.loads((ROOT / "packages" / entry["dist"] / "pyproject.toml").read_text(encoding="utf-8"))
        out[f"packages/{entry['dist']}"] = set(meta["project"].get("optional-dependencies", {}))
    return out


TORCH_INDEX = re.compile(r"--index-url https://download\.pytorch\.org/whl/(cpu|cu\d+)(\s|$)")


def install_problems(line: str, packages: dict[str, set[str]]) -> list[str]:
    """What is wrong with one ``pip install`` line (see the module docstring), as messages."""
    problems = []
    for command in line.split("&&"):
        if "pip install" not in command:
            continue
        words = shlex.split(command.split(" #")[0].split("pip install", 1)[1])
        targets = [w for i, w in enumerate(words) if not w.startswith("-") and words[i - 1 : i] != ["--index-url"]]
        for target in targets:
            name, _, extras = target.partition("[")
            path = name.removeprefix("./").rstrip("/")
            if path in packages:
                unknown = set(extras.rstrip("]").split(",")) - packages[path] - {""}
                if unknown:
                    problems.append(f"{target}: {path} declares no extra {sorted(unknown)}")
            elif name == "torch":
                if not TORCH_INDEX.search(command):
                    problems.append(f"{target}: torch without PyTorch's CPU or CUDA wheel index")
            elif name != "nox":
                problems.append(f"{target}: neither a package of this repository nor torch or nox")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_install_lines_install_only_this_repositorys_packages(page: Path) -> None:
    packages = _repo_packages()
    bad = [
        f"{_id(page)}:{line}: {problem}"
        for _page, line, _lang, code in (b for b in _shell_blocks() if b[0] == page)
        for text in code.splitlines()
        for problem in install_problems(text, packages)
    ]
    assert bad == []


def test_the_install_check_catches_a_published_name_and_a_missing_extra() -> None:
    packages = _repo_packages()
    assert install_problems("pip install precision-deepspeed", packages) == [
        "precision-deepspeed: neither a package of this repository nor torch or nox"
    ]
    assert install_problems('pip install "./packages/precision-fsdp[fp9]"', packages) == [
        "./packages/precision-fsdp[fp9]: packages/precision-fsdp declares no extra ['fp9']"
    ]
    assert install_problems("pip install torch", packages) != []
    assert install_problems("pip install torch --index-url https://download.pytorch.org/whl/cpu", packages) == []
