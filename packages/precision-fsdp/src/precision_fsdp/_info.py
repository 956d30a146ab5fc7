"""The entry-point object of precision-fsdp: plain data, imports no torch.

The requirements (torch, Lightning) are not repeated here: the registry reads them from this distribution's own
metadata (``Requires-Dist``, from pyproject.toml) before it imports the plugin class. The extra precisions and the
extra they need come from the float8 feature's one declaration ([`precision_fsdp.float8.recipes.FLOAT8`][]).
"""

from precision_base import PluginInfo
from precision_base.kit.extra import declared, declared_extras, declared_facts, declared_imports
from precision_fsdp.float8.recipes import FLOAT8

INFO = PluginInfo(
    backend="fsdp",
    precisions=("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"),
    plugin_class="precision_fsdp.plugin:FSDPPrecision",
    fabric_class="precision_fsdp.fabric:FSDPPrecision",
    extra_precisions=declared(FLOAT8),
    precision_extras=declared_extras(FLOAT8),  # torchao, from precision-fsdp[fp8]
    extra_imports=declared_imports(FLOAT8),  # torchao.float8 must import, else fp8 is broken here
    **declared_facts(FLOAT8),  # each recipe's GPU, trade-off and float8 matmuls (recommend, the audit)
    preference=10,  # recommend's first choice: FSDP2 shards parameters, gradients and optimizer state, CPU and GPU
    strategy="FSDP2Strategy (FSDP2, strategy='auto'), ModelParallelStrategy (FSDP2) or FSDPStrategy (FSDP1)",
    summary="FSDP1 MixedPrecision and FSDP2 MixedPrecisionPolicy, autocast on any device, fp32 reduction",
)
