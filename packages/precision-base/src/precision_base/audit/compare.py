"""What each observation should be, read from the plugin's public contract, and the rows comparing the two.

The expectations (every one from ``plugin.dtypes()``, the plugin's precision name and the modules the plugin made
float32 through [`precision_base.kit.keep_fp32`][]; nothing plugin-specific):

| role | expected |
|---|---|
| parameters | ``parameters`` (float32 for parameters of kept modules): what the optimizer updates |
| forward parameters | ``compute``; with ``autocast`` set, ``compute`` or ``parameters`` (autocast casts at |
|  | each op); float32 inside kept modules |
| autocast | ``autocast`` (``"off"`` when ``None``); ``"off"`` inside kept modules |
| compute | ``compute`` for every matmul module's output; float32 inside kept modules |
| float8 | precisions whose plugin declares float8 matmuls (`PluginInfo.extra_matmuls`): float8 |
|  | matrix products in at least one layer, and in every ``Float8*`` layer |
| gradients | ``parameters`` (what the optimizer sees is in the dtype of what it updates) |
| optimizer state | ``parameters`` |
| reduction | ``reduction`` for floating collectives of more than one element (scalars such as |
|  | gradient norms, overflow flags and logged metrics are shown, not compared); float32 |
|  | too where a kept module's parameters were gathered in float32 (its own unit) |
| gathering | as forward parameters (float8 too for float8 precisions; float32 too as for reduction) |
| buffers | ``buffers``; float32 inside kept modules |
| inputs | ``inputs`` for the floating tensors ``convert_input`` returns |
| loss scale | above 1 when ``compute`` is float16 and ``parameters`` float32 (fp16 mixed), else none |
|  | or 1.0, as ``precision_stats()["loss_scale"]`` reports it |
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from precision_base.audit.collectives import Collective
from precision_base.audit.observe import ModuleSeen, Recorder
from precision_base.audit.report import ROLES, AuditRow
from precision_base.contract import DtypeTable

MAX_NAMES = 2
"""How many module names a row's subject lists before ``+N more``."""


def declares_float8(plugin: Any) -> bool:
    """Whether ``plugin``'s precision runs its matrix products in float8, as its backend's
    [`PluginInfo.extra_matmuls`][precision_base.PluginInfo] declares (a plugin no registry knows declares nothing)."""
    from precision_base.registry import get_entry

    backend, precision = getattr(plugin, "backend", None), str(getattr(plugin, "precision", ""))
    try:
        info = get_entry(str(backend)).info
    except Exception:  # not a registered backend (a test double, a plugin built by hand): no declaration
        return False
    return info is not None and dict(info.extra_matmuls).get(precision) == "float8"


def _either(*dtypes: str) -> str:
    return " or ".join(dict.fromkeys(dtypes))


def _allowed(expected: str) -> set[str]:
    return set(expected.split(" or "))


_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")


def _subject(kind: str, names: list[str]) -> str:
    """``"Linear x15: layers.*.self_attn.q_proj, layers.*.self_attn.k_proj, +6 more"``: block indices become ``*``,
    the prefix every name shares is dropped."""
    patterns = list(dict.fromkeys(_INDEX.sub("*", name) for name in names))
    parts = [p.split(".") for p in patterns]
    shared = 0
    if len(parts) > 1:
        while all(len(p) > shared + 1 and p[shared] == parts[0][shared] for p in parts):
            shared += 1
    short = [".".join(p[shared:]) for p in parts]
    shown = ", ".join(short[:MAX_NAMES]) + (f", +{len(short) - MAX_NAMES} more" if len(short) > MAX_NAMES else "")
    return f"{kind} x{len(names)}: {shown}"


def _counted(counter: Mapping[str, int]) -> str:
    return ", ".join(f"{dtype} x{n}" if len(counter) > 1 else dtype for dtype, n in sorted(counter.items()))


