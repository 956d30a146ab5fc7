"""Which dtype each thing gets under each precision, and the FSDP1 / FSDP2 configs built from that.

Everything dtype-related in this package is derived here, from two inputs: the precision name and the
optional ``reduce_dtype`` choice. The plugin, the dtype table, FSDP1's ``MixedPrecision`` and FSDP2's
``MixedPrecisionPolicy`` all read the same [`DtypePlan`][precision_fsdp.policy.DtypePlan], so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch

from precision_base import DtypeTable
from precision_base.kit.plugin_support import precision_dtype
from precision_fsdp._compat import MixedPrecision, MixedPrecisionPolicy
from precision_fsdp.sharding.units import FSDPVersion

_DTYPE_NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "16": torch.float16,
    "half": torch.float16,
}

REDUCE_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)
"""Dtypes accepted for gradient reduction."""


def parse_dtype(value: Union[str, torch.dtype], *, what: str = "reduce_dtype") -> torch.dtype:
    """Turn ``torch.float32`` / ``"float32"`` / ``"fp32"`` / ``"bf16"`` ... into one of
    [`REDUCE_DTYPES`][precision_fsdp.policy.REDUCE_DTYPES].

    Raises:
        ValueError: the value names no floating dtype FSDP can reduce in.
    """
    dtype = _DTYPE_NAMES.get(value.strip().lower()) if isinstance(value, str) else value
    if not isinstance(dtype, torch.dtype) or dtype not in REDUCE_DTYPES:
        allowed = ", ".join(str(d).removeprefix("torch.") for d in REDUCE_DTYPES)
        raise ValueError(f"{what}={value!r} is not supported; use one of {allowed} (a torch.dtype or its name)")
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class DtypePlan:
    """The dtypes one precision (plus the ``reduce_dtype`` choice) gives each thing.

    Attributes:
        precision: the canonical precision name.
        storage: dtype of the sharded parameters (what the optimizer updates) and of tensors created under
            the init contexts: fp32 for ``32-true`` and ``*-mixed``; fp16 / bf16 for ``*-true``.
        compute: dtype of the unsharded parameters during forward/backward (FSDP's ``param_dtype``) and of
            autocast's matmuls: fp32, fp16 or bf16.
        reduce: dtype gradients are reduce-scattered in. Default: fp32 for ``*-mixed`` and ``32-true``, the
            storage dtype for ``16-true`` / ``bf16-true``; any choice of fp32/bf16/fp16 is honoured.
        inputs: dtype ``convert_input`` casts floating inputs to: fp32 for ``*-mixed`` (autocast and FSDP's
            input cast take it from there), the storage dtype otherwise.
        autocast: dtype of ``torch.autocast`` in ``forward_context`` (``*-mixed`` only), else ``None``.
    """

    precision: str
    storage: torch.dtype
    compute: torch.dtype
    reduce: torch.dtype
    inputs: torch.dtype
    autocast: Optional[torch.dtype]

    @classmethod
    def for_precision(cls, precision: str, reduce_dtype: Optional[torch.dtype] = None) -> DtypePlan:
        low = precision_dtype(precision)
        mixed = precision.endswith("-mixed")
        storage = torch.float32 if mixed else low
        return cls(
            precision=precision,
            storage=storage,
            compute=low,
            reduce=reduce_dtype if reduce_dtype is not None else (torch.float32 if mixed else storage),
            inputs=storage,
            autocast=low if mixed else None,
        )

    @property
    def mixed(self) -> bool:
        return self.autocast is not None

    def buffers(self, version: FSDPVersion) -> torch.dtype:
        """Dtype of module buffers during compute.

        FSDP1 casts buffers to ``MixedPrecision.buffer_dtype``, which is the compute dtype here (as in Lightning's
        built-in). FSDP2 never casts buffers: they keep the dtype they were created in, the storage dtype.
        """
        return self.compute if version == 1 else self.storage

    def table(self, version: FSDPVersion, keep_defaults: tuple[str, ...] = ()) -> DtypeTable:
        """The [`DtypeTable`][precision_base.DtypeTable] under FSDP1 (``version=1``) or FSDP2 (``version=2``).

        Args:
            version: 1 or 2.
            keep_defaults: the default float32 rules the plugin applies (``KeepFP32.describe_defaults()``); FSDP2
                notes say each; FSDP1 notes say what FSDP1 does instead.
        """
        notes = [
            f"FSDP{version}"
            + (
                " (FullyShardedDataParallel via FSDPStrategy)"
                if version == 1
                else " (fully_shard via ModelParallelStrategy)"
            )
        ]
        if self.mixed:
            notes.append(
                f"sharded parameters stay {dtype_name(self.storage)}; FSDP all-gathers them as "
                f"{dtype_name(self.compute)} for forward/backward, and autocast runs on the strategy's device"
            )
        if self.mixed:
            outer = "the root" if version == 1 else "the outermost units (each FSDP2 root)"
            notes.append(
                f"forward inputs: {outer} cast floating inputs to {dtype_name(self.compute)}; units inside another "
                "unit take theirs as given, so float32 tensors a model passes to its blocks (rotary cos/sin tables) "
                "stay float32"
            )
        if self.reduce != self.compute:
            kept = "" if self.reduce == self.storage else f", then stored as {dtype_name(self.storage)}"
            notes.append(f"gradients are reduce-scattered in {dtype_name(self.reduce)}{kept}")
        if self.precision == "16-mixed":
            notes.append("loss scaling: " + ("ShardedGradScaler" if version == 1 else "torch.amp.GradScaler"))
        if version == 2:
            notes.append("buffers are never cast by FSDP2")
            notes.extend(
                f"{rule} (FSDP2: each its own unit with a float32 MixedPrecisionPolicy; keep_fp32_defaults=False "
                "turns this off)"
                for rule in keep_defaults
            )
            notes.append(
                "FSDP2Strategy's default units (auto_wrap_policy=None): blocks, i.e. the classes a model declares in "
                "_no_split_modules, else repeated same-class children of ModuleList/Sequential; tied parameters "
                "stay in one unit; the rest goes to the root"
            )
        elif self.mixed and keep_defaults:
            notes.append(
                "FSDP1: BatchNorm layers are FSDP-wrapped separately with mixed precision off by torch's own "
                "MixedPrecision (when FSDPStrategy has an auto_wrap_policy); the plugin's other float32 defaults "
                "apply to FSDP2 only"
            )
        return DtypeTable(
            parameters=dtype_name(self.storage),
            compute=dtype_name(self.compute),
            reduction=dtype_name(self.reduce),
            buffers=dtype_name(self.buffers(version)),
            inputs=dtype_name(self.inputs),
            init=dtype_name(self.storage),
            autocast=dtype_name(self.autocast) if self.autocast is not None else None,
            notes=tuple(notes),
        )

    def fsdp1_mixed_precision(self) -> MixedPrecision:
        """FSDP1's ``MixedPrecision``: ``param_dtype`` = compute, ``reduce_dtype`` = reduce, ``buffer_dtype`` =
        compute. Other fields keep torch's defaults (root inputs are cast to ``param_dtype``)."""
        return MixedPrecision(param_dtype=self.compute, reduce_dtype=self.reduce, buffer_dtype=self.buffers(1))

    def fsdp2_policy(self, *, nested: bool = False) -> MixedPrecisionPolicy:
        """FSDP2's ``MixedPrecisionPolicy``: ``param_dtype`` = compute, ``reduce_dtype`` = reduce, outputs left in
        the compute dtype, and floating forward inputs cast to ``param_dtype``, except, under ``*-mixed``, by a
        ``nested`` unit (one that runs inside another unit's forward).

        Under ``*-mixed`` only the outermost units cast the model's inputs, as FSDP1's ``MixedPrecision`` casts
        only the root's: autocast computes in the low dtype inside, and what a unit passes to the units inside it
        (a decoder's float32 rotary cos/sin tables) arrives in the dtype it was made in, as under Lightning's
        built-in plugins. Under ``*-true`` every unit casts (the whole model computes in the low dtype, without
        autocast)."""
        cast = not (nested and self.mixed)
        return MixedPrecisionPolicy(param_dtype=self.compute, reduce_dtype=self.reduce, cast_forward_inputs=cast)
