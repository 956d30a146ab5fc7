"""``precision_base.Trainer``: ``lightning.Trainer`` (``lightning.pytorch``) plus a ``precision_plugin=`` argument.

Everything but ``precision_plugin`` goes to Lightning's Trainer unchanged. All checks run in ``__init__``, before
Lightning launches any process. The ``pytorch_lightning`` counterpart is [`precision_base.pytorch_lightning.Trainer`][];
both are [`PrecisionPluginTrainerMixin`][precision_base.PrecisionPluginTrainerMixin] over the namespace's
Trainer.
"""

from __future__ import annotations

import lightning.pytorch as pl

from precision_base.doors.trainer import PrecisionPluginTrainerMixin


class Trainer(PrecisionPluginTrainerMixin, pl.Trainer):
    """``lightning.pytorch.Trainer`` with one more keyword argument, ``precision_plugin``.

    Args:
        precision_plugin: a plugin name ``"<backend>:<precision>"`` (e.g. ``"fsdp:bf16-mixed"``) resolved through
            the installed plugins, or a ``lightning.pytorch`` ``Precision`` instance. ``None`` (the default) leaves
            the Trainer exactly as Lightning's, except that plugin names in ``plugins=`` are resolved.
            ``PL_TRAINER_PRECISION_PLUGIN`` sets it from the environment, as ``PL_TRAINER_<ARGUMENT>`` sets every
            other argument.
        **kwargs: every argument of ``lightning.pytorch.Trainer``.
    """


__all__ = ["Trainer"]
