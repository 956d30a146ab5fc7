"""Watching for an overflow storm: optimizer steps skipped for inf/NaN gradients, one after another.

``16-mixed``: ``GradScaler`` skips a step with inf/NaN gradients and halves its scale. A model whose gradients
overflow at any scale (a NaN in the weights, an exploding loss) would skip every step forever while the scale sinks
towards zero and training silently stops learning. The watch warns once at half the limit and raises at the limit.

Other precisions, when asked (``check_finite_grads=True``, like DeepSpeed's bf16 ``check_grad_overflow``): a step
whose gradients hold inf/NaN on any rank is skipped on every rank (its gradients are dropped before the optimizer
runs), and the same watch counts the skipped steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

import torch

from precision_base import PrecisionPluginError
from precision_fsdp._compat import DTensor


class OverflowStormError(PrecisionPluginError, RuntimeError):
    """Too many optimizer steps in a row were skipped for inf/NaN gradients under ``16-mixed``."""


class OverflowWatch:
    """Counts consecutive skipped steps.

    Args:
        limit: raise after this many consecutive skipped steps; ``None`` never raises (nor warns).

    Raises:
        ValueError: ``limit`` is not a positive int or ``None``.
    """

    def __init__(self, limit: Optional[int]) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"max_skipped_steps must be a positive int or None, got {limit!r}")
        self.limit = limit
        self.skipped_in_a_row = 0
        self.skipped_total = 0
        """Steps skipped since the plugin was made (cumulative; what ``precision_stats`` reports)."""
        self._warned = False

    def after_step(self, skipped: bool, scale: Optional[float], spec: str) -> None:
        """Record one optimizer step (``scale``: the loss scale after it, ``None`` without loss scaling).

        Raises:
            OverflowStormError: the limit of consecutive skipped steps is reached.
        """
        if not skipped:
            self.skipped_in_a_row = 0
            self._warned = False
            return
        self.skipped_in_a_row += 1
        self.skipped_total += 1
        if self.limit is None:
            return
        what = (
            f"{spec}: {self.skipped_in_a_row} optimizer steps in a row were skipped because the gradients held "
            "inf or NaN"
        )
        if scale is not None:
            what += f" at every loss scale tried (scale now {scale:g})"
        if self.skipped_in_a_row >= self.limit:
            alternative = ", or train in bf16-mixed or 32-true" if scale is not None else ""
            raise OverflowStormError(
                f"{what}, so training stopped: the model no longer learns. Check the loss and the weights for "
                f"inf/NaN, lower the learning rate{alternative}. (max_skipped_steps={self.limit}; None never stops.)"
            )
        if not self._warned and self.skipped_in_a_row >= max(1, self.limit // 2):
            self._warned = True
            import warnings

            warnings.warn(f"{what}; training stops at {self.limit} (max_skipped_steps).", RuntimeWarning, stacklevel=2)


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
