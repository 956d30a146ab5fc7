"""mkdocs hook: fills ``<!-- gen:NAME -->`` markers in the docs with text produced by running the code.

Error messages, the plugin list and the dtype tables are therefore what the installed packages really say and
do, not copies that drift. Markers:

* ``gen:grammar`` - the grammar text, the precisions and the aliases;
* ``gen:spec-errors`` - ``parse_spec`` on malformed names: exception type and message;
* ``gen:registry-errors`` - every discovery/resolution error, provoked in a private registry;
* ``gen:trainer-errors`` - the front door's errors (needs Lightning);
* ``gen:cli-errors`` - what ``precision-plugins`` prints for bad input;
* ``gen:plugins`` - the installed entry points (``list_plugins()``);
* ``gen:dtypes`` - each installed backend's ``dtypes()`` for every precision it offers;
* ``gen:changelog:<dist>`` - that package's CHANGELOG.md, headings shifted one level down;
* ``gen:file:<path>`` - a file of the repository as a fenced code block (the docs' examples);
* ``gen:reference:<module>`` - ``::: module`` blocks for the modules of a package that exist on disk.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- gen:([a-z-]+)(?::([\w./-]+))? -->")


def _fence(text: str, lang: str = "text") -> str:
    return f"```{lang}\n{text}\n```"


def _md_escape(text: str) -> str:
    """Text safe inside a Markdown table cell: no HTML, links, emphasis or column breaks."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\`*_[]|":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


def _raised(func: Callable[[], Any]) -> BaseException | None:
    try:
        func()
    except Exception as exc:
        return exc
    return None


# The marker docs/tests/test_code_blocks.py reads: these blocks are error cases, not programs to run alone.
ERROR_CASE = (
    "<!-- not-run-alone: an error case, not a program: tools/docs_hooks.py provokes it (in a private registry where "
    "it needs plugins this machine lacks) when it builds this page, and shows the error it raised below -->"
)


def _error_block(title: str, code: str, exc: BaseException | None) -> str:
    if exc is None:
        return f"**{title}**: no error was raised (this page is out of date: please report it)\n"
    return f"**{title}**\n\n{ERROR_CASE}\n{_fence(code, 'python')}\n\n{_fence(f'{type(exc).__name__}: {exc}')}\n"


# ---- the grammar ------------------------------------------------------------------------------------
def gen_grammar(_: str | None) -> str:
    from precision_base import list_plugins
    from precision_base.spec import ALIASES, GRAMMAR, PRECISIONS

    rows = ["| you write | canonical precision |", "|---|---|"]
    rows += [f"| `{p!r}` | `{p}` |" for p in PRECISIONS]
    rows += [f"| `{alias!r}` | `{canonical}` |" for alias, canonical in ALIASES.items()]
    extras = [
        f"| `'{name}'` | `{name}` (extra precision of `{entry.backend}` only; follows `{base}` outside its feature) |"
        for entry in sorted(list_plugins(), key=lambda e: e.backend)
        if entry.info is not None
        for name, base in entry.info.extra_precisions
    ]
    note = "" if extras else "\n\nNo installed backend declares an extra precision where these docs were built."
    return f"{_fence(GRAMMAR)}\n\n" + "\n".join(rows + extras) + note


SPEC_CASES: list[object] = [
    "",
    "   ",
    "fsdp",
    "bf16-mixed",
    ":bf16-mixed",
    "fsdp:",
    "fsdp:bf16:mixed",
    "FSDP:bf16-mixed",
    "fsdp:BF16-MIXED",
    "fsdp:bf16-mix",
    "fsdp:64",
    "fsdp:fp16",
    "fsdp:fp32",
    "fsdp:fp8",
    "my plugin:32",
    None,
    32,
    ("fsdp", "bf16-mixed"),
]


def gen_spec_errors(_: str | None) -> str:
    from precision_base import parse_spec
    from precision_base.spec import GRAMMAR

    rows = ["| input | error | message (*grammar*: the text above) |", "|---|---|---|"]
    for case in SPEC_CASES:
        exc = _raised(functools.partial(parse_spec, case))
        if exc is None:
            rows.append(f"| `{case!r}` | accepted | `{parse_spec(case)}` |")
        else:
            parts = str(exc).split(GRAMMAR)
            message = "*grammar*".join(_md_escape(part) for part in parts)
            rows.append(f"| `{case!r}` | `{type(exc).__name__}` | {message} |")
    ok = ["fsdp:bf16-mixed", " deepspeed : 16 ", "fsdp:bf16", "fsdp:32"]
    accepted = "\n".join(f"parse_spec({s!r})  ->  {parse_spec(s)}" for s in ok)
    return "\n".join(rows) + "\n\nWhat is accepted:\n\n" + _fence(accepted)