def _module_rows(role: str, entries: Iterable[tuple[str, ModuleSeen, str, set[str]]]) -> list[AuditRow]:
    """Group ``(name, seen, expected, observed)`` by module class, expected and observed: one row per group."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for name, seen, expected, observed in entries:
        if not observed:
            continue
        key = (seen.kind, expected, " + ".join(sorted(observed)))
        groups.setdefault(key, []).append(name)
    rows = []
    for (kind, expected, shown), names in groups.items():
        ok = set(shown.split(" + ")) <= _allowed(expected)
        rows.append(AuditRow(role, _subject(kind, names), expected, shown, ok))
    return rows


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _collective_rows(calls: list[Collective], reduction: str, gathering: str) -> list[AuditRow]:
    groups: dict[tuple[str, str, str, bool], list[Collective]] = {}
    for call in calls:
        compared = call.dtype.is_floating_point and call.numel > 1
        groups.setdefault((call.kind, call.name, str(call.dtype).removeprefix("torch."), compared), []).append(call)
    rows = []
    for (kind, name, dtype, compared), group in sorted(groups.items(), key=lambda kv: (kv[0][0] != "reduction", kv[0])):
        subject = f"{name} x{len(group)}, {_bytes(sum(c.nbytes for c in group))}"
        if not compared:
            what = "scalar" if all(c.numel <= 1 for c in group) else "not floating"
            rows.append(AuditRow(kind, f"{subject} ({what}: not compared)", "-", dtype, None))
            continue
        expected = reduction if kind == "reduction" else gathering
        rows.append(AuditRow(kind, subject, expected, dtype, dtype in _allowed(expected)))
    return rows


def build_rows(
    recorder: Recorder, table: DtypeTable, loss_scale: Optional[float], world_size: int, *, float8: bool = False
) -> list[AuditRow]:
    """The report's rows: every observation of ``recorder`` against ``table``; ``float8``: the precision declares
    float8 matmuls ([`declares_float8`][precision_base.audit.compare.declares_float8])."""
    forward = table.compute if table.autocast is None else _either(table.compute, table.parameters)
    modules = list(recorder.modules.items())
    rows: list[AuditRow] = []

    for seen_opt in recorder.optimizer_seen:
        label = f"{seen_opt.kind} (what it updates)"
        if seen_opt.params:
            ok = set(seen_opt.params) <= {table.parameters}
            rows.append(AuditRow("parameters", label, table.parameters, _counted(seen_opt.params), ok))
        if seen_opt.kept_params:
            ok = set(seen_opt.kept_params) <= {"float32"}
            rows.append(AuditRow("parameters", f"{label}, kept modules", "float32", _counted(seen_opt.kept_params), ok))

    rows += _module_rows(
        "forward parameters", ((n, s, "float32" if s.kept else forward, s.forward_params) for n, s in modules)
    )
    matmuls = [(n, s) for n, s in modules if s.matmul]
    rows += _module_rows(
        "autocast", ((n, s, "off" if s.kept else (table.autocast or "off"), s.autocast) for n, s in matmuls)
    )
    rows += _module_rows("compute", ((n, s, "float32" if s.kept else table.compute, s.outputs) for n, s in matmuls))
    rows += _float8_rows(matmuls, float8)

    for seen_opt in recorder.optimizer_seen:
        if not seen_opt.steps:
            rows.append(AuditRow("gradients", seen_opt.kind, table.parameters, "no optimizer step ran", False))
            continue
        if seen_opt.grads:
            ok = set(seen_opt.grads) <= {table.parameters}
            rows.append(AuditRow("gradients", f"{seen_opt.kind} (what it sees)", table.parameters,
                                 _counted(seen_opt.grads), ok))  # fmt: skip
        if seen_opt.kept_grads:
            ok = set(seen_opt.kept_grads) <= {"float32"}
            rows.append(AuditRow("gradients", f"{seen_opt.kind}, kept modules", "float32",
                                 _counted(seen_opt.kept_grads), ok))  # fmt: skip
        if seen_opt.state:
            allowed = {table.parameters} | ({"float32"} if seen_opt.kept_params else set())
            expected = _either(table.parameters, *sorted(allowed - {table.parameters}))
            ok = set(seen_opt.state) <= allowed
            rows.append(AuditRow("optimizer state", seen_opt.kind, expected, _counted(seen_opt.state), ok))

    if world_size > 1 and not recorder.tap.calls:
        rows.append(AuditRow("reduction", "no collective", table.reduction, "none seen in Python", None))
    # a kept module gathered in float32 is a unit of its own (FSDP2): its collectives run in float32 too; they cannot
    # be told apart from the others' by the collective alone
    kept32 = ("float32",) if any(s.kept and "float32" in s.params for _n, s in modules) else ()
    gathering = _either(*forward.split(" or "), *(("float8_e4m3fn",) if float8 else ()), *kept32)
    rows += _collective_rows(recorder.tap.calls, _either(table.reduction, *kept32), gathering)

    rows += _module_rows("buffers", ((n, s, "float32" if s.kept else table.buffers, s.buffers) for n, s in modules))

    if recorder.inputs:
        ok = set(recorder.inputs) <= {table.inputs}
        rows.append(AuditRow("inputs", "convert_input", table.inputs, _counted(recorder.inputs), ok))
    elif recorder.input_calls:
        rows.append(AuditRow("inputs", "convert_input", table.inputs, "no floating tensor in the batch", None))

    scaled = table.compute == "float16" and table.parameters == "float32"
    expected_scale = "above 1 (dynamic)" if scaled else "none or 1.0"
    observed_scale = "not reported" if loss_scale is None else f"{loss_scale:g}"
    if loss_scale is None:
        scale_ok: Optional[bool] = None if scaled else True
    else:
        scale_ok = loss_scale > 1 if scaled else loss_scale == 1.0
    rows.append(AuditRow("loss scale", "precision_stats()", expected_scale, observed_scale, scale_ok))
    return sorted(rows, key=lambda r: ROLES.index(r.role))


def _float8_rows(matmuls: list[tuple[str, ModuleSeen]], float8: bool) -> list[AuditRow]:
    ran = [(n, s) for n, s in matmuls if s.float8]
    declared = [(n, s) for n, s in matmuls if s.kind.startswith("Float8")]
    rows = _module_rows(
        "float8",
        (
            (n, s, "float8 GEMM", set(s.float8) or {"no float8 GEMM"})
            for n, s in matmuls
            if s.float8 or s.kind.startswith("Float8")
        ),
    )
    # a Float8* layer that ran float8 products is ok whatever the operand dtype is called
    rows = [AuditRow(r.role, r.subject, r.expected, r.observed, "no float8 GEMM" not in r.observed) for r in rows]
    if float8 and not ran:
        count = Counter(s.kind for _, s in matmuls)
        observed = "no layer ran float8 GEMMs (" + ", ".join(f"{k} x{n}" for k, n in sorted(count.items())) + ")"
        rows.append(AuditRow("float8", "converted layers", "float8 GEMMs in at least one layer", observed, False))
    if not float8 and (ran or declared):
        rows = [AuditRow(r.role, r.subject, "-", r.observed, None) for r in rows]
    return rows


def plugin_loss_scale(plugin: Any, strategy: Any) -> Optional[float]:
    """``plugin.precision_stats(strategy)["loss_scale"]`` as a float, or ``None`` when not reported."""
    report = getattr(plugin, "precision_stats", None)
    if report is None:
        return None
    value = dict(report(strategy)).get("loss_scale")
    return None if value is None else float(value)


__all__ = ["build_rows", "declares_float8", "plugin_loss_scale"]
