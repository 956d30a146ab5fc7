"""The plugin class of the ``"cast"`` example backend: stores and computes everything in
half precision.

This file is the worked example of the docs page "Write your own precision plugin". It
is tested by ``test_cast_plugin.py`` (one folder up), through precision-base's
conformance kit."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.plugins.precision import HalfPrecision
from lightning_utilities.core.apply_func import apply_to_collection

from cast.info import INFO
from precision_base import (
    DtypeTable,
    PrecisionPlugin,
    UnsupportedPrecisionError,
    normalize_precision,
)

_DTYPE_NAME = {"16-true": "float16", "bf16-true": "bfloat16"}


# 2. The plugin class, imported only when a user asks for "cast:...". The
#    precision-base mixin comes first (it hooks Lightning's connect), then a Lightning
#    Precision.
class CastPrecision(PrecisionPlugin, HalfPrecision):
    """Casts the module, its inputs and every tensor created during init or forward to
    one half dtype.

    Args:
        precision: ``"16-true"`` (float16) or ``"bf16-true"`` (bfloat16); Lightning's
            aliases are accepted.
    """

    backend = "cast"
    precisions = INFO.precisions

    def __init__(self, precision: str = "bf16-true") -> None:
        # raises InvalidSpecError, a ValueError, for a bad name
        canonical = normalize_precision(precision)
        if canonical not in self.precisions:
            raise UnsupportedPrecisionError(
                f"precision backend 'cast' does not offer {canonical!r}; it offers "
                + ", ".join(self.precisions)
            )
        super().__init__(canonical)  # type: ignore[arg-type]

    # Lightning's HalfPrecision leaves outputs in half precision; the conformance kit
    # asks for them back in the default dtype (what a loss function or a metric
    # expects), so this is the one hook we add.
    def convert_output(self, data: Any) -> Any:
        default = torch.get_default_dtype()
        return apply_to_collection(
            data, torch.Tensor, lambda t: t.to(default) if t.is_floating_point() else t
        )

    # 3. What each thing's dtype is: `precision-plugins show` prints this, and the
    #    conformance kit checks it against what convert_input, convert_module, the init
    #    contexts and forward_context really produce.
    def dtypes(self) -> DtypeTable:
        name = _DTYPE_NAME[self.precision]
        return DtypeTable(
            parameters=name,
            compute=name,
            reduction=name,
            buffers=name,
            inputs=name,
            init=name,
            autocast=None,
            notes=("no fp32 master weights: small updates can vanish in fp16/bf16",),
        )