# ---- the registry -----------------------------------------------------------------------------------
class _Toy:
    """Stands in for a plugin class in the examples below; never instantiated."""


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def gen_registry_errors(_: str | None) -> str:
    from precision_base import PluginInfo
    from precision_base.registry import DISABLE_ENV_VAR, Registry

    def registry(*infos: tuple[PluginInfo, str, str]) -> Registry:
        reg = Registry(group="precision_base.docs_examples_no_such_group")
        for info, dist, version in infos:
            reg.register(info, distribution=dist, version=version, replace=True)
        return reg

    fsdp = PluginInfo(backend="fsdp", precisions=("32-true", "bf16-mixed"), plugin_class="precision_fsdp.x:Y")
    blocks = []
    reg = registry((fsdp, "precision-fsdp", "0.1.0"))
    blocks.append(
        _error_block(
            "Unknown backend (a typo, or a plugin that is not installed)",
            'resolve("deepspeed:bf16-mixed")  # only precision-fsdp is installed',
            _raised(lambda: reg.resolve("deepspeed:bf16-mixed")),
        )
    )
    blocks.append(
        _error_block("A near miss", 'resolve("fsbp:bf16-mixed")', _raised(lambda: reg.resolve("fsbp:bf16-mixed")))
    )
    blocks.append(
        _error_block(
            "A precision the backend does not offer",
            'resolve("fsdp:16-true")  # this fsdp offers 32-true and bf16-mixed',
            _raised(lambda: reg.resolve("fsdp:16-true")),
        )
    )
    with _env(DISABLE_ENV_VAR, "fsdp"):
        blocks.append(
            _error_block(
                f"A backend disabled with {DISABLE_ENV_VAR}",
                f'# {DISABLE_ENV_VAR}=fsdp\nresolve("fsdp:bf16-mixed")',
                _raised(lambda: reg.resolve("fsdp:bf16-mixed")),
            )
        )
    broken = PluginInfo(backend="fsdp", precisions=("bf16-mixed",), plugin_class="precision_fsdp_missing.plugin:X")
    reg2 = registry((broken, "precision-fsdp", "0.1.0"))
    blocks.append(
        _error_block(
            "A plugin whose code fails to import (the original exception is chained)",
            'resolve("fsdp:bf16-mixed")  # its module raises on import',
            _raised(lambda: reg2.resolve("fsdp:bf16-mixed")),
        )
    )
    needy = PluginInfo(
        backend="deepspeed",
        precisions=("bf16-mixed",),
        plugin_class="precision_deepspeed.plugin:DeepSpeedPrecision",
        requires=("deepspeed>=99.0",),
    )
    reg3 = registry((needy, "precision-deepspeed", "0.1.0"))
    blocks.append(
        _error_block(
            "A plugin whose requirements are not met (checked before its code is imported)",
            'resolve("deepspeed:bf16-mixed")  # it requires deepspeed>=99.0',
            _raised(lambda: reg3.resolve("deepspeed:bf16-mixed")),
        )
    )
    future = PluginInfo(backend="fsdp", precisions=("bf16-mixed",), plugin_class="x:Y", contract_version=2)
    reg4 = registry((future, "precision-fsdp", "9.0.0"))
    blocks.append(
        _error_block(
            "A plugin built for another contract version",
            'resolve("fsdp:bf16-mixed")  # a plugin built for contract 2',
            _raised(lambda: reg4.resolve("fsdp:bf16-mixed")),
        )
    )
    reg5 = registry((fsdp, "precision-fsdp", "0.1.0"))
    blocks.append(
        _error_block(
            "Two distributions registering the same backend",
            "# precision-fsdp and my-fsdp-fork both register 'fsdp'",
            _raised(lambda: reg5.register(fsdp, distribution="my-fsdp-fork", version="1.0")),
        )
    )
    blocks.append(
        _error_block(
            "A malformed plugin info object (for plugin authors)",
            'PluginInfo(backend="My Backend", precisions=("fp8",), plugin_class="nowhere")',
            _raised(lambda: PluginInfo(backend="My Backend", precisions=("fp8",), plugin_class="nowhere")),
        )
    )
    return "\n".join(blocks)


# ---- the Trainer front door -------------------------------------------------------------------------
def gen_trainer_errors(_: str | None) -> str:
    try:
        import lightning  # noqa: F401
    except ImportError:
        return "!!! note\n    Lightning is not installed where the docs were built; examples skipped.\n"
    sys.path.insert(0, str(ROOT / "docs" / "examples"))
    from cast.info import INFO
    from cast.plugin import CastPrecision
    from lightning.pytorch.plugins.precision import HalfPrecision

    from precision_base import Trainer, registered

    cases = [
        (
            "precision= together with precision_plugin=",
            'Trainer(precision_plugin="cast:bf16-true", precision="bf16-mixed")',
            lambda: Trainer(precision_plugin="cast:bf16-true", precision="bf16-mixed"),
        ),
        (
            "a precision plugin in plugins= as well",
            'Trainer(precision_plugin="cast:bf16-true", plugins=[HalfPrecision("bf16-true")])',
            lambda: Trainer(precision_plugin="cast:bf16-true", plugins=[HalfPrecision("bf16-true")]),
        ),
        (
            "something that is neither a name nor a Precision",
            "Trainer(precision_plugin=16)",
            lambda: Trainer(precision_plugin=16),
        ),
    ]
    blocks = []
    with registered(INFO, plugin_class=CastPrecision):
        for title, code, func in cases:
            blocks.append(_error_block(title, code, _raised(func)))
    blocks.append("The installed backends check `strategy=` themselves:\n")
    blocks.append(_backend_strategy_errors())
    return "\n".join(blocks)


