"""The spec grammar and every error a user can meet, for docs/names-and-errors.md: each example is run against
the installed code (registry errors in a private registry) and the page shows what it really raised."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
from collections.abc import Iterator

from tools.docgen import ROOT, fence, md_escape, raised
from tools.packages import packages

# The marker docs/tests/test_code_blocks.py reads: these blocks are error cases, not programs to run alone.
ERROR_CASE = (
    "<!-- not-run-alone: an error case, not a program: tools/docgen/errors.py provokes it (in a private registry "
    "where it needs plugins this machine lacks) when it builds this page, and shows the error it raised below -->"
)


def backends() -> dict[str, str]:
    """``{backend: distribution}`` of the plugins in the package list (``[tool.precision-plugins]``)."""
    return {pkg.backend: pkg.dist for pkg in packages().values() if pkg.backend is not None}


def error_block(title: str, code: str, exc: BaseException | None) -> str:
    if exc is None:
        return f"**{title}**: no error was raised (this page is out of date: please report it)\n"
    return f"**{title}**\n\n{ERROR_CASE}\n{fence(code, 'python')}\n\n{fence(f'{type(exc).__name__}: {exc}')}\n"


def grammar() -> str:
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
    return f"{fence(GRAMMAR)}\n\n" + "\n".join(rows + extras) + note


SPEC_CASES: list[object] = [
    *("", "   ", "fsdp", "bf16-mixed", ":bf16-mixed", "fsdp:", "fsdp:bf16:mixed", "FSDP:bf16-mixed"),
    *("fsdp:BF16-MIXED", "fsdp:bf16-mix", "fsdp:64", "fsdp:fp16", "fsdp:fp32", "fsdp:fp8", "my plugin:32"),
    *(None, 32, ("fsdp", "bf16-mixed")),
]


def _declared_extras(backend: str) -> tuple[str, ...]:
    """What ``resolve`` gives ``parse_spec``: the installed backend's extra precisions, for the hint."""
    from precision_base import PrecisionPluginError, get_entry

    try:
        return get_entry(backend).extra_precisions
    except PrecisionPluginError:
        return ()


def spec_errors() -> str:
    from precision_base import parse_spec
    from precision_base.spec import GRAMMAR

    rows = ["| input | error | message (*grammar*: the text above) |", "|---|---|---|"]
    for case in SPEC_CASES:
        exc = raised(functools.partial(parse_spec, case, extras_of=_declared_extras))
        if exc is None:
            rows.append(f"| `{case!r}` | accepted | `{parse_spec(case)}` |")
        else:
            message = "*grammar*".join(md_escape(part) for part in str(exc).split(GRAMMAR))
            rows.append(f"| `{case!r}` | `{type(exc).__name__}` | {message} |")
    ok = ["fsdp:bf16-mixed", " deepspeed : 16 ", "fsdp:bf16", "fsdp:32"]
    accepted = "\n".join(f"parse_spec({s!r})  ->  {parse_spec(s)}" for s in ok)
    return "\n".join(rows) + "\n\nWhat is accepted:\n\n" + fence(accepted)


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


