"""Float16 on a CPU that only emulates it: the one fact behind ``precision-plugins recommend`` ruling ``16-*`` out on
such a CPU and the warning every plugin gives once when it finds itself set to compute float16 there.

torch runs float16 matmuls natively only on CPUs with AMX-FP16; elsewhere it converts to float32 and back around each
operation, so a float16 step is slower than float32 and several times slower than bfloat16 where the CPU computes
bfloat16 natively (AVX512-BF16 or AMX). Importing this module imports no torch.
"""

from __future__ import annotations

from typing import Any, Final, Optional

CPU_FP16_EMULATED: Final = "this CPU has no native float16 (AMX-FP16): torch emulates it, slower than float32"
"""Why a float16 precision is ruled out on a CPU without AMX-FP16."""


def cpu_half_warning(precision: str, native: Optional[tuple[bool, bool]] = None) -> Optional[str]:
    """What to say when ``precision`` computes in float16 on a CPU that emulates float16: the reason, and the
    precision ``recommend`` would pick instead (``bf16-mixed`` where the CPU computes bfloat16 natively, else
    ``32-true``). ``None`` for other precisions or a CPU with AMX-FP16. ``native``: ``(bf16, fp16)``, read from
    this CPU when not given (that imports torch)."""
    if not precision.startswith("16-"):
        return None
    if native is None:
        from precision_base._compat import cpu_native_half

        native = cpu_native_half()
    cpu_bf16, cpu_fp16 = native
    if cpu_fp16:
        return None
    instead = "bf16-mixed" if cpu_bf16 else "32-true"
    why = "it computes bfloat16 natively" if cpu_bf16 else "it has no native bfloat16 either"
    return (
        f"{precision} computes in float16, and {CPU_FP16_EMULATED}, so every step runs several times slower than it "
        "needs to. "
        f"Use '{instead}' here ({why}; `precision-plugins recommend` says the same), or train {precision} on a GPU."
    )


def warn_once_on_cpu(plugin: Any) -> None:
    """Once per plugin, when it is set to compute on a CPU: the warning of
    [`cpu_half_warning`][precision_base.kit.cpu_half.cpu_half_warning] for its precision, a
    [`PrecisionPluginWarning`][precision_base.PrecisionPluginWarning] on rank 0 (Lightning's ``rank_zero_warn`` of
    the plugin's namespace). Called where a plugin learns its device (``connect``, Fabric's first inputs)."""
    if plugin.__dict__.get("_cpu_half_checked") or getattr(plugin, "device_type", None) != "cpu":
        return
    plugin.__dict__["_cpu_half_checked"] = True
    message = cpu_half_warning(str(getattr(plugin, "precision", "")))
    if message is None:
        return
    from precision_base.errors import PrecisionPluginWarning

    spec = getattr(plugin, "spec", None) or getattr(plugin, "precision", "")
    plugin._rank_zero_warn(f"{spec}: {message}", category=PrecisionPluginWarning)