def _backend_strategy_errors() -> str:
    """The installed FSDP / DeepSpeed plugins' own checks of ``strategy=``, where they raise on this machine."""
    from precision_base import Trainer, list_plugins

    installed = {e.backend for e in list_plugins() if e.status == "ok"}
    blocks = []
    for backend in EXPECTED_BACKENDS:  # the package list's backends (tools/tests/test_package_list_consumers.py)
        if backend not in installed:
            blocks.append(f"!!! note\n    `{backend}` was not installed where these docs were built.\n")
            continue
        for strategy in ("ddp", "fsdp", "deepspeed", "auto"):
            kwargs = {"precision_plugin": f"{backend}:bf16-mixed", "strategy": strategy, "accelerator": "cpu"}
            exc = _raised(functools.partial(Trainer, **kwargs, logger=False))
            if exc is not None:
                code = f'Trainer(precision_plugin="{backend}:bf16-mixed", strategy="{strategy}", accelerator="cpu")'
                blocks.append(_error_block(f"`{backend}` with strategy={strategy!r} on CPU", code, exc))
    return "\n".join(blocks)


def gen_cli_errors(_: str | None) -> str:
    from precision_base.cli import main

    out = []
    for argv in (["show", "fsdp:bf16:mixed"], ["show", "nosuchbackend:32"]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        out.append(f"$ precision-plugins {' '.join(argv)}\n{err.getvalue().strip()}\n(exit code {code})")
    return _fence("\n\n".join(out), "console")


# ---- installed plugins and their dtypes -------------------------------------------------------------
def gen_plugins(_: str | None) -> str:
    from precision_base import list_plugins

    entries = list_plugins()
    if not entries:
        return "!!! warning\n    No precision plugin was installed where these docs were built.\n"
    rows = ["| backend | distribution | version | status | precisions |", "|---|---|---|---|---|"]
    for e in entries:
        status = e.status if e.status == "ok" else f"{e.status}: {_md_escape(e.reason)}"
        extras = [f"`{p}` (extra)" for p in getattr(e, "extra_precisions", ())]
        precisions = ", ".join([f"`{p}`" for p in e.precisions] + extras)
        rows.append(f"| `{e.backend}` | {e.distribution} | {e.version} | {status} | {precisions} |")
    details = []
    for e in entries:
        if not e.info:
            continue
        details.append(f"### `{e.backend}`\n")
        if e.info.summary:
            details.append(f"- {_md_escape(e.info.summary)}")
        if e.info.strategy:
            details.append(f"- strategies: {_md_escape(e.info.strategy)}")
        if e.info.requires:
            details.append(f"- requires: {', '.join(f'`{r}`' for r in e.info.requires)}")
        details.append("")
    return "\n".join(rows) + "\n\n" + "\n".join(details)


EXPECTED_BACKENDS = {"fsdp": "precision-fsdp", "deepspeed": "precision-deepspeed"}


def gen_dtypes(_: str | None) -> str:
    from precision_base import list_plugins, resolve

    entries = {e.backend: e for e in list_plugins()}
    out = []
    for backend in sorted(set(entries) | set(EXPECTED_BACKENDS)):
        out.append(f"## `{backend}`\n")
        entry = entries.get(backend)
        if entry is None:
            out.append(
                f"!!! note\n    `{EXPECTED_BACKENDS[backend]}` was not installed where these docs were built, so its "
                f"table is missing. `pip install {EXPECTED_BACKENDS[backend]}` and "
                f"`precision-plugins show {backend}:<precision>` print it.\n"
            )
            continue
        if entry.status != "ok":
            out.append(f"!!! warning\n    `{backend}` is installed but {entry.status}: {_md_escape(entry.reason)}\n")
            continue
        tables: dict[str, Any] = {}
        fsdp1: dict[str, Any] = {}
        notes: dict[str, tuple[str, ...]] = {}
        failures = []
        extra_rows: dict[str, dict[str, str]] = {}
        unavailable = dict(entry.unavailable)
        for precision in entry.precisions + entry.extra_precisions:
            if precision in unavailable:  # its optional extra is not installed where the docs were built
                failures.append(f"`{precision}`: unavailable: {_md_escape(unavailable[precision])}")
                continue
            try:
                plugin = resolve(f"{backend}:{precision}")
                table = plugin.dtypes()
                if "fsdp_version" in inspect.signature(plugin.dtypes).parameters:  # FSDP: FSDP2 and FSDP1 differ
                    table, fsdp1[precision] = plugin.dtypes(fsdp_version=2), plugin.dtypes(fsdp_version=1)
            except Exception as exc:  # shown, never hidden
                failures.append(f"`{precision}`: {type(exc).__name__}: {_md_escape(str(exc))}")
                continue
            tables[precision] = table
            notes[precision] = tuple(table.notes)
            if precision in entry.extra_precisions:  # what the extra precision adds: its own describe() section
                base_keys = set(dict(resolve(f"{backend}:{dict(entry.info.extra_precisions)[precision]}").describe()))
                for key, value in plugin.describe().items():
                    if key not in base_keys and isinstance(value, dict):
                        extra_rows.setdefault(precision, {}).update({str(k): str(v) for k, v in value.items()})
        if tables:
            roles = [role for role, _ in next(iter(tables.values())).rows()]
            if fsdp1:
                out.append(
                    "For FSDP2 (`fully_shard`, the default). A row marked *FSDP1* replaces the row above it under "
                    "`FSDPStrategy` (FSDP1, CUDA GPUs only); the other rows are the same for both.\n"
                )
            if entry.extra_precisions:
                out.append(
                    "Columns after the five are the backend's extra precisions (`precision-plugins list` marks one "
                    "*unavailable* while its optional extra is not installed).\n"
                )
            out.append("| | " + " | ".join(f"`{p}`" for p in tables) + " |")
            out.append("|---|" + "---|" * len(tables))
            for role in roles:
                cells = [dict(t.rows())[role] for t in tables.values()]
                out.append(f"| {role} | " + " | ".join(cells) + " |")
                other = [dict(fsdp1[p].rows())[role] if p in fsdp1 else c for p, c in zip(tables, cells, strict=True)]
                if fsdp1 and other != cells:
                    out.append(f"| {role}, *FSDP1* | " + " | ".join(other) + " |")
            for role in dict.fromkeys(r for rows in extra_rows.values() for r in rows):
                cells = [_md_escape(extra_rows.get(p, {}).get(role, "-")) for p in tables]
                out.append(f"| {_md_escape(role)} | " + " | ".join(cells) + " |")
            out.append("")
            by_note: dict[str, list[str]] = {}
            for precision, lines in notes.items():
                for line in lines:
                    by_note.setdefault(line, []).append(precision)
            for line, precisions in by_note.items():
                where = "" if len(precisions) == len(tables) else ", ".join(f"`{p}`" for p in precisions) + ": "
                out.append(f"- {where}{_md_escape(line)}")
            out.append("")
        for failure in failures:
            out.append(f"!!! failure\n    dtypes() failed for {failure}\n")
    return "\n".join(out)


# ---- the compatibility grid -------------------------------------------------------------------------
AXIS_TITLES = {"torch": "torch", "lightning": "Lightning", "deepspeed": "DeepSpeed", "python": "Python"}


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def _result(cell: dict[str, Any], notes: list[str]) -> str:
    tests = cell.get("tests") or {}
    if cell["status"] == "passed":
        skipped = f", {tests['skipped']} skipped" if tests.get("skipped") else ""
        return f"{tests.get('tests', 0) - tests.get('skipped', 0)} passed{skipped}"
    notes.append(f"`{cell['session']}`: {_md_escape(cell.get('reason') or cell['status'])}")
    return f"**{cell['status'].upper()}** [^{len(notes)}]"


def gen_compatibility(_: str | None) -> str:
    """``docs/compatibility.json`` (written by the version matrix) as one grid per package: a row per version of
    the package's other dependencies, a column per Lightning minor; each cell says whether its tests passed.
    Exact versions, the lowest-versions cell and what was left out follow as footnotes."""
    data = json.loads((ROOT / "docs" / "compatibility.json").read_text(encoding="utf-8"))
    meta, cells = data["meta"], data["cells"]
    out = []
    passed = sum(c["status"] == "passed" for c in cells)
    out.append(
        f"**{passed} of {len(cells)} cells passed** on {meta.get('date', '?')} "
        f"({_md_escape(str(meta.get('machine', '')))}). Each cell installs the versions named in its row and column "
        "into a fresh virtual environment and runs the package's whole test suite, real 2-process training "
        "included.\n"
    )
    notes: list[str] = []
    for package in dict.fromkeys(c["package"] for c in cells):
        mine = [c for c in cells if c["package"] == package]
        grid = [c for c in mine if "variant" not in c["requested"]]
        out.append(f"## {package}\n")
        if grid:
            axes = sorted({a for c in grid for a in c["requested"]}, key=lambda a: (a == "lightning", a))
            columns = sorted({c["requested"].get("lightning", "") for c in grid}, key=_version_key)
            row_axes = [a for a in axes if a != "lightning"]
            rows = sorted(
                {tuple(c["requested"].get(a, "") for a in row_axes) for c in grid},
                key=lambda r: [_version_key(v) for v in r],
            )
            head = [AXIS_TITLES.get(a, a) for a in row_axes] + [f"Lightning {v}" if v else "result" for v in columns]
            lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for row in rows:
                found = {
                    c["requested"].get("lightning", ""): c
                    for c in grid
                    if tuple(c["requested"].get(a, "") for a in row_axes) == row
                }
                results = [_result(found[v], notes) if v in found else "not run" for v in columns]
                lines.append("| " + " | ".join([*row, *results]) + " |")
            out.append('<div class="compat-grid" markdown>\n\n' + "\n".join(lines) + "\n\n</div>\n")
        for cell in mine:
            if cell["requested"].get("variant") == "lowest":
                versions = (cell.get("installed") or {}).get("versions", {})
                floors = ", ".join(f"{AXIS_TITLES[k]} {versions[k]}" for k in AXIS_TITLES if versions.get(k))
                out.append(  # what the lowest cell really installed: precision-base declares no torch floor
                    f"The `lowest` cell (each direct dependency at the floor its metadata declares, "
                    f"`uv --resolution lowest-direct`) installed {floors}: {_result(cell, notes)}.\n"
                )
        exact = sorted(
            {
                f"{AXIS_TITLES.get(k, k)} {v}"
                for c in mine
                for k, v in ((c.get("installed") or {}).get("versions") or {}).items()
                if v and k in ("torch", "lightning", "deepspeed")
            },
            key=lambda t: (t.split()[0], _version_key(t)),
        )
        out.append(f"Installed exactly: {', '.join(exact)}.\n")
    pythons = sorted({(c.get("installed") or {}).get("python", "?") for c in cells}, key=_version_key)
    out.append("## How these were run\n")
    out.append(f"- Python {', '.join(pythons)}, CPU only: GPU-only tests skip, and count as skipped above.")
    out += [f"- {line}" for line in meta.get("excluded", [])]
    out.append(f"\nReproduce:\n\n```console\n$ {meta.get('command', 'nox -t matrix')}\n```\n")
    for i, note in enumerate(notes, 1):
        out.append(f"[^{i}]: {note}")
    return "\n".join(out)


# ---- the benchmarks summary leads with its charts ----------------------------------------------------
BENCHMARKS = {
    "overhead-fsdp": "Step time, FSDP2: ours against Lightning's built-in and a hand-written loop",
    "overhead-deepspeed": "Step time, DeepSpeed: ours against Lightning's built-in and a hand-written loop",
    "memory": "Memory per rank",
    "numerics": "Loss against 32-true",
    "discovery": "Discovery cost",
}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)  # JSON writes NaN as null


