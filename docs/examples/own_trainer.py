"""Your own Trainer subclass takes ``precision_plugin=`` through the mixin, in either
Lightning namespace."""

import lightning
from quick_fsdp import Model

from precision_base import PrecisionPluginTrainerMixin


class MyTrainer(PrecisionPluginTrainerMixin, lightning.Trainer):
    """The mixin comes first: it turns ``precision_plugin=`` into what Lightning's
    Trainer accepts."""


if __name__ == "__main__":
    trainer = MyTrainer(precision_plugin="fsdp:bf16-mixed", max_steps=2, logger=False)
    trainer.fit(Model())
    print(type(trainer).__name__, trainer.precision_plugin.spec)
