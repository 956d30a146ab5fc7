"""precision-base's conformance kit, run against the installed ``deepspeed`` backend at all five precisions."""

from precision_base.testing import PluginConformance


class TestDeepSpeedConformance(PluginConformance):
    backend = "deepspeed"
    module_cast_by_strategy = True  # under *-mixed DeepSpeed's engine, not the plugin, casts the module to fp16/bf16
