"""precision-base's conformance kit, run against the installed ``fsdp`` backend for all five precisions."""

from precision_base.testing import PluginConformance


class TestFSDPConformance(PluginConformance):
    backend = "fsdp"
