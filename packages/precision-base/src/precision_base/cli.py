"""The ``precision-plugins`` command: ``list``, ``show <spec>``, ``doctor`` and ``audit SCRIPT [ARGS]``.

``list`` runs each enabled plugin's info module only (no plugin class, no torch; see
[`precision_base.registry`][]). ``show`` and ``doctor`` import the plugins they inspect.

``recommend`` prints the plugin name to train with on this machine, one line of reason per choice, the other names
that run here and those ruled out ([`precision_base.tune.recommend`][]); it exits 1 when no installed backend can train.

Exit codes: 0 when every plugin is ``ok`` or ``disabled``; 1 when ``list`` or ``doctor`` finds a plugin in any
other status (``doctor`` also for a name in ``PRECISION_PLUGINS_DISABLE`` that matches no backend, and for an info
module or package ``__init__`` that imports torch, Lightning or what the plugin requires that is built on torch);
2 for bad input (``show``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, Optional

from precision_base.__about__ import __version__
from precision_base.errors import PluginRequirementError, PrecisionPluginError
from precision_base.registry import default_registry, get_entry, list_plugins, resolve
from precision_base.registry.discovery import DISABLE_ENV_VAR, ENTRY_POINT_GROUP, IN_PROCESS
from precision_base.registry.statuses import PluginEntry, broken_extras, published_distributions
from precision_base.tune import command as tune_command

ACCEPTED = ("ok", "disabled")
"""Statuses that do not make ``list`` or ``doctor`` exit non-zero."""


def _cell(value: object) -> str:
    """Any value as one table cell: ``None`` and empty become ``-``, line breaks become spaces."""
    if value is None:
        return "-"
    text = value if isinstance(value, str) else str(value)
    text = " ".join(text.split())
    return text or "-"


def render_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns; missing cells and ``None`` render as ``-``; never raises on odd values."""
    width = len(header)
    cells = [[_cell(c) for c in header]] + [[_cell(r[i]) if i < len(r) else "-" for i in range(width)] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(width)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _distribution(entry: PluginEntry) -> str:
    if entry.origin == IN_PROCESS and entry.distribution != IN_PROCESS:
        return f"{entry.distribution} (in-process)"
    return entry.distribution


def _entry_dict(entry: PluginEntry) -> dict[str, Any]:
    return {
        "backend": entry.backend,
        "distribution": entry.distribution,
        "version": entry.version,
        "origin": entry.origin,
        "entry_point": entry.entry_point,
        "precisions": list(entry.precisions),
        "extra_precisions": list(entry.extra_precisions),
        "unavailable": dict(entry.unavailable),
        "broken": dict(broken_extras(entry)),
        "status": entry.status,
        "reason": entry.reason,
        "summary": entry.summary,
    }


def _precision_cell(entry: PluginEntry) -> str:
    """Every precision of ``entry``, an extra one marked ``(unavailable)`` (its extra is not installed) or
    ``(broken)`` (installed, but it does not import)."""
    marks = {p: "unavailable" for p, _why in entry.unavailable} | {p: "broken" for p, _why in broken_extras(entry)}
    names = entry.precisions + entry.extra_precisions
    return ",".join(f"{p} ({marks[p]})" if p in marks else p for p in names)


def _unavailable_lines(entry: PluginEntry, indent: str = "  ") -> list[str]:
    """One line per reason: ``fsdp:fp8-tensorwise, fsdp:fp8-rowwise unavailable: needs torchao...`` (or
    ``... broken: the 'fp8' extra ... is installed (...), but `import torchao.float8` fails: ...``)."""
    by_reason: dict[tuple[str, str], list[str]] = {}
    for state, pairs in (("unavailable", entry.unavailable), ("broken", broken_extras(entry))):
        for precision, why in pairs:
            by_reason.setdefault((state, why), []).append(f"{entry.backend}:{precision}")
    return [f"{indent}{', '.join(names)} {state}: {why}" for (state, why), names in by_reason.items()]


def _unknown_disabled_note() -> Optional[str]:
    unknown = default_registry().unknown_disabled()
    if not unknown:
        return None
    return f"{DISABLE_ENV_VAR} names no registered backend: {', '.join(unknown)} (a typo?)"


def cmd_list(args: argparse.Namespace) -> int:
    entries = list_plugins()
    note = _unknown_disabled_note()
    failed = any(e.status not in ACCEPTED for e in entries)
    if args.json:
        print(json.dumps([_entry_dict(e) for e in entries], indent=2))
        if note:
            print(f"precision-plugins: warning: {note}", file=sys.stderr)
        return 1 if failed else 0
    if not entries:
        dists = list(published_distributions().values())
        hint = "; try: " + " or ".join(f"pip install {d}" for d in dists) if dists else ""
        print(f"no precision plugins installed (entry-point group {ENTRY_POINT_GROUP!r}){hint}")
    else:
        header = ["BACKEND", "DISTRIBUTION", "VERSION", "PRECISIONS", "STATUS", "SUMMARY"]
        rows = [[e.backend, _distribution(e), e.version, _precision_cell(e), e.status, e.summary] for e in entries]
        print(render_table(header, rows))
        problems = [f"  {e.backend}: {e.reason}" for e in entries if e.reason]
        if problems:
            print("\n".join(["", "problems:", *problems]))
        unavailable = [line for e in entries for line in _unavailable_lines(e)]
        if unavailable:
            print("\n".join(["", "unavailable or broken here (the backend itself is ok):", *unavailable]))
    if note:
        print(f"\nnote: {note}")
    return 1 if failed else 0


def _describe_lines(value: Any, indent: str = "  ") -> list[str]:
    text = json.dumps(value, indent=2, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)
    return [indent + line for line in text.splitlines()]


def _show_options(pairs: list[str]) -> dict[str, Any]:
    """``--option KEY=VALUE`` pairs as keyword options: VALUE read as a Python literal, else kept as text."""
    import ast

    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise SystemExit(
                f"precision-plugins show: --option expects KEY=VALUE (e.g. keep_fp32=('lm_head',)), got {pair!r}"
            )
        try:
            options[key.strip()] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            options[key.strip()] = text
    return options


def cmd_show(args: argparse.Namespace) -> int:
    plugin = resolve(args.spec, **_show_options(getattr(args, "option", None) or []))
    cls = type(plugin)
    entry = get_entry(plugin.backend)
    info = entry.info
    table = plugin.dtypes()
    facts = {
        "plugin": f"{cls.__module__}.{cls.__qualname__}",
        "fabric": (info.fabric_class.replace(":", ".") if info is not None and info.fabric_class else None)
        or "none (this backend has no Lightning Fabric class)",
        "spec": f"{plugin.backend}:{plugin.precision}",
        "distribution": f"{_distribution(entry)} {entry.version}",
        "strategy": info.strategy if info is not None and info.strategy else None,
        "summary": entry.summary or None,
    }
    described = dict(plugin.describe())
    if args.json:
        data = {**facts, "dtypes": dict(table.rows()), "notes": list(table.notes), "describe": described}
        print(json.dumps(data, indent=2, sort_keys=False, default=str))
        return 0
    print("\n".join(f"{key + ':':<14}{_cell(value)}" for key, value in facts.items()))
    print("\ndtypes:")
    print("\n".join("  " + line for line in render_table(["ROLE", "DTYPE"], table.rows()).splitlines()))
    for note in table.notes:
        print(f"  note: {note}")
    for key, value in described.items():
        print(f"\n{key}:")
        print("\n".join(_describe_lines(value)))
    return 0


def cmd_recommend(args: argparse.Namespace) -> int:
    """Print the plugin name [`precision_base.tune.recommend.recommend`][] suggests for this machine (exit 1: none)."""
    from precision_base.tune.recommend import read_machine, recommend

    if args.measure:
        return tune_command.run(args)
    result = recommend(read_machine())
    print(json.dumps(result.as_dict(), indent=2) if args.json else result.render())
    return 0 if result.spec else 1


def _doctor_entry(entry: PluginEntry, check_imports: bool) -> dict[str, Any]:
    report: dict[str, Any] = {**_entry_dict(entry), "problems": []}
    if entry.status != "ok":
        if entry.status != "disabled":
            report["problems"].append(f"{entry.status}: {entry.reason}")
        return report
    missing = dict(entry.unavailable)
    for precision in entry.precisions + entry.extra_precisions:
        spec = f"{entry.backend}:{precision}"
        try:
            resolve(spec)
        except PluginRequirementError as exc:
            if precision not in missing:  # installed but broken (an extra that does not import): a problem
                report["problems"].append(f"{spec}: {exc}")
            continue  # else refused with the install line, as `list` says: unavailable, not broken
        except Exception as exc:  # doctor reports every failure instead of stopping at the first
            report["problems"].append(f"{spec}: {type(exc).__name__}: {exc}")
            continue
        if precision in missing:
            report["problems"].append(f"{spec} is marked unavailable ({missing[precision]}) but resolves")
    if check_imports and entry.entry_point:
        from precision_base.registry.import_check import heavy_imports

        module, _, attr = entry.entry_point.partition(":")
        found = heavy_imports(module, attr.strip(), distribution=entry.distribution)
        report["problems"] += found.problems(f"{entry.backend} ({entry.entry_point})")
    if report["problems"]:
        report["status"] = "broken"
    return report


def cmd_doctor(args: argparse.Namespace) -> int:
    reports = [_doctor_entry(e, not args.skip_import_check) for e in list_plugins()]
    note = _unknown_disabled_note()
    failed = bool(note) or any(r["problems"] for r in reports)
    if args.json:
        print(json.dumps({"plugins": reports, "problems": [note] if note else []}, indent=2))
        return 1 if failed else 0
    for r in reports:
        if r["status"] == "disabled":
            print(f"[disabled] {r['backend']}: {r['reason']}")
        elif r["problems"]:
            print(f"[{r['status']}] {r['backend']}:")
            print("\n".join(f"  - {p}" for p in r["problems"]))
        else:
            names = [*r["precisions"], *(p for p in r["extra_precisions"] if p not in r["unavailable"])]
            print(f"[ok] {r['backend']} ({r['distribution']} {r['version']}): {', '.join(names)}")
            by_reason: dict[str, list[str]] = {}
            for precision, why in r["unavailable"].items():
                by_reason.setdefault(why, []).append(f"{r['backend']}:{precision}")
            for why, specs in by_reason.items():
                print(f"  - unavailable: {', '.join(specs)}: {why}")
    if note:
        print(f"[problem] {note}")
    return 1 if failed else 0


def cmd_audit(args: argparse.Namespace) -> int:
    """Run ``args.script`` as ``__main__`` with ``PRECISION_PLUGINS_AUDIT`` set: every Trainer it makes through
    precision-base's doors audits its first steps and prints the report at rank 0. Exit 1 on a strict mismatch."""
    import runpy

    from precision_base.audit.callback import ENV_VARIABLE
    from precision_base.errors import PrecisionAuditError

    tokens = ["strict"] if args.strict else ["1"]
    os.environ[ENV_VARIABLE] = ",".join([*tokens, f"steps={args.steps}"])
    sys.argv = [args.script, *args.script_args]
    try:
        runpy.run_path(args.script, run_name="__main__")
    except PrecisionAuditError as exc:
        print(f"precision-plugins audit: {exc}", file=sys.stderr)
        return 1
    return 0


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"steps must be a positive int, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="precision-plugins",
        description="Inspect installed precision plugins.",
        epilog="Exit codes: 0 every plugin ok or disabled; 1 a plugin in another status (or, for doctor, any "
        "problem found); 2 bad input.",
    )
    parser.add_argument("--version", action="version", version=f"precision-base {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser(
        "list", help="list installed backends (runs only their info modules; exits 1 if any is not ok or disabled)"
    )
    p_list.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p_list.set_defaults(func=cmd_list)
    p_show = sub.add_parser("show", help="resolve a plugin name and print its dtypes and strategy")
    p_show.add_argument("spec", help='a plugin name such as "fsdp:bf16-mixed"')
    p_show.add_argument("--json", action="store_true", help="print JSON")
    p_show.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="a plugin option, as resolve(spec, KEY=VALUE) takes it (VALUE is a Python literal), e.g. "
        "--option \"keep_fp32=('lm_head',)\"; repeatable",
    )
    p_show.set_defaults(func=cmd_show)
    p_rec = sub.add_parser(
        "recommend",
        help="read this machine (CPU bfloat16/float16, CUDA compute capability, installed backends and extras) and "
        "print the plugin name to train with, why, and the names ruled out (exit 1 if none can train here)",
    )
    p_rec.add_argument("--json", action="store_true", help="print JSON")
    tune_command.add_arguments(p_rec)
    p_rec.set_defaults(func=cmd_recommend)
    p_doc = sub.add_parser(
        "doctor",
        help="import every plugin at every precision, check that its info module and package import nothing "
        "heavy, and report problems (exit 1 if any)",
    )
    p_doc.add_argument("--json", action="store_true", help="print JSON")
    p_doc.add_argument(
        "--skip-import-check", action="store_true", help="skip the fresh-interpreter check of heavy imports"
    )
    p_doc.set_defaults(func=cmd_doctor)
    p_audit = sub.add_parser(
        "audit",
        help="run a training script with the precision audit on (PRECISION_PLUGINS_AUDIT) and print its report",
    )
    p_audit.add_argument("--steps", type=_positive, default=1, help="optimizer steps to audit (default 1)")
    p_audit.add_argument("--strict", action="store_true", help="fail the run (exit 1) on a mismatch")
    p_audit.add_argument("script", help="the training script, run as __main__")
    p_audit.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    p_audit.set_defaults(func=cmd_audit)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except PrecisionPluginError as exc:
        print(f"precision-plugins: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `precision-plugins show ... | head`: the reader left, nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
