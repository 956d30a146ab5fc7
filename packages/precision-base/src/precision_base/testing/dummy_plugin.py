"""DummyPrecision: a plain-PyTorch precision plugin for non-sharded strategies, enough to exercise precision-base.

Its entry is :data:`precision_base.testing.dummy.INFO`. Imports torch and Lightning. Precisions: ``32-true``
(everything float32), ``bf16-true`` (module, inputs and init in bfloat16) and ``bf16-mixed`` (float32 storage,
bfloat16 autocast on the trainer's device type).
"""

from __future__ import annotations

import contextlib
from typing import Any, Union

import torch
from lightning.pytorch.plugins.precision import Precision
from typing_extensions import override

from precision_base import DtypeTable, PrecisionPlugin, TrainerConfigurationError
from precision_base.casting import cast_floating, default_dtype

__all__ = ["DummyPrecision"]

_LOW = {"32-true": torch.float32, "bf16-true": torch.bfloat16, "bf16-mixed": torch.float32}


class DummyPrecision(PrecisionPlugin, Precision):  # type: ignore[misc]
    """The dummy backend's plugin; refuses sharded strategies in ``configure_strategy``."""

    backend = "dummy"
    precisions = ("32-true", "bf16-true", "bf16-mixed")

    def __init__(self, precision: str, *, note: str = "") -> None:
        if precision not in self.precisions:
            raise ValueError(f"DummyPrecision does not support {precision!r}; use one of {self.precisions}")
        self.precision = precision
        self.note = note

    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.to(_LOW[self.precision]) if self.precision == "bf16-true" else module

    @override
    def convert_input(self, data: Any) -> Any:
        return cast_floating(data, _LOW[self.precision])

    @override
    def convert_output(self, data: Any) -> Any:
        return cast_floating(data, torch.get_default_dtype())

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
        name = strategy if isinstance(strategy, str) else type(strategy).__name__.lower()
        if name.startswith(("fsdp", "deepspeed", "modelparallel")):
            raise TrainerConfigurationError(
                f"the dummy plugin cannot shard: strategy={strategy!r} is not supported; pass strategy='auto' or 'ddp'"
            )
        return strategy
