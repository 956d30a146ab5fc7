"""Per-module precision under DeepSpeed: ``keep_fp32=`` with ``torch_autocast=True``.

``DeepSpeedPrecision("bf16-mixed", torch_autocast=True, keep_fp32=("lm_head", torch.nn.LayerNorm))``: modules matched
as [`precision_base.kit.keep_fp32`][] says (qualified-name patterns relative to the LightningModule, or classes) are
*kept*. In DeepSpeed's ``torch_autocast`` mode the module's parameters stay float32 anyway; for a kept module (and
everything inside it) ``torch.autocast`` is off and floating inputs are cast to float32, so it computes in float32,
and its float32 outputs reach the rest of the model, where autocast casts them as each op needs.

Gradient reduction: DeepSpeed picks the communication dtype of a parameter by the *exact class* of its module (its
lower-precision-safe list, ``autocast_lower_precision_safe_modules``, default ``Linear`` and ``Conv1d/2d/3d``): a kept
module of such a class still has its gradients reduced in the autocast dtype. To reduce them in float32, pass an
``autocast_lower_precision_safe_modules`` list without that class; naming the same class in both is refused.

DeepSpeed's native fp16/bf16 modes (``torch_autocast=False``, the default) cast the whole module to the half dtype
inside ``deepspeed.initialize`` and flatten every parameter into half-precision groups: they cannot keep some
modules in float32, so ``keep_fp32`` there is refused at construction, naming ``torch_autocast=True``.

**Kept by default under ``*-mixed``** (both modes), by the rule the FSDP plugin follows too
([`precision_base.kit.keep_fp32.KeepFP32`][] with ``running_stats=True`` and ``hf_dtype``): layers whose running
statistics are float buffers (``BatchNorm*``, ``SyncBatchNorm``, tracked ``InstanceNorm*``) and the modules a Hugging
Face model declares float32 (``_keep_in_fp32_modules_strict``; also ``_keep_in_fp32_modules`` under ``16-mixed``).
DeepSpeed leaves buffers in their dtype (``data_types.buffer_dtype`` unset) but casts parameters: a BatchNorm would
get fp16/bf16 weights with float32 running statistics and CPU ``batch_norm`` refuses the mix ("expected scalar type
BFloat16 but found Float"). So:

* ``torch_autocast=True``: the float32 forward above (parameters are float32 already);
* native mode: the module *computes* in float32: floating inputs are cast to float32, each parameter inside is
  read as a float32 copy of DeepSpeed's fp16/bf16 working copy for the forward
  ([`install_fp32_compute`][precision_deepspeed.keep_fp32.install_fp32_compute]; its
  gradient flows back to that copy, the optimizer keeps the float32 master), the running statistics stay and are
  updated in float32, and the floating outputs are cast back to the half dtype for the modules that follow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Optional, Union

import torch

from precision_base.kit.keep_fp32 import KeepFP32, KeepSpec, install_fp32_forward, is_kept
from precision_base.kit.plugin_support import PRECISION_DTYPE_NAMES
from precision_deepspeed import _compat
from precision_deepspeed.errors import KeepFP32Error

#: DeepSpeed's default lower-precision-safe classes (its ``LOWER_PRECISION_SAFE_MODULES``), by import name.
DEFAULT_SAFE_MODULES = ("torch.nn.Linear", "torch.nn.Conv1d", "torch.nn.Conv2d", "torch.nn.Conv3d")


def parse_keep_fp32(
    entries: Union[KeepSpec, Iterable[KeepSpec], None],
    *,
    precision: str,
    torch_autocast: bool,
    safe_modules: Optional[Sequence[str]],
    defaults: bool = True,
) -> KeepFP32:
    """Parse ``keep_fp32`` for a DeepSpeed plugin and check it can be honoured.

    ``defaults`` (``keep_fp32_defaults``) turns on the shared default rules: running-statistics layers under
    ``*-mixed``, Hugging Face's declared float32 modules under every fp16/bf16 precision (as the FSDP plugin).

    Raises:
        TypeError: an entry is neither a name pattern nor a ``torch.nn.Module`` subclass.
        KeepFP32Error: ``keep_fp32`` without ``torch_autocast=True``, or a kept class also named in
            ``autocast_lower_precision_safe_modules``.
    """
    half = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(PRECISION_DTYPE_NAMES[precision])
    keep = KeepFP32(
        entries,
        running_stats=defaults and precision.endswith("-mixed"),
        hf_dtype=half if defaults else None,
    )
    if not keep:
        return keep
    alternative = (
        "DeepSpeedPrecision('bf16-mixed', torch_autocast=True, keep_fp32=...), e.g. "
        "precision_base.resolve('deepspeed:bf16-mixed', torch_autocast=True, keep_fp32=...)"
    )
    entries_text = f"keep_fp32=({', '.join(keep.describe())})"
    if precision == "32-true":
        raise KeepFP32Error(
            f"{entries_text} would change nothing under 'deepspeed:32-true': every module already stores and computes "
            f"in float32. Drop keep_fp32, or train the rest in a lower precision with {alternative}."
        )
    if not torch_autocast:
        raise KeepFP32Error(
            f"{entries_text} cannot be honoured under 'deepspeed:{precision}' (DeepSpeed's native fp16/bf16 mode): "
            "deepspeed.initialize casts the whole module to one dtype and flattens all parameters into one "
            f"precision, so no module can keep float32 parameters and compute. Use {alternative}."
        )
    named = set(safe_modules) if safe_modules is not None else set()
    both = [f"{c.__module__}.{c.__qualname__}" for c in keep.classes if _import_names(c) & named]
    if both:
        raise KeepFP32Error(
            f"{', '.join(both)} is both in keep_fp32 (float32) and in autocast_lower_precision_safe_modules (gradients "
            "reduced in the autocast dtype); remove it from one of them."
        )
    return keep


def _import_names(cls: type[torch.nn.Module]) -> set[str]:
    """The names a class can be given as in DeepSpeed's list: ``torch.nn.Linear`` and its defining module's path."""
    names = {f"{cls.__module__}.{cls.__qualname__}"}
    if cls.__module__.startswith("torch.nn.modules.") and getattr(torch.nn, cls.__qualname__, None) is cls:
        names.add(f"torch.nn.{cls.__qualname__}")
    return names


def install_kept(
    keep: KeepFP32, root: torch.nn.Module, device_type: Callable[[], str], native: Optional[torch.dtype] = None
) -> list[str]:
    """Install the float32 forward on every outermost kept module under ``root``; the kept modules' names.

    ``native``: the half dtype of DeepSpeed's native mode (its parameters are cast to it): install
    [`install_fp32_compute`][precision_deepspeed.keep_fp32.install_fp32_compute] instead; ``None`` (torch_autocast
    mode): the autocast-off float32 forward.
    """
    found = keep.kept(root)
    for _name, module, entry in found:
        if native is None:
            install_fp32_forward(module, entry, device_type, None)
        else:
            install_fp32_compute(module, entry, device_type, native)
    return [name for name, _module, _entry in found]


def install_fp32_compute(
    module: torch.nn.Module, entry: str, device_type: Callable[[], str], out_dtype: torch.dtype
) -> None:
    """Make ``module`` (and everything inside it) compute in float32 although DeepSpeed casts its parameters.

    ``module`` gets the shared float32 forward ([`precision_base.kit.keep_fp32.install_fp32_forward`][]: floating
    inputs cast to float32, autocast off) with its floating outputs cast to ``out_dtype``; every module inside it
    (``module`` included) that owns floating parameters runs its ``forward`` with float32 copies of them
    (`precision_deepspeed._compat.forward_with_fp32_parameters`: taken inside ``forward``, after DeepSpeed's
    hooks have gathered ZeRO-3 parameters). Idempotent.
    """
    if is_kept(module):
        return
    for sub in module.modules():
        if any(p.is_floating_point() for p in sub.parameters(recurse=False)):
            _compat.forward_with_fp32_parameters(sub)
    install_fp32_forward(module, entry, device_type, out_dtype)


def reduced_in_half(keep: KeepFP32, safe_modules: Optional[Sequence[str]]) -> list[str]:
    """Kept classes whose gradients DeepSpeed still reduces in the autocast dtype (they are on its safe list)."""
    named = set(safe_modules) if safe_modules is not None else set(DEFAULT_SAFE_MODULES)
    return [f"{c.__module__}.{c.__qualname__}" for c in keep.classes if _import_names(c) & named]