def _diverged(result: Path) -> list[str]:
    """A sentence per run of the numerics benchmark whose loss became non-finite (it has no line in the chart)."""
    out = []
    for run in json.loads(result.read_text(encoding="utf-8")).get("results", []):
        losses = run.get("losses") or []
        bad = next((i for i, loss in enumerate(losses) if not _finite(loss)), None)
        if bad is not None or not _finite(run.get("eval_loss", 0.0)):
            step = f" from step {bad + 1}" if bad is not None else ""
            out.append(f"{run['name']} diverged (loss NaN{step}), so its legend entry has no line.")
    return out


def _overhead_verdict(findings: list[str]) -> str:
    """One sentence from an overhead benchmark's findings: where ours differs from Lightning's built-in."""
    against_builtin = [re.sub(r":\s*(slower|faster) beyond.*", r" (\1)", f) for f in findings if "ours/builtin" in f]
    if not against_builtin:
        return "Against Lightning's built-in: the same within the 95% interval at every precision."
    return (
        "Against Lightning's built-in: the same within the 95% interval, in every round, except "
        + "; ".join(_md_escape(f) for f in against_builtin)
        + "."
    )


def gen_bench_glance(_: str | None) -> str:
    """Each committed benchmark's chart, with what its run found (the result file's ``findings``, written by the
    benchmark from its numbers), ahead of the tables."""
    folder = ROOT / "docs" / "benchmarks"
    out = ["## At a glance\n"]
    for name, title in BENCHMARKS.items():
        result = folder / f"{name}.json"
        if not result.is_file():
            continue
        findings = json.loads(result.read_text(encoding="utf-8")).get("findings") or []
        out.append(f"### [{title}]({name}.md)\n")
        if (folder / f"{name}.png").is_file():
            out.append(f"![{title}]({name}.png)\n")
        if name.startswith("overhead"):
            out.append(f"- {_overhead_verdict(findings)}")
        elif name == "numerics":
            out += [f"- {_md_escape(f)}" for f in findings[:2]]
            out += [f"- {_md_escape(line)}" for line in _diverged(result)]
        else:
            out += [f"- {_md_escape(f)}" for f in findings[:2]]
        out.append(f"- Details: [{name}]({name}.md)")
        out.append("")
    return "\n".join(out)


