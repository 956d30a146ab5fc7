"""The dummy backend's entry: a test-only plugin that exercises precision-base (torch-free to import).

Register it in-process for a test with ``precision_base.registered(INFO, distribution=..., version=...)``; its
plugin class, :class:`precision_testsupport.dummy_plugin.DummyPrecision`, imports torch and Lightning when
resolved. precision-base's installed-plugin tests build it into the ``precision-dummy`` wheel
(``tests/fixtures/dummy_plugin``).
"""

from precision_base import PluginInfo

__all__ = ["INFO"]

INFO = PluginInfo(
    backend="dummy",
    precisions=("32-true", "bf16-true", "bf16-mixed"),
    plugin_class="precision_testsupport.dummy_plugin:DummyPrecision",
    strategy="any non-sharded Lightning strategy (single device or DDP)",
    summary="test-only plugin",
)
"""The dummy plugin's entry: backend ``dummy``."""
