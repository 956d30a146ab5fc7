"""DeepSpeed's and torch's private or undocumented symbols, held here: feature detection, the engine's and its
optimizer's loss scale and skipped steps, float32 parameter copies for one forward, the CPU communication op.

Version-dependent behaviour is chosen by feature detection (never by comparing version numbers). Importing this
module imports neither torch nor DeepSpeed; its functions import what they ask about.
"""

from __future__ import annotations

import functools
from typing import Any, Optional


# -- DeepSpeed and torch feature detection -------------------------------------------------------------------
@functools.cache
def _deepspeed_constants() -> frozenset[str]:
    """Names defined in ``deepspeed.runtime.constants``: which config sections the installed DeepSpeed knows."""
    from deepspeed.runtime import constants

    return frozenset(dir(constants))


def deepspeed_has_torch_autocast() -> bool:
    """Whether the installed DeepSpeed reads a ``torch_autocast`` config section."""
    return "TORCH_AUTOCAST" in _deepspeed_constants()


def deepspeed_keeps_buffer_dtype() -> bool:
    """Whether the installed DeepSpeed leaves buffers in their dtype when it casts a module to fp16/bf16.

    Releases that know ``data_types.buffer_dtype`` cast parameters only; older ones cast the whole module.
    """
    return "BUFFER_DTYPE" in _deepspeed_constants()


def deepspeed_checks_bf16_overflow() -> bool:
    """Whether the installed DeepSpeed's bf16 mode skips steps with non-finite gradients (``check_grad_overflow``)."""
    try:
        from deepspeed.runtime.precision_config import DeepSpeedBF16Config
    except ImportError:  # older releases keep the bf16 config elsewhere, without the check
        return False
    return "check_grad_overflow" in DeepSpeedBF16Config.model_fields


def deepspeed_bf16_overflow_check_default() -> bool:
    """Whether the installed DeepSpeed's bf16 mode checks for non-finite gradients without being asked (the default
    of ``bf16.check_grad_overflow``: ``False`` from 0.17 up to 0.19.0, ``True`` in 0.19.8; ``False`` where the option
    does not exist)."""
    if not deepspeed_checks_bf16_overflow():
        return False
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config

    return bool(DeepSpeedBF16Config.model_fields["check_grad_overflow"].default)


def deepspeed_version() -> str:
    """The installed DeepSpeed's version, for messages (read from its distribution's metadata)."""
    from importlib import metadata

    try:
        return metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def cpu_supports_fp16() -> bool:
    """Whether DeepSpeed's CPU accelerator accepts fp16 here: its own answer, which its engine checks at start-up
    ("Type fp16 is not supported on your device."). DeepSpeed up to 0.16.7 always says no; 0.16.8 and later ask
    oneDNN (AVX512-FP16 or AMX-FP16). Imports DeepSpeed."""
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    return bool(CPU_Accelerator().is_fp16_supported())  # None (not False) where oneDNN says no, in some releases


#: The start of the exception DeepSpeed's dynamic loss scaler raises when a step overflows at the lowest scale.
MIN_LOSS_SCALE_MESSAGE = "Current loss scale already at minimum - cannot decrease scale anymore."


def engine_loss_scale(engine: Any) -> Optional[float]:
    """The loss scale the DeepSpeed engine multiplies the loss by, or ``None`` when it has none.

    In its torch_autocast float16 mode DeepSpeed scales the loss with a ``torch.amp.GradScaler`` (the instance
    attribute ``torch_autocast_gradscaler`` of its ZeRO optimizer, ``torch_autocast_z0_gradscaler`` of the engine
    without ZeRO) while its optimizer's own loss scale stays 1.0: the GradScaler's scale is the one applied.
    Otherwise the optimizer's loss scale.
    """
    for owner, attribute in ((getattr(engine, "optimizer", None), "torch_autocast_gradscaler"),
                             (engine, "torch_autocast_z0_gradscaler")):  # fmt: skip
        scaler = getattr(owner, attribute, None)
        if scaler is not None and hasattr(scaler, "get_scale"):
            return float(scaler.get_scale())
    getter = getattr(engine, "_get_optimizer_loss_scale", None)  # DeepSpeed >= 0.18.6
    # older releases: the fp16 optimizers carry cur_scale themselves
    scale = getter() if getter is not None else getattr(getattr(engine, "optimizer", None), "cur_scale", None)
    return None if scale is None else float(scale)


def engine_skipped_steps(engine: Any) -> int:
    """Optimizer steps the engine skipped for non-finite gradients so far (its ``skipped_steps`` attribute)."""
    return int(getattr(engine, "skipped_steps", 0))


def engine_step_skipped(engine: Any) -> Optional[bool]:
    """After ``engine.step()``: whether DeepSpeed skipped the optimizer step for non-finite gradients
    (``not engine.was_step_applied()``); ``None`` off a gradient-accumulation boundary, where no optimizer step
    ran (``engine.is_gradient_accumulation_boundary()``)."""
    if not engine.is_gradient_accumulation_boundary():
        return None
    return not engine.was_step_applied()


def engine_grad_norm(engine: Any) -> Optional[float]:
    """The global gradient norm the engine computed at its last step (``engine.get_global_grad_norm()``), if any."""
    norm = engine.get_global_grad_norm()
    return None if norm is None else float(norm)


_CACHED_COLLECTIVES = {
    "all_gather_function": "all_gather_into_tensor",
    "reduce_scatter_function": "reduce_scatter_tensor",
}


