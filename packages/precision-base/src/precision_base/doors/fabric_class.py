"""``precision_base.Fabric``: ``lightning.fabric.Fabric`` plus a ``precision_plugin=`` argument.

Everything but ``precision_plugin`` goes to Lightning's Fabric unchanged; the checks run in ``__init__``. It is
[`PrecisionPluginFabricMixin`][precision_base.PrecisionPluginFabricMixin] over ``lightning.fabric.Fabric``.
"""

from __future__ import annotations

import lightning.fabric as lf

from precision_base.doors.fabric import PrecisionPluginFabricMixin


class Fabric(PrecisionPluginFabricMixin, lf.Fabric):
    """``lightning.fabric.Fabric`` with one more keyword argument, ``precision_plugin``.

    Args:
        precision_plugin: a plugin name ``"<backend>:<precision>"`` (e.g. ``"fsdp:bf16-mixed"``) resolved to the
            backend's Fabric plugin class, or an instance of one. ``strategy="auto"`` becomes the backend's Fabric
            strategy; a strategy that cannot work with the plugin is refused here, saying what to pass.
        **kwargs: every argument of ``lightning.fabric.Fabric``.
    """


__all__ = ["Fabric"]
