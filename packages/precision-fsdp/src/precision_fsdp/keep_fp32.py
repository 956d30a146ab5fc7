"""Per-module precision: modules named by ``keep_fp32=`` keep float32 parameters and compute in float32.

``FSDPPrecision("bf16-mixed", keep_fp32=("lm_head", torch.nn.LayerNorm))``: every module whose qualified name matches
a pattern, or which is an instance of a listed class, is a *kept* module. For a kept module (and everything inside
it):

* parameters are stored in float32 (also under ``*-true``, where the rest is fp16/bf16);
* FSDP2 shards it as its own unit with its own ``MixedPrecisionPolicy(param_dtype=float32, reduce_dtype=float32)``,
  so it is all-gathered and its gradients are reduce-scattered in float32;
* ``torch.autocast`` is disabled inside its forward and its floating inputs are cast to float32, so its matmuls run
  in float32;
* its floating outputs stay float32 under ``*-mixed`` (autocast casts them where the next op needs); under ``*-true``
  they are cast back to the precision's dtype, because the modules that follow have fp16/bf16 weights and no autocast.

Patterns match the end of a module's qualified name, dot-separated, with ``fnmatch`` wildcards: ``"lm_head"``
matches ``lm_head`` and ``model.lm_head``; ``"layers.*.norm"`` matches ``model.layers.3.norm``. Names are relative to
the LightningModule when [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy] shards by its default policy (it calls
``plugin.mark_keep_fp32(model)`` first); in a ``configure_model`` of your own, call
``self.trainer.precision_plugin.mark_keep_fp32(self)`` before ``fully_shard``, or names are relative to the module
passed to ``fully_shard``. A kept module sharded with another policy is refused at setup, never silently ignored.

FSDP1 (``FullyShardedDataParallel``) applies one ``MixedPrecision`` per wrapped unit and autocast per model; it has
no public per-module float32 override, so ``keep_fp32`` with FSDP1 is refused
([`KeepFP32Error`][precision_fsdp.errors.KeepFP32Error]).

The rules (``KeepFP32``: which modules a ``keep_fp32`` entry or a default rule keeps, their float32 forward) are
[`precision_base.kit.keep_fp32`][]'s, shared with the DeepSpeed plugin; this module adds the FSDP cast around them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["cast_except_kept_"]


def cast_except_kept_(module: torch.nn.Module, dtype: torch.dtype, kept: Sequence[torch.nn.Module]) -> None:
    """Cast, in place, floating parameters and buffers of ``module`` to ``dtype``, except inside ``kept`` modules
    (cast to float32 instead). Sharded (DTensor) parameters are left alone."""
    inside = {id(m) for k in kept for m in k.modules()}
    for sub in module.modules():
        target = torch.float32 if id(sub) in inside else dtype
        for param in sub.parameters(recurse=False):
            if type(param.data).__name__ != "DTensor" and param.is_floating_point() and param.dtype != target:
                param.data = param.data.to(target)
        for name, buf in list(sub.named_buffers(recurse=False)):
            if buf.is_floating_point() and buf.dtype != target:
                setattr(sub, name, buf.to(target))
