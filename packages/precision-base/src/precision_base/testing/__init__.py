"""Testing support: the conformance kit any precision plugin runs against itself.

Usage, in a plugin package's tests::

    from precision_base.testing import FabricPluginConformance, PluginConformance

    class TestMyPluginConformance(PluginConformance):
        backend = "mybackend"          # the entry-point name the plugin registers

Every test runs once per precision the plugin declares. A plugin that is not installed can be checked too,
by also setting ``plugin_info`` (its [`PluginInfo`][precision_base.PluginInfo]) and ``plugin_class``; the kit then
registers it in-process for the duration of the class.

Install it with its test dependency: ``pip install precision-base[testing]`` (brings pytest). The kit is a
base class for test classes, not a pytest plugin: nothing registers itself with pytest. Beside the kit:
[`precision_base.testing.ranks`][] (the launcher of the opt-in audited 2-process fit, ``audit_fit = True``, whose
rank code is [`precision_base.testing.audit_fit`][]). This repository's own test helpers (toy models, wheels,
the dummy plugin) are in the unpublished workspace package ``precision-testsupport``, not in this package.
"""

from precision_base.kit.lazy import lazy_exports

__all__ = ["FabricPluginConformance", "PluginConformance"]

# lazy: the kit needs pytest, the launcher beside it must not
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "PluginConformance": "precision_base.testing.conformance",
        "FabricPluginConformance": "precision_base.testing.fabric_conformance",
    },
)