def registry_errors() -> str:
    from precision_base import PluginInfo
    from precision_base.registry import Registry, default_registry
    from precision_base.registry.discovery import DISABLE_ENV_VAR

    def registry(info: PluginInfo, dist: str, version: str) -> Registry:
        reg = Registry(group="precision_base.docs_examples_no_such_group")
        reg.register(info, distribution=dist, version=version, replace=True)
        return reg

    fsdp = PluginInfo(backend="fsdp", precisions=("32-true", "bf16-mixed"), plugin_class="precision_fsdp.x:Y")
    reg = registry(fsdp, "precision-fsdp", "0.1.0")
    broken = PluginInfo(backend="fsdp", precisions=("bf16-mixed",), plugin_class="precision_fsdp_missing.plugin:X")
    needy = PluginInfo(
        backend="deepspeed",
        precisions=("bf16-mixed",),
        plugin_class="precision_deepspeed.plugin:DeepSpeedPrecision",
        requires=("deepspeed>=99.0",),
    )
    future = PluginInfo(backend="fsdp", precisions=("bf16-mixed",), plugin_class="x:Y", contract_version=2)
    blocks = [
        error_block(
            "Unknown backend (a typo, or a plugin that is not installed)",
            'resolve("deepspeed:bf16-mixed")  # only precision-fsdp is installed',
            raised(lambda: reg.resolve("deepspeed:bf16-mixed")),
        ),
        error_block("A near miss", 'resolve("fsbp:bf16-mixed")', raised(lambda: reg.resolve("fsbp:bf16-mixed"))),
        error_block(
            "A precision the backend does not offer (the installed precision-deepspeed says what it offers)",
            'resolve("deepspeed:fp8-tensorwise")  # DeepSpeed has no float8 recipe',
            raised(lambda: default_registry().resolve("deepspeed:fp8-tensorwise")),
        ),
    ]
    with _env(DISABLE_ENV_VAR, "fsdp"):
        blocks.append(
            error_block(
                f"A backend disabled with {DISABLE_ENV_VAR}",
                f'# {DISABLE_ENV_VAR}=fsdp\nresolve("fsdp:bf16-mixed")',
                raised(lambda: reg.resolve("fsdp:bf16-mixed")),
            )
        )
    cases = [
        ("A plugin whose code fails to import (the original exception is chained)", broken, "0.1.0",
         'resolve("fsdp:bf16-mixed")  # its module raises on import'),
        ("A plugin whose requirements are not met (checked before its code is imported)", needy, "0.1.0",
         'resolve("deepspeed:bf16-mixed")  # it requires deepspeed>=99.0'),
        ("A plugin built for another contract version", future, "9.0.0",
         'resolve("fsdp:bf16-mixed")  # a plugin built for contract 2'),
    ]  # fmt: skip
    for title, info, version, code in cases:
        other = registry(info, f"precision-{info.backend}", version)
        blocks.append(error_block(title, code, raised(lambda o=other, i=info: o.resolve(f"{i.backend}:bf16-mixed"))))
    reg5 = registry(fsdp, "precision-fsdp", "0.1.0")
    blocks.append(
        error_block(
            "Two distributions registering the same backend",
            "# precision-fsdp and my-fsdp-fork both register 'fsdp'",
            raised(lambda: reg5.register(fsdp, distribution="my-fsdp-fork", version="1.0")),
        )
    )
    blocks.append(
        error_block(
            "A malformed plugin info object (for plugin authors)",
            'PluginInfo(backend="My Backend", precisions=("fp8",), plugin_class="nowhere")',
            raised(lambda: PluginInfo(backend="My Backend", precisions=("fp8",), plugin_class="nowhere")),
        )
    )
    return "\n".join(blocks)


def trainer_errors() -> str:
    """The front door's own errors (with the docs' example plugin registered), then the installed backends'."""
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
    with registered(INFO, plugin_class=CastPrecision):
        blocks = [error_block(title, code, raised(func)) for title, code, func in cases]
    blocks.append("The installed backends check `strategy=` themselves:\n")
    blocks.append(backend_strategy_errors())
    return "\n".join(blocks)


def backend_strategy_errors() -> str:
    """The installed FSDP / DeepSpeed plugins' own checks of ``strategy=``, where they raise on this machine."""
    from precision_base import Trainer, list_plugins

    installed = {e.backend for e in list_plugins() if e.status == "ok"}
    blocks = []
    for backend in backends():
        if backend not in installed:
            blocks.append(f"!!! note\n    `{backend}` was not installed where these docs were built.\n")
            continue
        for strategy in ("ddp", "fsdp", "deepspeed", "auto"):
            kwargs = {"precision_plugin": f"{backend}:bf16-mixed", "strategy": strategy, "accelerator": "cpu"}
            exc = raised(functools.partial(Trainer, **kwargs, logger=False))
            if exc is not None:
                code = f'Trainer(precision_plugin="{backend}:bf16-mixed", strategy="{strategy}", accelerator="cpu")'
                blocks.append(error_block(f"`{backend}` with strategy={strategy!r} on CPU", code, exc))
    return "\n".join(blocks)


def cli_errors() -> str:
    from precision_base.cli import main

    out = []
    for argv in (["show", "fsdp:bf16:mixed"], ["show", "nosuchbackend:32"]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        out.append(f"$ precision-plugins {' '.join(argv)}\n{err.getvalue().strip()}\n(exit code {code})")
    return fence("\n\n".join(out), "console")
