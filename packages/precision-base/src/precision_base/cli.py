"""The ``precision-plugins`` command: ``list``, ``show <spec>`` and ``doctor``.

``list`` reads entry points only and imports no torch. ``show`` and ``doctor`` import the plugins they
inspect.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, Optional

from precision_base.__about__ import __version__
from precision_base.errors import PrecisionPluginError
from precision_base.registry import ENTRY_POINT_GROUP, PluginEntry, list_plugins, resolve


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip() for row in rows)


def _entry_dict(entry: PluginEntry) -> dict[str, Any]:
    return {
        "backend": entry.backend,
        "distribution": entry.distribution,
        "version": entry.version,
        "precisions": list(entry.precisions),
        "status": entry.status,
        "reason": entry.reason,
    }


def cmd_list(args: argparse.Namespace) -> int:
    entries = list_plugins()
    if args.json:
        print(json.dumps([_entry_dict(e) for e in entries], indent=2))
        return 0
    if not entries:
        print(
            f"no precision plugins installed (entry-point group {ENTRY_POINT_GROUP!r}); try: pip install precision-fsdp"
        )
        return 0
    rows = [["BACKEND", "DISTRIBUTION", "VERSION", "PRECISIONS", "STATUS"]]
    reasons = []
    for e in entries:
        rows.append([e.backend, e.distribution, e.version, ",".join(e.precisions) or "-", e.status])
        if e.reason:
            reasons.append(f"  {e.backend}: {e.reason}")
    print(_table(rows))
    if reasons:
        print("\n".join(["", "problems:", *reasons]))
    return 0


def _describe_lines(value: Any, indent: str = "  ") -> list[str]:
    text = json.dumps(value, indent=2, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)
    return [indent + line for line in text.splitlines()]


def cmd_show(args: argparse.Namespace) -> int:
    plugin = resolve(args.spec)
    cls = type(plugin)
    info_lines = [
        f"plugin:    {cls.__module__}.{cls.__qualname__}",
        f"spec:      {plugin.backend}:{plugin.precision}",
        f"strategy:  {_strategy_name(plugin)}",
        "",
        "dtypes:",
    ]
    table = plugin.dtypes()
    rows = [["  ROLE", "DTYPE"], *[[f"  {role}", dtype] for role, dtype in table.rows()]]
    print("\n".join(info_lines))
    print(_table(rows))
    for note in table.notes:
        print(f"  note: {note}")
    for key, value in plugin.describe().items():
        print(f"\n{key}:")
        print("\n".join(_describe_lines(value)))
    return 0


def _strategy_name(plugin: Any) -> str:
    from precision_base.registry import get_entry

    info = get_entry(plugin.backend).info
    return info.strategy if info is not None and info.strategy else "-"


def cmd_doctor(args: argparse.Namespace) -> int:
    failures = 0
    for entry in list_plugins():
        if entry.status != "ok":
            print(f"[{entry.status}] {entry.backend}: {entry.reason}")
            failures += entry.status != "disabled"
            continue
        try:
            for precision in entry.precisions:
                resolve(f"{entry.backend}:{precision}")
        except Exception as exc:  # doctor reports every failure instead of stopping at the first
            print(f"[broken] {entry.backend}: {type(exc).__name__}: {exc}")
            failures += 1
        else:
            print(f"[ok] {entry.backend} ({entry.distribution} {entry.version}): {', '.join(entry.precisions)}")
    return 1 if failures else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="precision-plugins", description="Inspect installed precision plugins.")
    parser.add_argument("--version", action="version", version=f"precision-base {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="list installed backends (imports no torch)")
    p_list.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p_list.set_defaults(func=cmd_list)
    p_show = sub.add_parser("show", help="resolve a plugin name and print its dtypes and strategy")
    p_show.add_argument("spec", help='a plugin name such as "fsdp:bf16-mixed"')
    p_show.set_defaults(func=cmd_show)
    p_doc = sub.add_parser("doctor", help="import every installed plugin at every precision and report problems")
    p_doc.set_defaults(func=cmd_doctor)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except PrecisionPluginError as exc:
        print(f"precision-plugins: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
