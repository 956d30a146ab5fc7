"""The entry-point object of precision-deepspeed: plain data, imports no torch or DeepSpeed.

The requirements (torch, Lightning, DeepSpeed) are not repeated here: the registry reads them from this
distribution's own metadata (``Requires-Dist``, from pyproject.toml) before it imports the plugin class.
"""

from precision_base import PluginInfo

INFO = PluginInfo(
    backend="deepspeed",
    precisions=("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"),
    plugin_class="precision_deepspeed.plugin:DeepSpeedPrecision",
    fabric_class="precision_deepspeed.fabric:DeepSpeedPrecision",
    strategy="lightning.pytorch.strategies.DeepSpeedStrategy (GPUs) or precision_deepspeed.DeepSpeedCPUStrategy (CPU)",
    summary="DeepSpeed engine precision with a plugin-owned config section; runs on CPU too",
    preference=20,  # recommend's choice where precision-fsdp is not installed
)
