"""The fence: every touch point of a private or undocumented torch / torchao / Lightning symbol, and every version
switch.

Nothing else in ``precision_fsdp`` names an underscore attribute of torch, torchao or Lightning, imports from a
private module, or asks which version is installed. The package holds the touch points themselves, by what they
touch:

* `torch_fsdp`: where FSDP2 and DTensor live per torch version, FSDP2 on CPU, the
  FSDP1 scaler, a DTensor's local tensor, FSDP2's mixed-precision policy after ``fully_shard``;
* `torchao`: which of torchao's training API paths the installed torchao has;
* `float8_switch`: torchao's weight wrappers, ``Float8Linear`` and FSDP2's
  ``FSDPParam`` as switching a sharded model away from fp8 undoes torchao's conversion;
* `lightning`: Lightning's private attributes and functions the plugin reads, sets or
  routes (input dtype, mesh sizes, ``configure_model`` detection, ``ThroughputMonitor``, the FSDP1-on-CPU check).

Each entry says what it touches and why; `FENCED` lists them all ([`precision_base.kit.fence.Fenced`][], the
shape both plugins use), and ``tests/test_compat.py`` checks in milliseconds that each still exists with the shape
used here, so that a release that moves one fails with a one-line message naming it instead of a broken training
run. Version switches are chosen by feature detection (does the module have the name?), never by version numbers.
The rest of the package imports from this package (``from precision_fsdp import _compat``), not from its modules.
"""

from __future__ import annotations

from typing import Final

from precision_base.kit.fence import Fenced
from precision_fsdp._compat import float8_switch as _float8_switch
from precision_fsdp._compat import lightning as _lightning
from precision_fsdp._compat import torch_fsdp as _torch_fsdp
from precision_fsdp._compat.float8_switch import (
    FLOAT8_LINEAR_ATTRS,
    float8_linear_class,
    fsdp_params,
    plain_class,
    unwrap_fsdp_param,
    wrapped_inner,
)
from precision_fsdp._compat.lightning import (
    FSDP_ON_CPU_CHECK,
    INPUT_DTYPE_ATTR,
    LIGHTNING_SCALER_METHODS,
    MODEL_PARALLEL_SIZE_ATTRS,
    THROUGHPUT_DTYPE_FUNCTION,
    configure_model_counted_as_overridden,
    fsdp1_state_dict_type,
    lightning_fsdp_on_cpu_message,
    mesh_sizes,
    route_throughput_compute_dtype,
    set_data_parallel_size,
    set_lightning_input_dtype,
)
from precision_fsdp._compat.torch_fsdp import (
    DTENSOR_MODULE,
    FSDP2_MODULE,
    FSDP2_POLICY_ATTRS,
    SHARDED_GRAD_SCALER_MODULE,
    DTensor,
    FSDPModule,
    FullyShardedDataParallel,
    MixedPrecision,
    MixedPrecisionPolicy,
    fsdp2_cpu_problem,
    fsdp2_policy,
    fully_shard,
    local_tensor,
    policy_reduce_dtype,
    scaler_device,
    set_fsdp2_policy,
    sharded_grad_scaler_class,
)
from precision_fsdp._compat.torchao import (
    MODULE_SWAP,
    TORCHAO_WEIGHT_WRAPPER_CONFIG_MODULE,
    WEIGHT_WRAPPER,
    torchao_training_paths,
    weight_wrapper_float8_gaps,
)

FENCED: Final[tuple[Fenced, ...]] = (*_torch_fsdp.FENCED, *_lightning.FENCED, *_float8_switch.FENCED)
"""Every fenced symbol, checked by ``tests/test_compat.py``."""

__all__ = [
    "DTENSOR_MODULE",
    "FENCED",
    "FLOAT8_LINEAR_ATTRS",
    "FSDP2_MODULE",
    "FSDP2_POLICY_ATTRS",
    "FSDP_ON_CPU_CHECK",
    "INPUT_DTYPE_ATTR",
    "LIGHTNING_SCALER_METHODS",
    "MODEL_PARALLEL_SIZE_ATTRS",
    "MODULE_SWAP",
    "SHARDED_GRAD_SCALER_MODULE",
    "THROUGHPUT_DTYPE_FUNCTION",
    "TORCHAO_WEIGHT_WRAPPER_CONFIG_MODULE",
    "WEIGHT_WRAPPER",
    "DTensor",
    "FSDPModule",
    "Fenced",
    "FullyShardedDataParallel",
    "MixedPrecision",
    "MixedPrecisionPolicy",
    "configure_model_counted_as_overridden",
    "float8_linear_class",
    "fsdp1_state_dict_type",
    "fsdp2_cpu_problem",
    "fsdp2_policy",
    "fsdp_params",
    "fully_shard",
    "lightning_fsdp_on_cpu_message",
    "local_tensor",
    "mesh_sizes",
    "plain_class",
    "policy_reduce_dtype",
    "route_throughput_compute_dtype",
    "scaler_device",
    "set_data_parallel_size",
    "set_fsdp2_policy",
    "set_lightning_input_dtype",
    "sharded_grad_scaler_class",
    "torchao_training_paths",
    "unwrap_fsdp_param",
    "weight_wrapper_float8_gaps",
    "wrapped_inner",
]