# ---- changelogs and API reference -------------------------------------------------------------------
def gen_changelog(dist: str | None) -> str:
    path = ROOT / "packages" / str(dist) / "CHANGELOG.md"
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^# .*\n", "", text, count=1)  # the page has its own title
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", text, flags=re.MULTILINE)


PACKAGE_SOURCES = {
    "precision_base": ROOT / "packages" / "precision-base" / "src",
    "precision_fsdp": ROOT / "packages" / "precision-fsdp" / "src",
    "precision_deepspeed": ROOT / "packages" / "precision-deepspeed" / "src",
}


def _public(path: str) -> bool:
    return not any(part.startswith("_") for part in path.split("."))


def reference_blocks(package_name: str) -> dict[str, str]:
    """The ``:::`` block of every public module of a package, by module path; each object is documented once,
    where it is defined.

    A name a module re-exports from another public module is not documented again: the module lists it with a
    link to where it is documented. Names re-exported from a private module are documented where they are
    exported (the private module has no page).
    """
    import griffe

    src = PACKAGE_SOURCES.get(package_name)
    if src is None or not (src / package_name).is_dir():
        return {}
    package = griffe.load(package_name, search_paths=[str(p) for p in PACKAGE_SOURCES.values()], resolve_aliases=False)
    blocks = {}
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
                if _public(target.rsplit(".", 1)[0]) and target.split(".", 1)[0] in PACKAGE_SOURCES:
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
        blocks[mod.path] = block
    return blocks


def gen_reference(module: str | None) -> str:
    """A package's reference page: its own docstring and exports, then a link to each module's page."""
    name = str(module)
    blocks = reference_blocks(name)
    if not blocks:
        return f"!!! note\n    `{name}` has no source in this tree.\n"
    modules = [m for m in blocks if m != name]
    listing = "\n".join(f"- [`{m}`]({m}.md)" for m in modules)
    return f"{blocks[name]}\n## Modules\n\nOne page per module:\n\n{listing}\n"


def reference_pages() -> dict[str, str]:
    """The generated page of every public module but the packages' roots: ``reference/<module>.md`` -> text."""
    pages = {}
    for package in PACKAGE_SOURCES:
        for module, block in reference_blocks(package).items():
            if module != package:
                pages[f"reference/{module}.md"] = f"# `{module}`\n\n{block}"
    return pages


def on_files(files: Any, config: Any, **_: Any) -> Any:
    """The mkdocs event: add one generated API page per module (built from the source tree, never committed)."""
    from mkdocs.structure.files import File

    for uri, text in reference_pages().items():
        files.append(File.generated(config, uri, content=text))
    return files


