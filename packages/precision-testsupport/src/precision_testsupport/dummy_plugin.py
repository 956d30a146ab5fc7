"""DummyPrecision: a plain-PyTorch precision plugin for non-sharded strategies, enough to exercise precision-base.

It follows the plugin rule: all code in :class:`DummyPrecisionImpl` (no Lightning base), and :class:`DummyPrecision`
only lists the bases, so ``precision_base.namespaces.for_namespace`` builds it for ``pytorch_lightning`` too.

Its entry is :data:`precision_testsupport.dummy.INFO`. Imports torch and Lightning. Precisions: ``32-true``
(everything float32), ``bf16-true`` (module, inputs and init in bfloat16) and ``bf16-mixed`` (float32 storage,
bfloat16 autocast on the trainer's device type).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Union

import lightning.pytorch as pl
import torch
from typing_extensions import override

from precision_base import DtypeTable, PrecisionPlugin
from precision_base.kit.casting import cast_floating, default_dtype
from precision_base.kit.plugin_support import registered_strategy_class, wrong_strategy_error
from precision_base.namespaces import namespace_of

if TYPE_CHECKING:
    from lightning.pytorch.plugins.precision import Precision as _LightningBase
else:
    _LightningBase = object  # at run time the concrete class supplies Lightning's Precision of its namespace

__all__ = ["DummyPrecision", "DummyPrecisionImpl"]

_LOW = {"32-true": torch.float32, "bf16-true": torch.bfloat16, "bf16-mixed": torch.float32}


class DummyPrecisionImpl(PrecisionPlugin, _LightningBase):  # type: ignore[misc]
    """The dummy backend's code; refuses sharded strategies in ``configure_strategy``."""

    backend = "dummy"
    precisions = ("32-true", "bf16-true", "bf16-mixed")

    def __init__(self, precision: str, *, note: str = "") -> None:
        self.precision = self.canonical_precision(precision)
        self.note = note

    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.to(_LOW[self.precision]) if self.precision == "bf16-true" else module

    @override
    def convert_input(self, data: Any) -> Any:
        return cast_floating(data, _LOW[self.precision])

    @override
    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return default_dtype(_LOW[self.precision])

    @override
    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return default_dtype(_LOW[self.precision])

    @override
    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision == "bf16-mixed":
            return torch.autocast(self.device_type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def dtypes(self) -> DtypeTable:
        low = "bfloat16" if self.precision != "32-true" else "float32"
        store = "bfloat16" if self.precision == "bf16-true" else "float32"
        return DtypeTable(
            parameters=store,
            compute=low,
            reduction=store,
            buffers=store,
            inputs=store,
            init=store,
            autocast="bfloat16" if self.precision == "bf16-mixed" else None,
        )

    def configure_strategy(self, strategy: Union[str, Any], *, accelerator: Any, devices: Any) -> Any:
        strategies: Any = self.lightning.strategies
        sharded = (strategies.FSDPStrategy, strategies.DeepSpeedStrategy, strategies.ModelParallelStrategy)
        cls = (
            registered_strategy_class(strategy, namespace_of(self) or "")
            if isinstance(strategy, str)
            else type(strategy)
        )
        if cls is not None and issubclass(cls, sharded):
            raise wrong_strategy_error(
                self.spec, strategy, "The dummy plugin cannot shard: pass strategy='auto' or 'ddp'."
            )
        return strategy


class DummyPrecision(DummyPrecisionImpl, pl.plugins.precision.Precision):  # type: ignore[misc]
    """The dummy backend's plugin for ``lightning.pytorch``."""
