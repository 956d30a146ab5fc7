"""What the FSDP plugin says about its dtypes: the ``dtypes()`` table and the ``describe()`` facts.

Both are built from the plugin's [`DtypePlan`][precision_fsdp.policy.DtypePlan], its ``keep_fp32`` rules, its scaler and
the feature of its precision ([`precision_base.kit.extra`][]: ``fp8-*`` adds its float8 facts); the plugin's
``dtypes`` and ``describe`` only pass them in.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch
from torch.amp import GradScaler

from precision_base.contract import DtypeTable
from precision_base.kit.extra import ExtraPrecisionFeature
from precision_base.kit.keep_fp32 import KeepFP32
from precision_fsdp import _compat
from precision_fsdp.policy import DtypePlan, dtype_name
from precision_fsdp.sharding.units import FSDPVersion


def dtype_table(
    plan: DtypePlan, keep: KeepFP32, version: FSDPVersion, feature: ExtraPrecisionFeature, plugin: Any
) -> DtypeTable:
    """The plugin's dtype table under FSDP ``version``: the plan's, with a note for the ``keep_fp32`` entries,
    as the feature of the precision leaves it."""
    table = plan.table(version, keep_defaults=tuple(keep.describe_defaults()))
    if keep:
        kept = ", ".join(keep.describe())
        note = f"keep_fp32 ({kept}): float32 parameters, compute, all-gather and reduction; autocast off inside"
        table = dataclasses.replace(table, notes=(*table.notes, note))
    return feature.table(plugin, table)  # type: ignore[no-any-return]


def describe_facts(
    plan: DtypePlan,
    keep: KeepFP32,
    scaler: Any,
    feature: ExtraPrecisionFeature,
    plugin: Any,
    fsdp1_dtypes: DtypeTable,
) -> dict[str, Any]:
    """The FSDP1 and FSDP2 configs, the FSDP1 dtype table (``fsdp1_dtypes``), the feature's facts, ``keep_fp32``
    and the scaler, for ``precision-plugins show``."""
    mp = plan.fsdp1_mixed_precision()
    policy = plan.fsdp2_policy()
    facts: dict[str, Any] = {
        "FSDP1 MixedPrecision (FSDPStrategy)": {
            "param_dtype": _name(mp.param_dtype),
            "reduce_dtype": _name(mp.reduce_dtype),
            "buffer_dtype": _name(mp.buffer_dtype),
        },
        "FSDP1 dtypes": dict(fsdp1_dtypes.rows()),
        "FSDP2 MixedPrecisionPolicy (fully_shard)": {
            "param_dtype": _name(policy.param_dtype),
            "reduce_dtype": _name(_compat.policy_reduce_dtype(policy)),
            "output_dtype": _name(policy.output_dtype),
            "cast_forward_inputs": policy.cast_forward_inputs,
            "cast_forward_inputs (units inside another unit)": plan.fsdp2_policy(nested=True).cast_forward_inputs,
        },
    }
    facts.update(feature.describe(plugin))
    if keep:
        facts["keep_fp32 (FSDP2 only)"] = keep.facts(
            reduction="float32", outputs="float32" if plan.mixed else dtype_name(plan.compute)
        )
    if isinstance(scaler, GradScaler):
        facts["scaler"] = {
            "kind": type(scaler).__name__,
            "device": _compat.scaler_device(scaler),
        } | dict(scaler.state_dict())
    elif scaler is not None:  # a user's own scaler class: only what it shows
        facts["scaler"] = {"kind": type(scaler).__name__, "device": "unknown"}
    return facts


def _name(dtype: Optional[torch.dtype]) -> Optional[str]:
    return None if dtype is None else dtype_name(dtype)


__all__ = ["describe_facts", "dtype_table"]
