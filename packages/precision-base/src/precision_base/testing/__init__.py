"""The conformance kit: a pytest test class any precision plugin runs against itself.

Usage, in a plugin package's tests::

    from precision_base.testing import PluginConformance

    class TestMyPluginConformance(PluginConformance):
        backend = "mybackend"          # the entry-point name the plugin registers

Every test runs once per precision the plugin declares. A plugin that is not installed can be checked too,
by also setting ``plugin_info`` (its :class:`~precision_base.PluginInfo`) and ``plugin_class``; the kit then
registers it in-process for the duration of the class.
"""

from precision_base.testing.conformance import PluginConformance

__all__ = ["PluginConformance"]