def on_config(config: Any, **_: Any) -> Any:
    """The mkdocs event: list each package's module pages under its entry in the API reference navigation."""
    pages = reference_pages()
    for section in config["nav"] or []:
        if isinstance(section, dict) and "API reference" in section:
            expanded = []
            for entry in section["API reference"]:
                ((title, uri),) = entry.items()
                package = title
                modules = [{u[len("reference/") : -3]: u} for u in pages if u.startswith(f"reference/{package}.")]
                expanded.append({title: [uri, *modules]} if modules else entry)
            section["API reference"] = expanded
    return config


def _public_modules(package: Any) -> Iterator[Any]:
    yield package
    for member in package.members.values():
        if not member.is_alias and member.is_module and _public(member.name):
            yield from _public_modules(member)


# ---- Sphinx roles in docstrings -> cross-references ----------------------------------------------------
SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|exc|mod|data|obj|const):`(~?)([\w.\s]+?)(\(\))?`")


def _resolve_in_scope(obj: Any, dotted: str) -> str | None:
    """The full path ``dotted`` names when written in ``obj``'s docstring (Python's scoping: own members, then
    the enclosing class and module), or None when it names nothing known there."""
    first, _, rest = dotted.partition(".")
    if first in PACKAGE_SOURCES:
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


def _documented_objects(obj: Any) -> Iterator[Any]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _documented_objects(member)


try:
    import griffe
except ImportError:  # the hooks' generators work without mkdocstrings; only the API pages need it
    pass
else:

    class SphinxRoles(griffe.Extension):  # type: ignore[misc]
        """Griffe extension: docstrings' Sphinx roles (``:class:`~precision_base.errors.X```) become
        mkdocstrings cross-references, and reST simple tables Markdown tables, so the API pages show links and
        tables instead of raw markup."""

        def on_package(self, *, pkg: Any, **kwargs: Any) -> None:
            for obj in _documented_objects(pkg):
                if obj.docstring is not None and "==" in obj.docstring.value:
                    obj.docstring.value = rst_tables_to_markdown(obj.docstring.value)
                if obj.docstring is not None and ":" in obj.docstring.value:
                    obj.docstring.value = SPHINX_ROLE.sub(
                        functools.partial(sphinx_role_to_markdown, obj), obj.docstring.value
                    )


def gen_file(path: str | None) -> str:
    target = ROOT / str(path)
    lang = {".py": "python", ".toml": "toml", ".yml": "yaml"}.get(target.suffix, "text")
    return _fence(target.read_text(encoding="utf-8").rstrip("\n"), lang)


# ---- the model zoo (docs/zoo.json, merged from the zoo's run by tests-integration/zoo/zoo_cases.py) ----
ZOO_GROUPS = {
    "fit": ("fit",),
    "same Trainer": ("validate", "test", "predict"),
    "fresh Trainer": ("fresh_validate", "fresh_test", "fresh_predict"),
    "from ckpt_path": ("ckpt_validate", "ckpt_test", "ckpt_predict"),
    "resume": ("resume",),
    "export": ("export",),
    "evaluate": ("evaluate",),
}


def _zoo_cell(steps: dict[str, Any], names: tuple[str, ...], notes: dict[str, int]) -> str:
    """``passed``, or each step that did not pass with its status and a footnote (one per distinct error)."""
    ran = [n for n in names if n in steps]
    if not ran:
        return "-"
    words = []
    for n in ran:
        if steps[n]["status"] != "passed":
            error = " ".join(steps[n].get("error", "").split())[:600]  # one line: logs carry \r and \n
            note = notes.setdefault(_md_escape(error), len(notes) + 1)
            words.append(f"{steps[n]['status']} ({n.split('_')[-1]}) [^{note}]")
    return ", ".join(words) or "passed"


def gen_zoo(_: str | None) -> str:
    """The zoo's results (``docs/zoo.json``): a row per architecture, spec, strategy and door; a column per
    lifecycle step; what failed or was refused, verbatim, in footnotes."""
    data = json.loads((ROOT / "docs" / "zoo.json").read_text(encoding="utf-8"))
    cases, meta = data["cases"], data.get("meta", {})
    passed = sum(all(s["status"] == "passed" for s in c["steps"].values()) for c in cases)
    out = [f"**{passed} of {len(cases)} cases passed every step** on {meta.get('date', '?')} "
           f"({_md_escape(meta.get('versions', ''))}).\n"]  # fmt: skip
    notes: dict[str, int] = {}
    for door in ("trainer", "fabric"):
        mine = [c for c in cases if c["case"]["door"] == door]
        if not mine:
            continue
        groups = [g for g in ZOO_GROUPS if any(n in c["steps"] for c in mine for n in ZOO_GROUPS[g])]
        out.append(f"## {'Trainer' if door == 'trainer' else 'Fabric'}\n")
        lines = ["| architecture | spec | strategy | " + " | ".join(groups) + " |", "|" + "---|" * (len(groups) + 3)]
        for c in sorted(mine, key=lambda c: (c["case"]["arch"], c["case"]["spec"], c["case"]["strategy"])):
            cells = [_zoo_cell(c["steps"], ZOO_GROUPS[g], notes) for g in groups]
            lines.append(f"| {c['case']['arch']} | `{c['case']['spec']}` | {c['case']['strategy']} | "
                         + " | ".join(cells) + " |")  # fmt: skip
        out.append("\n".join(lines) + "\n")
    out.append(f"Reproduce:\n\n```console\n$ {meta.get('command', 'nox -s zoo -- --update-docs')}\n```\n")
    out += [f"[^{i}]: {note}" for note, i in notes.items()]
    return "\n".join(out)


