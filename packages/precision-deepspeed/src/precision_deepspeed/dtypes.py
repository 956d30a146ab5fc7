"""What [`DeepSpeedPrecision.dtypes`][precision_deepspeed.implementation.DeepSpeedPrecisionImpl.dtypes] and ``describe``
say: the dtype table of each DeepSpeed mode, and where
the modules ``keep_fp32`` keeps compute and reduce.

Functions of the plugin instance (its ``precision``, ``torch_autocast``, ``keep_fp32`` and
``autocast_lower_precision_safe_modules``).
"""

from __future__ import annotations

from typing import Any

from precision_base import DtypeTable
from precision_base.kit.plugin_support import PRECISION_DTYPE_NAMES
from precision_deepspeed import _compat
from precision_deepspeed.keep_fp32 import reduced_in_half


def dtype_table(plugin: Any) -> DtypeTable:
    """The dtype of parameters, compute, gradient reduction, buffers and inputs under this plugin."""
    if plugin.precision == "32-true":
        return DtypeTable(
            parameters="float32", compute="float32", reduction="float32", buffers="float32",
            inputs="float32", init="float32", autocast=None,
        )  # fmt: skip
    half = PRECISION_DTYPE_NAMES[plugin.precision]
    if plugin.torch_autocast:
        return DtypeTable(
            parameters="float32", compute=half, reduction=half, buffers="float32", inputs="float32",
            init="float32", autocast=half,
            notes=(
                "DeepSpeed's torch_autocast mode: the module stays float32; forward runs under torch.autocast",
                f"reduction: {half} for parameters of lower-precision-safe modules (Linear, Conv by default), "
                "float32 for the others",
            ) + ((
                f"keep_fp32 ({', '.join(plugin.keep_fp32.describe())}): float32 compute and outputs, autocast off "
                f"inside; reduction: {kept_reduction(plugin)}",
            ) if plugin.keep_fp32 else ()) + default_keep_notes(plugin),
        )  # fmt: skip
    true = plugin.precision.endswith("-true")
    buffers = half if true or not _compat.deepspeed_keeps_buffer_dtype() else "float32"
    return DtypeTable(
        parameters="float32", compute=half, reduction=half, buffers=buffers, inputs=half,
        init=half if true else "float32", autocast=None,
        notes=(
            f"parameters: DeepSpeed's optimizer updates a float32 master copy; the module computes with a {half} "
            f"copy ({'cast by convert_module' if true else 'cast by deepspeed.initialize'})",
            "no torch.autocast: every op runs in the module's dtype (DeepSpeed's native "
            + ("fp16 mode with dynamic loss scaling)" if half == "float16" else "bf16 mode)"),
            *default_keep_notes(plugin),
        ),
    )  # fmt: skip


def kept_reduction(plugin: Any) -> str:
    """The gradient-reduction dtype of kept modules, as text (DeepSpeed picks it by module class)."""
    half = PRECISION_DTYPE_NAMES[plugin.precision]
    on_list = reduced_in_half(plugin.keep_fp32, plugin.autocast_lower_precision_safe_modules)
    if plugin.keep_fp32.patterns:
        return (
            f"float32, but {half} for parameters of kept modules whose exact class is on DeepSpeed's "
            "lower-precision-safe list (autocast_lower_precision_safe_modules; default Linear, Conv1d/2d/3d)"
        )
    if on_list:
        return f"{half} for {', '.join(on_list)} (on DeepSpeed's lower-precision-safe list), float32 otherwise"
    return "float32"


def default_keep_notes(plugin: Any) -> tuple[str, ...]:
    """The default float32 rules in effect and what DeepSpeed's mode does for the modules they keep."""
    half = PRECISION_DTYPE_NAMES[plugin.precision]
    if plugin.torch_autocast:
        how = f"parameters float32 (as everywhere in this mode); reduction: {kept_reduction(plugin)}"
    else:
        buffers = "running statistics float32" if plugin.precision.endswith("-mixed") else f"buffers {half}"
        how = (
            f"their parameters are stored {half} like all others (deepspeed.initialize casts every parameter and "
            f"ZeRO flattens them into {half} groups; master float32 in the optimizer) and computed in float32 "
            f"from a float32 copy of each, taken inside the forward; inputs cast to float32, {buffers}; "
            f"outputs cast back to {half}; gradients reduced in {half}"
        )
    return tuple(f"default: {rule}; under DeepSpeed: {how}" for rule in plugin.keep_fp32.describe_defaults())


__all__ = ["default_keep_notes", "dtype_table", "kept_reduction"]
