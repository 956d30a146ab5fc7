"""The entry-point object of precision-deepspeed: plain data, imports no torch or DeepSpeed."""

from precision_base import PluginInfo

INFO = PluginInfo(
    backend="deepspeed",
    precisions=("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"),
    plugin_class="precision_deepspeed.plugin:DeepSpeedPrecision",
    strategy="lightning.pytorch.strategies.DeepSpeedStrategy (GPUs) or precision_deepspeed.DeepSpeedCPUStrategy (CPU)",
    requires=("torch>=2.13", "lightning>=2.5", "deepspeed>=0.16"),
    summary="DeepSpeed engine precision with a plugin-owned config section; runs on CPU too",
)
