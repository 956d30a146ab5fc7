"""The entry-point object of precision-fsdp: plain data, imports no torch."""

from precision_base import PluginInfo

INFO = PluginInfo(
    backend="fsdp",
    precisions=("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"),
    plugin_class="precision_fsdp.plugin:FSDPPrecision",
    strategy="lightning.pytorch.strategies.FSDPStrategy (FSDP1) or ModelParallelStrategy (FSDP2)",
    requires=("torch>=2.13", "lightning>=2.5"),
    summary="FSDP1 MixedPrecision and FSDP2 MixedPrecisionPolicy, autocast on any device, fp32 reduction",
)
