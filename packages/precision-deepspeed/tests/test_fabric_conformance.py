"""precision-base's conformance kit for the Fabric class of the installed ``deepspeed`` backend, all five precisions."""

from precision_base.testing.fabric_conformance import FabricPluginConformance


class TestDeepSpeedFabricConformance(FabricPluginConformance):
    backend = "deepspeed"
    module_cast_by_strategy = True  # under *-mixed DeepSpeed's engine, not the plugin, casts the module to fp16/bf16
