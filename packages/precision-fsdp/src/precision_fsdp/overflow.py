"""Watching ``16-mixed`` for an overflow storm: optimizer steps skipped for inf/NaN gradients, one after another.

``GradScaler`` skips a step with inf/NaN gradients and halves its scale. A model whose gradients overflow at any
scale (a NaN in the weights, an exploding loss) would skip every step forever while the scale sinks towards zero and
training silently stops learning. The watch warns once at half the limit and raises at the limit.
"""

from __future__ import annotations

from typing import Optional

from precision_base import PrecisionPluginError


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
        self._warned = False

    def after_step(self, skipped: bool, scale: float, spec: str) -> None:
        """Record one optimizer step.

        Raises:
            OverflowStormError: the limit of consecutive skipped steps is reached.
        """
        if not skipped:
            self.skipped_in_a_row = 0
            self._warned = False
            return
        self.skipped_in_a_row += 1
        if self.limit is None:
            return
        what = (
            f"{spec}: {self.skipped_in_a_row} optimizer steps in a row were skipped because the gradients held inf "
            f"or NaN at every loss scale tried (scale now {scale:g})"
        )
        if self.skipped_in_a_row >= self.limit:
            raise OverflowStormError(
                f"{what}, so training stopped: the model no longer learns. Check the loss and the weights for "
                "inf/NaN, lower the learning rate, or train in bf16-mixed or 32-true. (max_skipped_steps="
                f"{self.limit}; None never stops.)"
            )
        if not self._warned and self.skipped_in_a_row >= max(1, self.limit // 2):
            self._warned = True
            import warnings

            warnings.warn(f"{what}; training stops at {self.limit} (max_skipped_steps).", RuntimeWarning, stacklevel=2)
