"""precision-base's conformance kit, run against the installed ``fsdp`` backend for all five precisions."""

from precision_base.testing import PluginConformance


class TestFSDPConformance(PluginConformance):
    backend = "fsdp"
    audit_fit = True  # the kit's strict PrecisionAudit of a real 2-process fit
    audit_fit_precisions = ("bf16-mixed",)  # one launch; tests-integration/test_audit_fits.py sweeps every precision
