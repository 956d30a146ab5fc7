"""Every touch point of a private or undocumented Lightning, torch or DeepSpeed symbol, in one place.

The rest of the package reaches such symbols only through this package: its functions, and the strategy hooks
(`strategies`), the only overrides of private Lightning methods.
`FENCED` (`fence`) lists each one with the parameters the package relies
on; ``tests/test_compat.py`` checks every entry against the installed releases in milliseconds and fails with one
line naming the symbol that moved. Version-dependent behaviour is chosen here by feature detection (never by
comparing version numbers).

* `lightning`: Lightning's (namespaces, strategy config and registry, seed,
  module hooks);
* `deepspeed`: DeepSpeed's and torch's (feature detection, loss scale and skipped
  steps, float32 parameter copies, the CPU communication op);
* `strategies`: the private ``DeepSpeedStrategy`` methods the CPU strategies
  replace.

Importing this package imports none of torch, Lightning and DeepSpeed; its functions import what they ask about.
"""

from __future__ import annotations

from precision_deepspeed._compat.deepspeed import (
    CPU_COMM_OP_BUILDER,
    FP32_PARAMETERS_MARK,
    MIN_LOSS_SCALE_MESSAGE,
    cached_collectives,
    cpu_comm_op_build,
    cpu_supports_fp16,
    deepspeed_bf16_overflow_check_default,
    deepspeed_checks_bf16_overflow,
    deepspeed_has_torch_autocast,
    deepspeed_keeps_buffer_dtype,
    deepspeed_version,
    engine_grad_norm,
    engine_loss_scale,
    engine_skipped_steps,
    engine_step_skipped,
    forward_with_fp32_parameters,
    is_min_loss_scale_error,
    optimizer_loss_scale,
    optimizer_overflowed,
    zero3_partition_dtypes,
)
from precision_deepspeed._compat.fence import FENCED, Fenced, fenced_problems
from precision_deepspeed._compat.lightning import (
    FORMAT_MARKER,
    after_closure,
    base_method,
    config_formatted,
    format_config_once,
    init_deepspeed_distributed,
    keep_module_hooks_in_evaluation,
    lightning_namespace,
    lightning_precisions,
    lightning_written_keys,
    module_hooks_kept,
    overrides_backward,
    registered_class,
    registry_init_params,
    remove_deepspeed_hooks,
    reset_seed,
    set_world_ranks,
    strategy_loss_scaling,
    strategy_registry,
    trainer_of,
)
from precision_deepspeed._compat.strategies import FabricStrategyHooks, TrainerStrategyHooks

__all__ = [
    "CPU_COMM_OP_BUILDER",
    "FENCED",
    "FORMAT_MARKER",
    "FP32_PARAMETERS_MARK",
    "MIN_LOSS_SCALE_MESSAGE",
    "FabricStrategyHooks",
    "Fenced",
    "TrainerStrategyHooks",
    "after_closure",
    "base_method",
    "cached_collectives",
    "config_formatted",
    "cpu_comm_op_build",
    "cpu_supports_fp16",
    "deepspeed_bf16_overflow_check_default",
    "deepspeed_checks_bf16_overflow",
    "deepspeed_has_torch_autocast",
    "deepspeed_keeps_buffer_dtype",
    "deepspeed_version",
    "engine_grad_norm",
    "engine_loss_scale",
    "engine_skipped_steps",
    "engine_step_skipped",
    "fenced_problems",
    "forward_with_fp32_parameters",
    "format_config_once",
    "init_deepspeed_distributed",
    "is_min_loss_scale_error",
    "keep_module_hooks_in_evaluation",
    "lightning_namespace",
    "lightning_precisions",
    "lightning_written_keys",
    "module_hooks_kept",
    "optimizer_loss_scale",
    "optimizer_overflowed",
    "overrides_backward",
    "registered_class",
    "registry_init_params",
    "remove_deepspeed_hooks",
    "reset_seed",
    "set_world_ranks",
    "strategy_loss_scaling",
    "strategy_registry",
    "trainer_of",
    "zero3_partition_dtypes",
]
