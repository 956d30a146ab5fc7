"""``PrecisionMonitor``: a Lightning callback that logs what the precision plugin reports about the numerics.

Every ``logging_interval`` optimizer steps it asks the Trainer's precision plugin for
[`precision_stats`][precision_base.contract.PrecisionPlugin.precision_stats] and hands the numbers to every logger of
the Trainer
(``logger.log_metrics``), under the prefix ``precision/``: e.g. ``precision/loss_scale``,
``precision/skipped_steps``, ``precision/nonfinite_grad_steps``, ``precision/grad_norm``. A plugin that reports
nothing (any plugin without ``precision_stats``, Lightning's built-ins included) makes the monitor log nothing.

The class is written once as [`PrecisionMonitorImpl`][precision_base.callbacks.monitor.PrecisionMonitorImpl] (no
Lightning base) and built per namespace: ``precision_base.PrecisionMonitor`` for ``lightning.pytorch``,
``precision_base.pytorch_lightning.PrecisionMonitor`` for ``pytorch_lightning``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import lightning.pytorch as pl
from typing_extensions import override

if TYPE_CHECKING:
    _CallbackBase = pl.Callback
else:
    _CallbackBase = object

STAT_KEYS: Final[tuple[str, ...]] = ("loss_scale", "skipped_steps", "nonfinite_grad_steps", "grad_norm")
"""The keys a plugin's ``precision_stats`` may report (others are logged too, under the same prefix)."""

PREFIX: Final[str] = "precision/"
"""What every logged name starts with."""


class PrecisionMonitorImpl(_CallbackBase):
    """Log the precision plugin's numbers (float32 Python floats) every ``logging_interval`` optimizer steps.

    Args:
        logging_interval: log after every this many optimizer steps (``trainer.global_step``), a positive int.
        prefix: what each logged name starts with (default ``"precision/"``).

    Raises:
        ValueError: ``logging_interval`` is not a positive int.
        MisconfigurationException: (Lightning's, of the Trainer's namespace) at setup, when the Trainer has no
            logger: there is nowhere to log to.
    """

    def __init__(self, logging_interval: int = 1, prefix: str = PREFIX) -> None:
        super().__init__()
        if isinstance(logging_interval, bool) or not isinstance(logging_interval, int) or logging_interval < 1:
            raise ValueError(f"logging_interval must be a positive int (optimizer steps), got {logging_interval!r}")
        self.logging_interval = logging_interval
        self.prefix = prefix
        self._last_logged = -1

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Refuse a Trainer without a logger, as Lightning's ``LearningRateMonitor`` does."""
        if stage == "fit" and not trainer.loggers:
            from precision_base.namespaces import lightning_root, namespace_of

            root = lightning_root(namespace_of(trainer) or "lightning.pytorch")
            raise root.utilities.exceptions.MisconfigurationException(
                "Cannot use `PrecisionMonitor` callback with `Trainer` that has no logger. Pass a logger, e.g. "
                "Trainer(logger=CSVLogger('logs')), or remove the callback."
            )

    def stats(self, trainer: Any) -> dict[str, float]:
        """The plugin's numbers, prefixed, as floats; empty when the plugin reports nothing."""
        plugin = trainer.strategy.precision_plugin
        report = getattr(plugin, "precision_stats", None)
        if report is None:
            return {}
        values: Mapping[str, Any] = report(trainer.strategy)
        return {self.prefix + key: float(value) for key, value in values.items()}

    @override
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After an optimizer step whose number is a multiple of ``logging_interval``: log to every logger."""
        step = int(trainer.global_step)
        if step == self._last_logged or step % self.logging_interval != 0 or step == 0:
            return
        metrics = self.stats(trainer)
        if not metrics:
            return
        self._last_logged = step
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)


class PrecisionMonitor(PrecisionMonitorImpl, pl.Callback):
    """[`PrecisionMonitorImpl`][precision_base.callbacks.monitor.PrecisionMonitorImpl] for ``lightning.pytorch.Trainer``
    (``precision_base.PrecisionMonitor``).

    Example::

        trainer = precision_base.Trainer(
            precision_plugin="fsdp:16-mixed", logger=CSVLogger("logs"), callbacks=[PrecisionMonitor(10)]
        )
    """


__all__ = ["STAT_KEYS", "PrecisionMonitor", "PrecisionMonitorImpl"]