def gen_audit(which: str | None) -> str:
    """A real audit from ``docs/audit.json`` (written by ``python tests-integration/_audit_runs.py`` from 2-process
    fits): ``report`` / ``deepspeed`` the reports of ``fsdp:bf16-mixed`` / ``deepspeed:bf16-mixed``, ``mismatch``
    the error a strict audit of a plugin with a lying table raised, ``meta`` how and with what it was made."""
    data = json.loads((ROOT / "docs" / "audit.json").read_text(encoding="utf-8"))
    runs = data["reports"]
    if which == "meta":
        meta = data["meta"]
        return f"Generated by `{meta['command']}` ({_md_escape(meta['versions'])})."
    if which == "mismatch":
        return _fence(f"precision_base.errors.PrecisionAuditError: {runs['mismatch']['error']}")
    label = {"report": "fsdp:bf16-mixed", "deepspeed": "deepspeed:bf16-mixed"}.get(str(which))
    if label is None:
        raise ValueError(f"gen:audit takes report, deepspeed, mismatch or meta, got {which!r}")
    return _fence(runs[label]["text"])


GENERATORS: dict[str, Callable[[str | None], str]] = {
    "audit": gen_audit,
    "zoo": gen_zoo,
    "grammar": gen_grammar,
    "spec-errors": gen_spec_errors,
    "registry-errors": gen_registry_errors,
    "trainer-errors": gen_trainer_errors,
    "cli-errors": gen_cli_errors,
    "plugins": gen_plugins,
    "dtypes": gen_dtypes,
    "compatibility": gen_compatibility,
    "bench-glance": gen_bench_glance,
    "changelog": gen_changelog,
    "reference": gen_reference,
    "file": gen_file,
}


# Generated content carried in the Markdown itself, so a page reads on GitHub too: a block marker
# ``<!-- gen:NAME[:ARG] -->``, the generated text, ``<!-- /gen:NAME -->``. The build always regenerates the text;
# ``stale_pages`` (run by the docs' tests) says where the committed text is out of date, and
# ``python -m tools.docs_hooks --write`` rewrites it. A bare marker (no end marker) is filled at build time only.
BLOCK = re.compile(r"<!-- gen:([a-z-]+)(?::([\w./-]+))? -->\n(.*?)<!-- /gen:\1 -->", re.DOTALL)


def _generate(name: str, arg: str | None) -> str:
    if name not in GENERATORS:
        raise ValueError(f"unknown docs marker gen:{name}")
    return GENERATORS[name](arg)


def embed(markdown: str) -> str:
    """``markdown`` with every block marker's text regenerated (the markers kept)."""

    def fresh(match: re.Match[str]) -> str:
        name, arg = match.group(1), match.group(2)
        opening = f"<!-- gen:{name}:{arg} -->" if arg else f"<!-- gen:{name} -->"
        return f"{opening}\n{_generate(name, arg).strip()}\n<!-- /gen:{name} -->"

    return BLOCK.sub(fresh, markdown)


