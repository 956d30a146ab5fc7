"""A plugin instance with options: ``resolve`` passes them to the plugin's
constructor."""

from quick_fsdp import Model

from precision_base import Trainer, resolve

if __name__ == "__main__":
    # FSDPPrecision("16-mixed", init_scale=1024.0)
    plugin = resolve("fsdp:16-mixed", init_scale=2.0**10)
    trainer = Trainer(precision_plugin=plugin, max_steps=2, logger=False)
    trainer.fit(Model())
    print(plugin.spec, type(plugin).__name__)
