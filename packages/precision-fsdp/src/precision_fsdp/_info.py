"""The entry-point object of precision-fsdp: plain data, imports no torch.

The requirements (torch, Lightning) are not repeated here: the registry reads them from this distribution's own
metadata (``Requires-Dist``, from pyproject.toml) before it imports the plugin class.
"""

from precision_base import PluginInfo

INFO = PluginInfo(
    backend="fsdp",
    precisions=("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"),
    plugin_class="precision_fsdp.plugin:FSDPPrecision",
    fabric_class="precision_fsdp.fabric:FSDPPrecision",
    extra_precisions=(("fp8-tensorwise", "bf16-mixed"), ("fp8-rowwise", "bf16-mixed"), ("mxfp8-rceil", "bf16-mixed")),
    precision_extras=(  # torchao, from precision-fsdp[fp8]
        ("fp8-tensorwise", "fp8"),
        ("fp8-rowwise", "fp8"),
        ("mxfp8-rceil", "fp8"),
    ),
    strategy="FSDP2Strategy (FSDP2, strategy='auto'), ModelParallelStrategy (FSDP2) or FSDPStrategy (FSDP1)",
    summary="FSDP1 MixedPrecision and FSDP2 MixedPrecisionPolicy, autocast on any device, fp32 reduction",
)
