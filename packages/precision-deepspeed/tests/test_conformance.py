"""precision-base's conformance kit, run against the installed ``deepspeed`` backend at all five precisions."""

from precision_base.testing import PluginConformance


class TestDeepSpeedConformance(PluginConformance):
    backend = "deepspeed"
