"""The fence's list: every private or undocumented Lightning, torch or DeepSpeed symbol the package touches, with
the parameters it relies on. ``tests/test_compat.py`` checks every entry against the installed releases in
milliseconds and fails with one line naming the symbol that moved. Each entry is a
[`precision_base.kit.fence.Fenced`][], the shape the FSDP plugin's fence has too.
"""

from __future__ import annotations

from typing import Optional

from precision_base.kit.fence import Fenced
from precision_base.kit.fence import fenced_problems as _fenced_problems


def _zero3_sets_ds_tensor() -> Optional[str]:
    """ZeRO-3's ``deepspeed.zero.Init`` still stores each parameter's partition as ``param.ds_tensor``."""
    import inspect

    from deepspeed.runtime.zero import partition_parameters

    return None if ".ds_tensor = " in inspect.getsource(partition_parameters) else "no longer sets param.ds_tensor"


def _torch_backend_caches_collectives() -> Optional[str]:
    """DeepSpeed's ``TorchBackend`` still keeps the collectives it calls as ``all_gather_function`` and
    ``reduce_scatter_function`` (what the audit wraps, through ``cached_collectives``)."""
    import importlib
    import inspect

    backend = importlib.import_module("deepspeed.comm.torch").TorchBackend  # the package's `torch` attribute is torch
    source = inspect.getsource(backend.__init__)
    missing = [a for a in ("self.all_gather_function =", "self.reduce_scatter_function =") if a not in source]
    return f"TorchBackend.__init__ no longer sets {', '.join(missing)}" if missing else None


_LDS = "lightning.pytorch.strategies.deepspeed"
_LDP = "lightning.pytorch.plugins.precision.deepspeed"
_FDS = "lightning.fabric.strategies.deepspeed"

