"""precision-base's conformance kit for the Fabric class of the installed ``fsdp`` backend, all five precisions."""

from precision_base.testing.fabric_conformance import FabricPluginConformance


class TestFSDPFabricConformance(FabricPluginConformance):
    backend = "fsdp"