def cached_collectives() -> tuple[tuple[Any, str, str], ...]:
    """The ``torch.distributed`` collectives DeepSpeed's comm layer cached when it started, as
    ``(owner, attribute, collective)`` for the audit: the module global ``deepspeed.comm.comm.cdb`` (a
    ``TorchBackend``) holds ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` as ``all_gather_function`` /
    ``reduce_scatter_function``, which ZeRO calls. Empty before DeepSpeed's group is started. Looked up in
    ``sys.modules`` only: nothing is imported."""
    import sys

    backend = getattr(sys.modules.get("deepspeed.comm.comm"), "cdb", None)
    if backend is None:
        return ()
    return tuple((backend, attribute, name) for attribute, name in _CACHED_COLLECTIVES.items())


def zero3_partition_dtypes(module: Any) -> set[Any]:
    """The dtypes of the ZeRO-3 partitions (each parameter's ``ds_tensor``, set by ``deepspeed.zero.Init``) of
    ``module``'s parameters; empty when none is partitioned."""
    return {p.ds_tensor.dtype for p in module.parameters() if hasattr(p, "ds_tensor")}


def optimizer_loss_scale(optimizer: Any) -> Optional[float]:
    """The loss scale DeepSpeed's own optimizer (ZeRO, fp16) applies: its torch_autocast ``GradScaler``'s where it
    has one, else its loss scaler's (``loss_scale_config.cur_scale``, or ``cur_scale`` in older releases)."""
    scaler = getattr(optimizer, "torch_autocast_gradscaler", None)
    if scaler is not None and hasattr(scaler, "get_scale"):
        return float(scaler.get_scale())
    config = getattr(optimizer, "loss_scale_config", None)
    scale = getattr(config, "cur_scale", None) if config is not None else getattr(optimizer, "cur_scale", None)
    return None if scale is None else float(scale)


def optimizer_overflowed(optimizer: Any) -> bool:
    """Whether DeepSpeed's fp16/bf16/ZeRO optimizer skipped its last ``step()`` for non-finite gradients: its
    ``overflow`` attribute, which the engine itself reads to count ``skipped_steps`` (``False`` where absent).

    Lightning Fabric steps this optimizer, not the engine, so ``engine.was_step_applied()`` is not updated there.
    """
    return bool(getattr(optimizer, "overflow", False))


def is_min_loss_scale_error(exc: BaseException) -> bool:
    """Whether ``exc`` is DeepSpeed's "overflow at the lowest loss scale" exception (a plain ``Exception``)."""
    return type(exc) is Exception and str(exc).startswith(MIN_LOSS_SCALE_MESSAGE)


#: Set on a module whose ``forward`` runs with float32 copies of its parameters (value ``True``).
FP32_PARAMETERS_MARK = "_precision_deepspeed_fp32_parameters"


def _forward_with_fp32_parameters(self: Any, *args: Any, **kwargs: Any) -> Any:
    """The class's ``forward`` with each floating, non-float32 parameter of ``self`` replaced by a float32 copy.

    Touches torch's private ``Module._parameters`` table for the call only (what ``torch.func.functional_call``
    does, without calling the module again, so DeepSpeed's hooks run once): autograd takes each copy's gradient
    back to the parameter, and the table holds the parameters again when ``forward`` returns or raises.
    """
    import torch

    from precision_base.kit.keep_fp32 import forward_parameters_swapped

    table = self._parameters
    saved = {n: p for n, p in table.items() if p is not None and p.is_floating_point() and p.dtype != torch.float32}
    for name, param in saved.items():
        table[name] = param.float()
    try:
        forward_parameters_swapped(self)  # observers (the audit) see the float32 copies the forward computes with
        return type(self).forward(self, *args, **kwargs)
    finally:
        table.update(saved)


def forward_with_fp32_parameters(module: Any) -> None:
    """Make ``module.forward`` run with float32 copies of its own floating parameters (an instance attribute bound
    to the module, so ``copy.deepcopy`` binds it to the copy). Idempotent."""
    import types

    if getattr(module, FP32_PARAMETERS_MARK, False):
        return
    module.forward = types.MethodType(_forward_with_fp32_parameters, module)
    setattr(module, FP32_PARAMETERS_MARK, True)


# -- DeepSpeed's CPU communication op --------------------------------------------------------------------------
#: The op builder ``deepspeed.init_distributed`` loads on DeepSpeed's CPU accelerator (``deepspeed.comm.torch``).
CPU_COMM_OP_BUILDER = "ShareMemCommBuilder"


def cpu_comm_op_build() -> Optional[tuple[str, str]]:
    """``(op name, build folder)`` when ``deepspeed.init_distributed`` is about to JIT-compile DeepSpeed's CPU
    communication op (a minute or two); ``None`` when it will not: no such op on this accelerator, DeepSpeed would
    not build it here, it was installed prebuilt, this process loaded it already, or the build folder
    (``TORCH_EXTENSIONS_DIR`` or torch's default) already holds the built library, which later runs reuse."""
    import os

    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.op_builder.builder import OpBuilder
    from torch.utils.cpp_extension import _get_build_directory

    builder = get_accelerator().create_op_builder(CPU_COMM_OP_BUILDER)
    if builder is None:
        return None
    name = str(builder.NAME)
    if not deepspeed.ops.__compatible_ops__.get(name, False) or installed_ops.get(name, False):
        return None
    if name in OpBuilder._loaded_ops:
        return None
    folder = str(_get_build_directory(name, verbose=False))
    if os.path.isfile(os.path.join(folder, f"{name}.so")):
        return None
    return name, folder
