"""Steps that never update are never silent: the ``max_skipped_steps`` watch both plugins use.

A step is *skipped* when the gradients held inf or NaN and the optimizer did not run: fp16's loss scaler does this
(``GradScaler`` under FSDP ``16-mixed``, DeepSpeed's dynamic loss scaler in its fp16 mode), and so do the finite-
gradient checks (FSDP's ``check_finite_grads=True``, DeepSpeed's bf16 ``check_grad_overflow``). A model whose
gradients are never finite (a NaN in the weights, an exploding loss) would skip every step while training seems to
run. [`OverflowWatch`][precision_base.kit.overflow.OverflowWatch] counts skipped steps in a row: it warns once
(``RuntimeWarning``) at half the limit and
raises [`OverflowStormError`][precision_base.errors.OverflowStormError] at the limit. Both plugins default to
[`DEFAULT_MAX_SKIPPED_STEPS`][precision_base.kit.overflow.DEFAULT_MAX_SKIPPED_STEPS]; ``None``
switches the watch off.

Pure Python (no torch): ``import precision_base`` stays light. How a plugin learns that a step was skipped is its
own (FSDP: the scaler's scale or its finite check; DeepSpeed: the engine's ``was_step_applied()``).
"""

from __future__ import annotations

import warnings
from typing import Optional

from precision_base.errors import OverflowStormError

DEFAULT_MAX_SKIPPED_STEPS = 50
"""The default of every plugin's ``max_skipped_steps``: stop after this many skipped optimizer steps in a row."""


def check_limit(limit: object) -> Optional[int]:
    """``limit`` if it is a valid ``max_skipped_steps`` (an int >= 1, or ``None``).

    Raises:
        ValueError: anything else (``bool`` included), naming the value.
    """
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"max_skipped_steps must be a positive int or None, got {limit!r}")
    return limit


class OverflowWatch:
    """Counts consecutive skipped optimizer steps and stops training at the limit.

    Args:
        limit: raise after this many consecutive skipped steps; ``None`` never raises nor warns.
        error: the exception class raised at the limit:
            [`OverflowStormError`][precision_base.errors.OverflowStormError] or a subclass of it.

    Raises:
        ValueError: ``limit`` is not a positive int or ``None``.
    """

    def __init__(self, limit: Optional[int], error: type[OverflowStormError] = OverflowStormError) -> None:
        self.limit = check_limit(limit)
        self.error = error
        self.skipped_in_a_row = 0
        self.skipped_total = 0
        """Steps skipped since the watch was made (cumulative)."""
        self._warned = False

    def after_step(self, skipped: bool, scale: Optional[float], spec: str) -> None:
        """Record one optimizer step (``scale``: the loss scale in effect after it, ``None`` without loss scaling).

        Warns (``RuntimeWarning``, once per run of skipped steps) at half the limit.

        Raises:
            OverflowStormError: (or ``self.error``) the limit of consecutive skipped steps is reached.
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
            raise self.error(
                f"{what}, so training stopped: the model no longer learns. Check the loss and the weights for "
                f"inf/NaN, lower the learning rate{alternative}. (max_skipped_steps={self.limit}; None never stops.)"
            )
        if not self._warned and self.skipped_in_a_row >= max(1, self.limit // 2):
            self._warned = True
            warnings.warn(f"{what}; training stops at {self.limit} (max_skipped_steps).", RuntimeWarning, stacklevel=2)

    def after_scaled_step(self, before: float, after: float, spec: str) -> None:
        """Record one optimizer step through a loss scaler: skipped when the scale fell (``after < before``, the
        scaler backed off for inf/NaN gradients); ``after`` is the scale now. Raises and warns as
        [`after_step`][precision_base.kit.overflow.OverflowWatch.after_step]."""
        self.after_step(after < before, after, spec)

    def stats(self, at_least: float = 0.0) -> dict[str, float]:
        """The watch's part of a plugin's ``precision_stats``: see
        [`skipped_stats`][precision_base.kit.overflow.skipped_stats] (the count is the larger of
        [`skipped_total`][precision_base.kit.overflow.OverflowWatch.skipped_total] and ``at_least``, e.g. the count the
        backend keeps itself)."""
        return skipped_stats(max(float(self.skipped_total), float(at_least)))


def skipped_stats(skipped: float) -> dict[str, float]:
    """``{"skipped_steps": skipped, "nonfinite_grad_steps": skipped}``: what [`precision_base.PrecisionMonitor`][]
    logs for steps skipped for inf/NaN gradients (the same count twice: every such step is skipped)."""
    return {"skipped_steps": float(skipped), "nonfinite_grad_steps": float(skipped)}


__all__ = ["DEFAULT_MAX_SKIPPED_STEPS", "OverflowWatch", "check_limit", "skipped_stats"]
