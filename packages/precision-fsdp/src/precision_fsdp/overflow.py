"""Watching for an overflow storm: optimizer steps skipped for inf/NaN gradients, one after another.

``16-mixed``: ``GradScaler`` skips a step with inf/NaN gradients and halves its scale. A model whose gradients
overflow at any scale (a NaN in the weights, an exploding loss) would skip every step forever while the scale sinks
towards zero and training silently stops learning. The watch warns once at half the limit and raises at the limit.

Other precisions, when asked (``check_finite_grads=True``, like DeepSpeed's bf16 ``check_grad_overflow``): a step
whose gradients hold inf/NaN on any rank is skipped on every rank (its gradients are dropped before the optimizer
runs), and the same watch counts the skipped steps.

The watch, its default and its error are shared with the DeepSpeed plugin ([`precision_base.overflow`][]);
``OverflowStormError`` and ``OverflowWatch`` stay importable from here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

import torch

from precision_base.overflow import DEFAULT_MAX_SKIPPED_STEPS, OverflowStormError, OverflowWatch
from precision_fsdp._compat import DTensor

__all__ = ["DEFAULT_MAX_SKIPPED_STEPS", "OverflowStormError", "OverflowWatch", "grads_finite"]


def grads_finite(params: Iterable[torch.Tensor]) -> bool:
    """Whether every gradient of ``params`` is finite on every rank (one all-reduce when a process group exists).

    FSDP2 gradients are DTensors: each rank checks its own shard, and the flag is reduced over the default group.
    """
    finite = torch.ones((), dtype=torch.int32)
    device: Optional[torch.device] = None
    for p in params:
        if p.grad is None:
            continue
        grad = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
        device = grad.device
        if not bool(torch.isfinite(grad).all()):
            finite.zero_()
            break
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        if torch.distributed.get_backend() == "nccl" and device is not None:
            finite = finite.to(device)
        torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
    return bool(finite.item())
