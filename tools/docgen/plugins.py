"""The installed plugins (docs/plugins.md) and each backend's dtype table (docs/dtypes.md), from ``list_plugins()``
and each plugin's own ``dtypes()`` / ``describe()``."""

from __future__ import annotations

import inspect
from typing import Any

from tools.docgen import md_escape
from tools.docgen.errors import backends


def plugins() -> str:
    from precision_base import list_plugins

    entries = list_plugins()
    if not entries:
        return "!!! warning\n    No precision plugin was installed where these docs were built.\n"
    rows = ["| backend | distribution | version | status | precisions |", "|---|---|---|---|---|"]
    for e in entries:
        status = e.status if e.status == "ok" else f"{e.status}: {md_escape(e.reason)}"
        extras = [f"`{p}` (extra)" for p in getattr(e, "extra_precisions", ())]
        precisions = ", ".join([f"`{p}`" for p in e.precisions] + extras)
        rows.append(f"| `{e.backend}` | {e.distribution} | {e.version} | {status} | {precisions} |")
    details = []
    for e in entries:
        if not e.info:
            continue
        details.append(f"### `{e.backend}`\n")
        if e.info.summary:
            details.append(f"- {md_escape(e.info.summary)}")
        if e.info.strategy:
            details.append(f"- strategies: {md_escape(e.info.strategy)}")
        if e.info.requires:
            details.append(f"- requires: {', '.join(f'`{r}`' for r in e.info.requires)}")
        details.append("")
    return "\n".join(rows) + "\n\n" + "\n".join(details)


def extra_precisions() -> str:
    """Each installed backend's extra precisions, as its plugin declares them: ``"precision-fsdp: `a`, `b` and
    `c`"``, backends joined by ``"; "`` (``"none installed here"`` without any)."""
    from precision_base import list_plugins

    parts = []
    for entry in list_plugins():
        names = [f"`{name}`" for name in getattr(entry, "extra_precisions", ())]
        if names:
            listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
            parts.append(f"{entry.distribution}: {listed}")
    return "; ".join(parts) or "none installed here"


def _tables(entry: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, str]], list[str]]:
    """One backend's tables by precision: FSDP2 (or the only one), FSDP1 where it differs, the rows an extra
    precision adds (its own ``describe()`` section), and a line per precision whose table could not be made."""
    from precision_base import resolve

    tables: dict[str, Any] = {}
    fsdp1: dict[str, Any] = {}
    extra_rows: dict[str, dict[str, str]] = {}
    failures = []
    unavailable = dict(entry.unavailable)
    for precision in entry.precisions + entry.extra_precisions:
        if precision in unavailable:  # its optional extra is not installed where the docs were built
            failures.append(f"`{precision}`: unavailable: {md_escape(unavailable[precision])}")
            continue
        try:
            plugin = resolve(f"{entry.backend}:{precision}")
            table = plugin.dtypes()
            if "fsdp_version" in inspect.signature(plugin.dtypes).parameters:  # FSDP: FSDP2 and FSDP1 differ
                table, fsdp1[precision] = plugin.dtypes(fsdp_version=2), plugin.dtypes(fsdp_version=1)
        except Exception as exc:  # shown, never hidden
            failures.append(f"`{precision}`: {type(exc).__name__}: {md_escape(str(exc))}")
            continue
        tables[precision] = table
        if precision in entry.extra_precisions:
            base = dict(entry.info.extra_precisions)[precision]
            base_keys = set(dict(resolve(f"{entry.backend}:{base}").describe()))
            for key, value in plugin.describe().items():
                if key not in base_keys and isinstance(value, dict):
                    extra_rows.setdefault(precision, {}).update({str(k): str(v) for k, v in value.items()})
    return tables, fsdp1, extra_rows, failures


def _grid(
    entry: Any, tables: dict[str, Any], fsdp1: dict[str, Any], extra_rows: dict[str, dict[str, str]]
) -> list[str]:
    out = []
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
    for role, _ in next(iter(tables.values())).rows():
        cells = [dict(t.rows())[role] for t in tables.values()]
        out.append(f"| {role} | " + " | ".join(cells) + " |")
        other = [dict(fsdp1[p].rows())[role] if p in fsdp1 else c for p, c in zip(tables, cells, strict=True)]
        if fsdp1 and other != cells:
            out.append(f"| {role}, *FSDP1* | " + " | ".join(other) + " |")
    for role in dict.fromkeys(r for rows in extra_rows.values() for r in rows):
        cells = [md_escape(extra_rows.get(p, {}).get(role, "-")) for p in tables]
        out.append(f"| {md_escape(role)} | " + " | ".join(cells) + " |")
    out.append("")
    by_note: dict[str, list[str]] = {}
    for precision, table in tables.items():
        for line in table.notes:
            by_note.setdefault(line, []).append(precision)
    for line, precisions in by_note.items():
        where = "" if len(precisions) == len(tables) else ", ".join(f"`{p}`" for p in precisions) + ": "
        out.append(f"- {where}{md_escape(line)}")
    out.append("")
    return out


def dtypes() -> str:
    """A section per backend of the package list (or installed): its dtype table for every precision it offers."""
    from precision_base import list_plugins

    expected = backends()
    entries = {e.backend: e for e in list_plugins()}
    out = []
    for backend in sorted(set(entries) | set(expected)):
        out.append(f"## `{backend}`\n")
        entry = entries.get(backend)
        if entry is None:
            out.append(
                f"!!! note\n    `{expected[backend]}` was not installed where these docs were built, so its "
                f"table is missing. `pip install {expected[backend]}` and "
                f"`precision-plugins show {backend}:<precision>` print it.\n"
            )
            continue
        if entry.status != "ok":
            out.append(f"!!! warning\n    `{backend}` is installed but {entry.status}: {md_escape(entry.reason)}\n")
            continue
        tables, fsdp1, extra_rows, failures = _tables(entry)
        if tables:
            out += _grid(entry, tables, fsdp1, extra_rows)
        out += [f"!!! failure\n    dtypes() failed for {failure}\n" for failure in failures]
    return "\n".join(out)
