"""Testing support: the conformance kit any precision plugin runs against itself, and shared test helpers.

Usage, in a plugin package's tests::

    from precision_base.testing import FabricPluginConformance, PluginConformance

    class TestMyPluginConformance(PluginConformance):
        backend = "mybackend"          # the entry-point name the plugin registers

Every test runs once per precision the plugin declares. A plugin that is not installed can be checked too,
by also setting ``plugin_info`` (its :class:`~precision_base.PluginInfo`) and ``plugin_class``; the kit then
registers it in-process for the duration of the class.

Helpers for the project's own tests, benchmarks and examples, each imported explicitly (none is imported by
``import precision_base``): :mod:`precision_base.testing.models` (toy LightningModules and data),
:mod:`precision_base.testing.launch` (N real ranks with a gloo process group),
:mod:`precision_base.testing.wheels` (real wheels of small plugin distributions, fresh venvs) and
:mod:`precision_base.testing.dummy` / :mod:`precision_base.testing.dummy_plugin` (the test plugin, backend ``dummy``).
"""

from typing import Any

__all__ = ["FabricPluginConformance", "PluginConformance"]


def __getattr__(name: str) -> Any:
    # lazy: the kit needs pytest, the helper modules beside it must not
    if name == "PluginConformance":
        from precision_base.testing.conformance import PluginConformance

        return PluginConformance
    if name == "FabricPluginConformance":
        from precision_base.testing.fabric_conformance import FabricPluginConformance

        return FabricPluginConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
