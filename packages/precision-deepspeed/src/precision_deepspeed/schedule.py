"""Why a DeepSpeed run cannot change precision mid-run ([`precision_base.PrecisionSchedule`][] asks).

DeepSpeed fixes a run's precision inside ``deepspeed.initialize``, when it builds the engine (deepspeed 0.19.8,
``deepspeed/runtime/engine.py``): ``DeepSpeedEngine._configure_distributed_model`` casts the module's parameters to
the config's fp16/bf16 dtype, and ``DeepSpeedEngine._configure_optimizer`` wraps the optimizer once for that dtype:
``FP16_Optimizer`` / ``BF16_Optimizer``, or the ZeRO optimizer built for the ``model_dtype`` of ``get_data_types()``
(stage 1/2 flattens the half-precision parameters into ``bit16_groups`` and keeps float32 master partitions in
``single_partition_of_fp32_groups``). The engine has no call that changes either afterwards, and the fp16/bf16 choice
also picks the loss scaler. A switch would mean a new engine and the optimizer state moved into it by hand; even a
checkpoint does not carry it across, since the optimizer state is written in the layout of its precision mode
([`precision_deepspeed.resume`][] refuses a resume under another mode).
"""

from __future__ import annotations

from typing import Final, Optional

REASON: Final[str] = (
    "DeepSpeed fixes the precision when deepspeed.initialize builds the engine: it casts the parameters to the "
    "config's fp16/bf16 dtype (DeepSpeedEngine._configure_distributed_model) and wraps the optimizer once for that "
    "dtype (DeepSpeedEngine._configure_optimizer: FP16_Optimizer, BF16_Optimizer or the ZeRO optimizer with its "
    "half-precision parameter groups and float32 master partitions), and the engine cannot change either later. "
    "Train under one DeepSpeed precision per run (a new run under another one can load the weights only: the "
    "optimizer state is saved in its precision mode's layout), or use FSDP2 (fsdp:*), which switches mid-run"
)
"""What [`problem`][precision_deepspeed.schedule.problem] answers for every target."""


def problem(current: str, precision: str) -> Optional[str]:
    """Why a DeepSpeed run under ``current`` cannot switch to ``precision``: always
    [`REASON`][precision_deepspeed.schedule.REASON] (``None`` only for
    a switch to the same precision)."""
    return None if precision == current else REASON
