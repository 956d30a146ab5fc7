"""precision-base's conformance kit, run against the installed ``deepspeed`` backend at all five precisions."""

from precision_base.testing import PluginConformance


class TestDeepSpeedConformance(PluginConformance):
    backend = "deepspeed"
    audit_fit = True  # the kit's strict PrecisionAudit of a real 2-process fit
    audit_fit_precisions = ("bf16-mixed",)  # one launch; tests-integration/test_audit_fits.py sweeps every precision
    module_cast_by_strategy = True  # under *-mixed DeepSpeed's engine, not the plugin, casts the module to fp16/bf16