#: Every fenced symbol. Overridden Lightning methods are listed too, so that a renamed or re-shaped base method
#: fails the compat test (mypy catches it through ``typing_extensions.override`` as well).
FENCED: tuple[Fenced, ...] = (
    # -- Lightning's DeepSpeedStrategy: private methods the CPU strategy overrides or calls ----------------------
    Fenced(_LDS, "DeepSpeedStrategy.setup_environment", ("self",), "CPU strategy: skip the CUDA-only check"),
    Fenced(_LDS, "DeepSpeedStrategy.setup_distributed", ("self",), "CPU strategy: skip the device-index check"),
    Fenced(_LDS, "DeepSpeedStrategy._init_deepspeed_distributed", ("self",), "CPU strategy: start DeepSpeed's group"),
    Fenced(_LDS, "DeepSpeedStrategy.set_world_ranks", ("self",), "CPU strategy: ranks before DeepSpeed's group"),
    Fenced(_LDS, "DeepSpeedStrategy.root_device", None, "CPU strategy: a device index for deepspeed.initialize"),
    Fenced(
        _LDS,
        "DeepSpeedStrategy._setup_model_and_optimizer",
        ("self", "model", "optimizer", "lr_scheduler"),
        "CPU strategy: deepspeed.initialize reads root_device.index",
    ),
    Fenced(
        _LDS,
        "DeepSpeedStrategy._initialize_deepspeed_inference",
        ("self", "model"),
        "CPU strategy: deepspeed.initialize reads root_device.index",
    ),
    Fenced(
        _LDS,
        "DeepSpeedStrategy.load_checkpoint",
        ("self", "checkpoint_path"),  # Lightning >= 2.5.1 adds weights_only; the override passes it through
        "CPU strategy: refuse a checkpoint of another precision mode first",
    ),
    Fenced(_LDS, "DeepSpeedStrategy._format_config", ("self",), "the plugin's section goes in before Lightning's"),
    Fenced(
        _LDS,
        "remove_module_hooks",
        ("model",),
        "CPU strategy: evaluation after fit removes only DeepSpeed's hooks, not the user's (module_hooks_kept)",
    ),
    Fenced(_LDS, "DeepSpeedStrategy._init_config_if_needed", ("self",), "Lightning formats its config once"),
    Fenced(
        _LDS,
        "DeepSpeedStrategy.__init__",
        ("self", "accelerator", "zero_optimization", "stage"),
        "loss-scaling defaults, to tell a user's strategy arguments from Lightning's defaults",
    ),
    # -- Lightning Fabric's DeepSpeedStrategy: private methods the Fabric CPU strategy (fabric.py) overrides or calls
    Fenced(_FDS, "DeepSpeedStrategy._setup_distributed", ("self",), "Fabric CPU strategy: skip the device-index check"),
    Fenced(
        _FDS, "DeepSpeedStrategy._set_world_ranks", ("self",), "Fabric CPU strategy: ranks before DeepSpeed's group"
    ),
    Fenced(
        _FDS, "DeepSpeedStrategy._init_deepspeed_distributed", ("self",), "Fabric CPU strategy: start DeepSpeed's group"
    ),
    Fenced(_FDS, "DeepSpeedStrategy._format_config", ("self",), "Fabric CPU strategy: the plugin's section first"),
    Fenced(
        _FDS,
        "DeepSpeedStrategy._initialize_engine",
        ("self", "model", "optimizer", "scheduler"),
        "Fabric CPU strategy: deepspeed.initialize reads root_device.index",
    ),
    Fenced("lightning.fabric.utilities.seed", "reset_seed", (), "CPU strategy: setup_distributed as Lightning does"),
    Fenced(
        "lightning.fabric.plugins.precision.deepspeed",
        "_PRECISION_INPUT",
        None,
        "Lightning's list of precisions, quoted verbatim in the unsupported-precision error",
    ),
    Fenced(
        "lightning.pytorch.utilities.model_helpers",
        "is_overridden",
        ("method_name", "instance", "parent"),
        "warn when LightningModule.backward is overridden",
    ),
    # -- Lightning's DeepSpeedPrecision: methods the plugin overrides -----------------------------------------
    Fenced(_LDP, "DeepSpeedPrecision.__init__", ("self", "precision"), "the plugin's base class"),
    Fenced(_LDP, "DeepSpeedPrecision.convert_module", ("self", "module"), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.convert_input", ("self", "data"), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.convert_output", ("self", "data"), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.tensor_init_context", ("self",), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.module_init_context", ("self",), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.forward_context", ("self",), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.connect", ("self", "model", "optimizers", "lr_schedulers"), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.backward", ("self", "tensor", "model", "optimizer"), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.optimizer_step", ("self", "optimizer", "model", "closure"), "override"),
    Fenced(
        _LDP,
        "DeepSpeedPrecision.clip_gradients",
        ("self", "optimizer", "clip_val", "gradient_clip_algorithm"),
        "override",
    ),
    Fenced(_LDP, "DeepSpeedPrecision.state_dict", ("self",), "override: records the precision in checkpoints"),
    Fenced(_LDP, "DeepSpeedPrecision.load_state_dict", ("self", "state_dict"), "override: checks the precision"),
    Fenced(_LDP, "DeepSpeedPrecision._after_closure", ("self", "model", "optimizer"), "optimizer_step's hooks"),
    # -- DeepSpeed and torch --------------------------------------------------------------------------------
    Fenced("deepspeed.runtime.constants", "TORCH_AUTOCAST", None, "feature detection: torch_autocast", optional=True),
    Fenced("deepspeed.runtime.constants", "BUFFER_DTYPE", None, "feature detection: buffer dtype", optional=True),
    Fenced(
        "deepspeed.runtime.precision_config",
        "DeepSpeedBF16Config.model_fields",
        None,
        "feature detection: bf16 check_grad_overflow",
        optional=True,
    ),
    Fenced("deepspeed.runtime.engine", "DeepSpeedEngine.was_step_applied", ("self",), "max_skipped_steps"),
    Fenced(
        "deepspeed.runtime.engine",
        "DeepSpeedEngine.is_gradient_accumulation_boundary",
        ("self",),
        "max_skipped_steps counts optimizer steps only",
    ),
    Fenced(
        "deepspeed.runtime.fp16.loss_scaler",
        "DynamicLossScaler.update_scale",
        ("self", "overflow"),
        "an overflow at the lowest loss scale raises MIN_LOSS_SCALE_MESSAGE",
    ),
    Fenced(
        "deepspeed.accelerator.cpu_accelerator",
        "CPU_Accelerator.is_fp16_supported",
        ("self",),
        "refuse fp16 on a CPU before DeepSpeed's engine does",
    ),
    Fenced(
        "deepspeed.runtime.engine",
        "DeepSpeedEngine._get_optimizer_loss_scale",
        ("self",),
        "precision_stats: the current loss scale for PrecisionMonitor",
        optional=True,
    ),
    Fenced("deepspeed.runtime.engine", "DeepSpeedEngine.get_global_grad_norm", ("self",), "precision_stats"),
    Fenced(
        "deepspeed.runtime.zero.partition_parameters",
        "param.ds_tensor",
        why="refuse ZeRO-3 parameters partitioned in another dtype (zero3_partition_dtypes)",
        check=_zero3_sets_ds_tensor,
    ),
    Fenced("deepspeed.comm.comm", "cdb", None, "the audit records ZeRO's collectives (cached_collectives)"),
    Fenced(
        "deepspeed.comm.torch",
        "TorchBackend.__init__",
        why="the audit wraps the collectives it caches (cached_collectives)",
        check=_torch_backend_caches_collectives,
    ),
    Fenced("deepspeed.ops.op_builder.builder", "OpBuilder._loaded_ops", None, "CPU op build notice: loaded already"),
    Fenced("deepspeed.ops", "__compatible_ops__", None, "CPU op build notice: DeepSpeed builds only compatible ops"),
    Fenced("deepspeed.git_version_info", "installed_ops", None, "CPU op build notice: ops installed prebuilt"),
    Fenced("torch.utils.cpp_extension", "_get_build_directory", ("name", "verbose"), "CPU op build notice: its folder"),
)


def fenced_problems() -> list[str]:
    """One line for every fenced symbol that is missing or has other parameters than expected."""
    return _fenced_problems(FENCED)


__all__ = ["FENCED", "Fenced", "fenced_problems"]
