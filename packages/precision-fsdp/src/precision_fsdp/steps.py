"""Optimizer-step bookkeeping of the FSDP plugin: skipped steps, ``check_finite_grads`` and ``max_skipped_steps``.

One [`StepWatch`][precision_fsdp.steps.StepWatch] per plugin, used by both doors' ``optimizer_step`` (the Trainer's with
Lightning's closure, Fabric's without one) and by ``precision_stats``. The counting itself (the limit, its default, the
warning at half of it and [`OverflowStormError`][precision_base.OverflowStormError]) is
[`precision_base.kit.overflow.OverflowWatch`][]'s, shared with the DeepSpeed plugin; how a step is known to be skipped
is FSDP's:

* ``16-mixed``: the loss scaler skips a step with inf/NaN gradients and lowers its scale: a step after which the
  scale fell was skipped;
* other precisions with ``check_finite_grads=True``: a step whose gradients hold inf/NaN on any rank
  ([`precision_fsdp.steps.grads_finite`][], one all-reduce) is skipped on every rank: its gradients are dropped
  before the optimizer runs (parameters without gradients are not stepped).

Other precisions are not watched (nothing skips their steps).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Optional

import torch

from precision_base.kit.overflow import OverflowWatch
from precision_fsdp._compat import DTensor
from precision_fsdp.scaler import loss_scale


class StepWatch:
    """Whether and how the plugin's optimizer steps are watched for runs of skipped steps.

    Args:
        precision: the plugin's canonical precision (``16-mixed`` is watched through its scaler).
        limit: ``max_skipped_steps`` (``None`` never stops).
        check_finite: ``check_finite_grads``.
    """

    def __init__(self, precision: str, limit: Optional[int], check_finite: bool) -> None:
        self.check_finite = bool(check_finite)
        self.limit = limit  # a precision schedule's switch to 16-mixed watches with it
        self.overflow: Optional[OverflowWatch] = None
        self.follow(precision)

    def follow(self, precision: str) -> None:
        """Watch as ``precision`` needs: a watch for ``16-mixed`` or ``check_finite_grads`` (the one in use is kept,
        with its counts), none otherwise."""
        if not (precision == "16-mixed" or self.check_finite):
            self.overflow = None
        elif self.overflow is None:
            self.overflow = OverflowWatch(self.limit)

    def trainer_step(
        self,
        step: Callable[[Callable[[], Any]], Any],
        optimizer: Any,
        closure: Callable[[], Any],
        scaler: Any,
        spec: str,
    ) -> Any:
        """Run the Trainer's ``step(closure)`` (Lightning's ``optimizer_step``), watched. With ``check_finite_grads``
        the closure is wrapped: after it ran (forward, backward) the gradients are checked and dropped if not finite,
        before the hooks, clipping and the optimizer.

        Raises:
            precision_base.errors.OverflowStormError: ``max_skipped_steps`` steps in a row were skipped.
        """
        if self.check_finite and self.overflow is not None:
            skipped = [False]

            def checked_closure() -> Any:
                result = closure()
                skipped[0] = drop_nonfinite_grads(optimizer)
                return result

            output = step(checked_closure)
            self.overflow.after_step(skipped[0], None, spec)
            return output
        return self.scaled_step(lambda: step(closure), scaler, spec)

    def fabric_step(self, step: Callable[[], Any], optimizer: Any, scaler: Any, spec: str) -> Any:
        """Run Fabric's ``step()`` (the backward ran before it), watched; with ``check_finite_grads`` the gradients
        are checked (and dropped if not finite) first.

        Raises:
            precision_base.errors.OverflowStormError: ``max_skipped_steps`` steps in a row were skipped.
        """
        if self.check_finite and self.overflow is not None:
            skipped = drop_nonfinite_grads(optimizer)
            output = step()
            self.overflow.after_step(skipped, None, spec)
            return output
        return self.scaled_step(step, scaler, spec)

    def scaled_step(self, step: Callable[[], Any], scaler: Any, spec: str) -> Any:
        """Run ``step`` (an optimizer step through ``scaler``, if any); a step after which the scale fell counts
        towards ``max_skipped_steps``."""
        before = loss_scale(scaler)  # None: unknown (a user's scaler without get_scale): the step is not counted
        output = step()
        if self.overflow is not None and before is not None:
            after = loss_scale(scaler)  # once: on a GPU each get_scale() waits for the device (.item())
            if after is not None:
                self.overflow.after_scaled_step(before, after, spec)
        return output

    def stats(self) -> dict[str, float]:
        """``skipped_steps`` and ``nonfinite_grad_steps`` (cumulative; the same steps: here every step with inf/NaN
        gradients is skipped) while watched, else nothing."""
        return self.overflow.stats() if self.overflow is not None else {}


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


def drop_nonfinite_grads(optimizer: Any) -> bool:
    """``check_finite_grads``: whether any rank's gradients hold inf/NaN; if so they are dropped, so that the
    optimizer steps no parameter (parameters without gradients are not stepped)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if grads_finite(params):
        return False
    optimizer.zero_grad(set_to_none=True)
    return True


__all__ = ["StepWatch", "drop_nonfinite_grads", "grads_finite"]
