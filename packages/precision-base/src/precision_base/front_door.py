"""What turns ``precision_plugin=`` (and plugin names in ``plugins=``) into arguments a Lightning Trainer accepts.

Two public forms, for both Lightning namespaces (``lightning.pytorch`` and ``pytorch_lightning``):

* [`PrecisionPluginTrainerMixin`][precision_base.front_door.PrecisionPluginTrainerMixin], listed before a Lightning
  ``Trainer`` class in the bases of a Trainer
  class (``precision_base.Trainer`` and ``precision_base.pytorch_lightning.Trainer`` are exactly that). It finds
  the namespace from the class it is mixed into, honours ``PL_<CLASS>_<ARGUMENT>`` environment defaults the way
  Lightning's Trainer does (``PL_TRAINER_PRECISION_PLUGIN`` included), and calls
  [`prepare_trainer_kwargs`][precision_base.front_door.prepare_trainer_kwargs].
* [`prepare_trainer_kwargs`][precision_base.front_door.prepare_trainer_kwargs], for a Trainer subclass that writes its
  own ``__init__``.

The code lives in [`precision_base.doors.trainer`][] (and, for what both doors share,
[`precision_base.doors.combine`][]); this module keeps the public names where they were. Importing it imports no
Lightning module.
"""

from __future__ import annotations

from precision_base.doors.trainer import PrecisionPluginTrainerMixin, prepare_trainer_kwargs

__all__ = ["PrecisionPluginTrainerMixin", "prepare_trainer_kwargs"]