def stale_pages() -> list[Path]:
    """Pages whose committed generated text differs from what the code generates now."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    return [p for p in pages if embed(text := p.read_text(encoding="utf-8")) != text]


def render(markdown: str) -> str:
    """``markdown`` as the site shows it: every marker replaced by freshly generated text."""
    markdown = BLOCK.sub(lambda m: _generate(m.group(1), m.group(2)), markdown)
    return MARKER.sub(lambda m: _generate(m.group(1), m.group(2)), markdown)


# ---- tables narrow enough for the text column --------------------------------------------------------
TEXT_COLUMN_PX = 680  # the text column at 1280 px with both sidebars shown, less a margin
CHAR_PX = 7.6  # a character of table text (0.68rem); code is about the same
CELL_PADDING_PX = 20


def _cells(row: str) -> list[str]:
    """The cells of a Markdown table row (``|`` escaped as ``\\|`` or inside a code span does not split)."""
    cells, current, in_code, i = [], "", False, 0
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    while i < len(row):
        ch = row[i]
        if ch == "\\" and i + 1 < len(row):
            current += row[i : i + 2]
            i += 2
            continue
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append(current.strip())
            current = ""
        else:
            current += ch
        i += 1
    if current.strip():
        cells.append(current.strip())
    return cells


def _min_width(cell: str) -> float:
    """The narrowest a cell can be: its longest code span (never wrapped) or word (links count by their text)."""
    cell = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", cell)
    tokens = re.findall(r"`[^`]*`", cell) + re.sub(r"`[^`]*`", " ", cell).split()
    longest = max((len(re.sub(r"[*\\\[\]]|\(\S*?\)", "", t)) for t in tokens), default=0)
    return longest * CHAR_PX + CELL_PADDING_PX


def _key_columns(rows: list[list[str]]) -> int:
    """How many leading columns name a row: the fewest (at most 3) that tell every row apart."""
    for n in (1, 2, 3):
        if len({tuple(r[:n]) for r in rows}) == len(rows):
            return n
    return 3


def shape_table(lines: list[str]) -> list[str]:
    """A Markdown table wider than the text column, as several tables that each fit: the columns are split into
    groups, and every group repeats the columns that name the row."""
    header, body = _cells(lines[0]), [_cells(line) for line in lines[2:]]
    if any(len(r) != len(header) for r in body) or len(header) < 3:
        return lines
    widths = [max(_min_width(c) for c in column) for column in zip(header, *body, strict=True)]
    if sum(widths) <= TEXT_COLUMN_PX:
        return lines
    keys = _key_columns(body) if body else 1
    groups: list[list[int]] = [[]]
    budget = TEXT_COLUMN_PX - sum(widths[:keys])
    used = 0.0
    for col in range(keys, len(header)):
        if groups[-1] and used + widths[col] > budget:
            groups.append([])
            used = 0.0
        groups[-1].append(col)
        used += widths[col]
    out: list[str] = []
    for group in groups:
        cols = list(range(keys)) + group
        out.append("| " + " | ".join(header[c] for c in cols) + " |")
        out.append("|" + "---|" * len(cols))
        out += ["| " + " | ".join(r[c] for c in cols) + " |" for r in body]
        out.append("")
    return out[:-1]


def shape_tables(markdown: str) -> str:
    """Every table of a page shaped by :func:`shape_table` (code blocks left alone)."""
    lines, out, i, fence = markdown.split("\n"), [], 0, False
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        is_table = (
            not fence
            and line.lstrip().startswith("|")
            and i + 1 < len(lines)
            and re.fullmatch(r"\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*", lines[i + 1]) is not None
        )
        if not is_table:
            out.append(line)
            i += 1
            continue
        end = i + 2
        while end < len(lines) and lines[end].lstrip().startswith("|"):
            end += 1
        out += shape_table(lines[i:end])
        i = end
    return "\n".join(out)


# ---- tables as per-row sections on a phone ------------------------------------------------------------
TABLE_HTML = re.compile(r"<table>(.*?)</table>", re.DOTALL)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).strip().replace('"', "&quot;")


def label_cells(html: str) -> str:
    """Every table cell gets its column's header as ``data-label``, so that on a narrow screen the stylesheet can
    show each row as a small section (``header: value`` lines) instead of a table wider than the phone."""

    def label(table: re.Match[str]) -> str:
        body = table.group(1)
        head, sep, rest = body.partition("</thead>")
        if not sep:
            return table.group(0)
        headers = [_text(h) for h in re.findall(r"<th[^>]*>(.*?)</th>", head, re.DOTALL)]

        def row(tr: re.Match[str]) -> str:
            column = iter(headers)
            return re.sub(r"<td(?=[\s>])", lambda _m: f'<td data-label="{next(column, "")}"', tr.group(0))

        return "<table>" + head + sep + re.sub(r"<tr>.*?</tr>", row, rest, flags=re.DOTALL) + "</table>"

    return TABLE_HTML.sub(label, html)


# Inline code never breaks inside a name (extra.css: word-break keep-all, overflow-wrap normal); a long span may
# wrap only after one of these, where the hook puts a <wbr>: ``precision_base.<wbr>pytorch_<wbr>lightning``.
CODE_OR_PRE = re.compile(r"(<pre\b.*?</pre>)|<code>(.*?)</code>", re.DOTALL)
WRAP_AFTER = re.compile(r"(?<=\w)([._:/=(,])(?=\w)")
LONG_CODE = 20  # characters: a shorter span always fits a phone's line, so it moves to the next line whole


def wrap_inline_code(html: str) -> str:
    """``<wbr>`` after ``.``, ``_``, ``:``, ``/``, ``=``, ``(`` and ``,`` between word characters of every inline
    ``<code>`` span longer than :data:`LONG_CODE` characters (text only: tags and code blocks are left as they are)."""

    def span(match: re.Match[str]) -> str:
        if match.group(1) is not None or len(_text(match.group(2))) <= LONG_CODE:
            return match.group(0)
        parts = re.split(r"(<[^>]+>|&\w+;|&#\d+;)", match.group(2))
        inner = "".join(part if part.startswith(("<", "&")) else WRAP_AFTER.sub(r"\1<wbr>", part) for part in parts)
        return f"<code>{inner}</code>"

    return CODE_OR_PRE.sub(span, html)


def on_page_content(html: str, **_: Any) -> str:
    """The mkdocs event after Markdown: label table cells for the phone layout, let long inline code wrap only
    between the parts of a name."""
    return wrap_inline_code(label_cells(html))


# Pages whose body the site renders from data instead of the Markdown file: ``compatibility.md`` is written by
# the version matrix for readers of the repository (a flat table); the site shows the same data as grids.
RENDERED_FROM_DATA = {"compatibility.md": "# Compatibility\n\n<!-- gen:compatibility -->\n"}


def on_page_markdown(markdown: str, page: Any = None, **_: Any) -> str:
    """The mkdocs event: replace every marker of the page, then shape its tables to fit the text column."""
    src = getattr(getattr(page, "file", None), "src_uri", None)
    if src in RENDERED_FROM_DATA and "<!-- gen:" not in markdown:
        markdown = RENDERED_FROM_DATA[src]
    if src == "benchmarks/index.md" and "<!-- gen:bench-glance -->" not in markdown:
        # the summary is written by the benchmarks; the site puts the charts and findings first
        title, _sep, body = markdown.partition("\n")
        markdown = f"{title}\n\n<!-- gen:bench-glance -->\n{body}"
    return shape_tables(render(markdown))


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        for page in stale_pages():
            page.write_text(embed(page.read_text(encoding="utf-8")), encoding="utf-8")
            print(f"updated {page.relative_to(ROOT)}")
    else:
        stale = stale_pages()
        print("\n".join(f"out of date: {p.relative_to(ROOT)}" for p in stale) or "every generated block is current")
        raise SystemExit(1 if stale else 0)
