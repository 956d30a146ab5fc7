"""Switching an FSDP2 run away from fp8 (``fp8-tensorwise``, ``fp8-rowwise``, ``mxfp8-rceil``) during training.

Called by [`precision_fsdp.schedule`][] between optimizer steps, before the FSDP2 policies are updated. What torchao
did at conversion is undone in place, keeping every object the optimizer and FSDP2 hold:

* the sharded DTensor ``Parameter`` of each converted weight stays the same object (the optimizer's state stays
  attached to it); only torchao's weight wrapper around its local float32 shard is taken off
  (``WeightWithDynamicFloat8CastTensor`` of the module swap's float8 all-gather, or the weight-wrapper API's
  ``TrainingWeightWrapperBaseTensor``), so FSDP2 all-gathers the shard in the new policy's ``param_dtype`` again;
* each ``Float8Linear`` module becomes a ``torch.nn.Linear`` again: the same module object (its FSDP2 unit, hooks
  and parameters unchanged), of class ``torch.nn.Linear`` (FSDP2's ``FSDPLinear`` when it is a unit of its own), without
  the attributes ``Float8Linear`` added. Its forward is then ``torch.nn.Linear``'s: the autocast dtype's matmul.

The switch *to* fp8 stays refused ([`precision_fsdp.schedule`][]): the plugin of the run before it is not an fp8 one,
so it has no ``fp8_emulate`` / ``fp8_filter`` to convert with, and the layers to convert would have to be chosen on
the sharded model.
"""

from __future__ import annotations

from typing import Optional

import torch

from precision_fsdp import _compat
from precision_fsdp.float8.config import is_fp8


def problem(current: str, precision: str) -> Optional[str]:
    """Why a run cannot switch from the fp8 precision ``current`` to ``precision``; ``None`` when it can: to any
    precision without fp8 that stores float32 parameters (``bf16-mixed``, ``16-mixed``, ``32-true``; the storage
    rule is [`precision_fsdp.schedule.problem`][]'s)."""
    if is_fp8(precision):
        return (
            f"switching from {current!r} to {precision!r} during a run is not supported: torchao converts the Linear "
            "layers to float8 before FSDP2 shards them; train a run under it from the start instead"
        )
    return None


def restore_linears(model: torch.nn.Module) -> list[str]:
    """Undo torchao's float8 conversion of the FSDP2-sharded ``model`` in place (see the module docstring); return
    the qualified names of the modules whose weights or class changed. Call it between optimizer steps, then give
    every unit the new policy ([`precision_fsdp.schedule.update_policies`][] resets FSDP2's all-gather buffers).

    Raises:
        RuntimeError: a parameter is unsharded (inside forward/backward), or a weight wrapper is on a parameter
            that FSDP2 does not manage (not sharded: nothing here can take it off in place).
    """
    wrapped = _wrapped(model)
    for module in model.modules():
        if isinstance(module, _compat.FSDPModule):
            for fsdp_param in _compat.fsdp_params(module):
                _compat.unwrap_fsdp_param(fsdp_param)
    left = _wrapped(model)
    if left:
        raise RuntimeError(
            f"the float8 weight wrappers of {left[:8]} are on parameters that FSDP2 does not shard; switching away "
            "from fp8 works on FSDP2-sharded models only (shard the whole model, e.g. strategy='auto')"
        )
    changed = {name.rpartition(".")[0] for name in wrapped}
    float8_linear = _compat.float8_linear_class()
    if float8_linear is not None:
        for name, module in model.named_modules():
            if isinstance(module, float8_linear):
                module.__class__ = _compat.plain_class(module, float8_linear, torch.nn.Linear)
                for attr in _compat.FLOAT8_LINEAR_ATTRS:
                    module.__dict__.pop(attr, None)
                changed.add(name)
    return sorted(changed)


def _wrapped(model: torch.nn.Module) -> list[str]:
    return [name for name, p in model.named_parameters() if _compat.wrapped_inner(_compat.local_tensor(p)) is not None]
