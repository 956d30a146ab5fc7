"""``precision_base.pytorch_lightning.Trainer``: ``pytorch_lightning.Trainer`` plus a ``precision_plugin=`` argument.

The same door as [`precision_base.Trainer`][], for code that imports the ``pytorch_lightning`` namespace: plugin
names resolve to the same plugin classes, built for ``pytorch_lightning`` by
[`precision_base.namespaces.for_namespace`][].
"""

from __future__ import annotations

import pytorch_lightning as pl

from precision_base.audit import PrecisionAudit as _PrecisionAudit
from precision_base.callbacks.monitor import PrecisionMonitor as _PrecisionMonitor
from precision_base.callbacks.schedule import PrecisionSchedule as _PrecisionSchedule
from precision_base.doors.trainer import PrecisionPluginTrainerMixin
from precision_base.namespaces import for_namespace


class Trainer(PrecisionPluginTrainerMixin, pl.Trainer):
    """``pytorch_lightning.Trainer`` with one more keyword argument, ``precision_plugin``.

    Args:
        precision_plugin: a plugin name ``"<backend>:<precision>"`` (e.g. ``"fsdp:bf16-mixed"``) resolved through
            the installed plugins and built for ``pytorch_lightning``, or a ``pytorch_lightning`` ``Precision``
            instance. ``None`` (the default) leaves the Trainer exactly as Lightning's, except that plugin names in
            ``plugins=`` are resolved. ``PL_TRAINER_PRECISION_PLUGIN`` sets it from the environment.
        **kwargs: every argument of ``pytorch_lightning.Trainer``.
    """


PrecisionMonitor = for_namespace(_PrecisionMonitor, "pytorch_lightning")
"""[`precision_base.PrecisionMonitor`][] built for ``pytorch_lightning.Trainer``."""

PrecisionAudit = for_namespace(_PrecisionAudit, "pytorch_lightning")
"""[`precision_base.PrecisionAudit`][] built for ``pytorch_lightning.Trainer``."""

PrecisionSchedule = for_namespace(_PrecisionSchedule, "pytorch_lightning")
"""[`precision_base.PrecisionSchedule`][] built for ``pytorch_lightning.Trainer``."""

__all__ = ["PrecisionAudit", "PrecisionMonitor", "PrecisionSchedule", "Trainer"]
