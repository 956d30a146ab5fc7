"""Every error class precision-deepspeed defines, and the messages both doors share.

[`DeepSpeedPrecisionError`][precision_deepspeed.errors.DeepSpeedPrecisionError] and
[`DeepSpeedOverflowStormError`][precision_deepspeed.errors.DeepSpeedOverflowStormError] are what to catch. What is
raised is the
subclass [`error_class`][precision_deepspeed.errors.error_class] builds for the plugin's Lightning namespace, which is
also that namespace's
``MisconfigurationException`` (``lightning.fabric``'s under ``lightning.pytorch`` and Fabric, ``lightning_fabric``'s
under ``pytorch_lightning``), the type Lightning's own ``DeepSpeedPrecision`` raises.

Refused before training starts:

* [`DeepSpeedConfigConflictError`][precision_deepspeed.errors.DeepSpeedConfigConflictError]: the user's DeepSpeed
  config contradicts the plugin ([`precision_deepspeed.config`][]);
* [`KeepFP32Error`][precision_deepspeed.errors.KeepFP32Error]: ``keep_fp32`` cannot be honoured as asked
  ([`precision_deepspeed.keep_fp32`][]);
* [`CheckpointPrecisionError`][precision_deepspeed.errors.CheckpointPrecisionError]: a checkpoint saved under another
  DeepSpeed precision mode is resumed ([`precision_deepspeed.resume`][]).

Imports no torch and no Lightning module at import time.
"""

from __future__ import annotations

import copyreg
import importlib
import threading
from typing import Any, TypeVar

from precision_base import PrecisionPluginError
from precision_base.errors import OverflowStormError, TrainerConfigurationError

#: Lightning's own messages, kept verbatim where ours replace Lightning's code (our guidance follows them).
LIGHTNING_BACKWARD_WARNING = (
    "You have overridden the `LightningModule.backward` hook but it will be ignored since DeepSpeed handles"
    " the backward logic internally."
)
LIGHTNING_LBFGS_ERROR = "DeepSpeed and the LBFGS optimizer are not compatible."
LIGHTNING_SKIPPED_BACKWARD_ERROR = (
    "Skipping backward by returning `None` from your `training_step` is not supported by `DeepSpeed`"
)
LIGHTNING_CLIP_BY_VALUE_ERROR = "DeepSpeed does not support clipping gradients by value."


class DeepSpeedPrecisionError(PrecisionPluginError):
    """Training cannot go on as asked under DeepSpeed (what is raised is also Lightning's
    ``MisconfigurationException``: see [`error_class`][precision_deepspeed.errors.error_class])."""


class DeepSpeedOverflowStormError(OverflowStormError, DeepSpeedPrecisionError):
    """``max_skipped_steps`` steps in a row were skipped for inf/NaN gradients under DeepSpeed.

    It is [`precision_base.OverflowStormError`][] (what the FSDP plugin raises too: catch that one), and also a
    [`DeepSpeedPrecisionError`][precision_deepspeed.errors.DeepSpeedPrecisionError], the type this plugin raised for it
    before the watch was shared.
    """


class DeepSpeedConfigConflictError(TrainerConfigurationError):
    """A user's DeepSpeed config contradicts what the precision plugin needs."""


class KeepFP32Error(PrecisionPluginError, ValueError):
    """``keep_fp32`` cannot be honoured under DeepSpeed as asked (native fp16/bf16 mode, or a contradiction)."""


class CheckpointPrecisionError(PrecisionPluginError, ValueError):
    """A checkpoint saved under one DeepSpeed precision mode is resumed under another."""


def setup_alone_error(stage: int) -> str:
    """The refusal of ``fabric.setup(model)`` without an optimizer under ZeRO ``stage`` 1 or 2 (DeepSpeed builds those
    stages' engine around the optimizer, and stops with "zero stage 2 requires an optimizer" otherwise)."""
    return (
        f"DeepSpeed ZeRO stage {stage} builds its engine around the model and its optimizer together, so a model set "
        "up alone cannot train (DeepSpeed would stop with 'zero stage "
        f"{stage} requires an optimizer'). Call fabric.setup(model, optimizer) instead of fabric.setup(model) then "
        "fabric.setup_optimizers(optimizer); a model for inference only can be set up alone under stage 0 or 3."
    )


_E = TypeVar("_E", bound=DeepSpeedPrecisionError)
_classes: dict[tuple[type, str], type] = {}
_lock = threading.Lock()


class _NamespacedError(type):
    """Metaclass of the classes [`error_class`][precision_deepspeed.errors.error_class] builds: such a class pickles as
    ``error_class(base, namespace)``
    (it is no module attribute), so a plugin holding one (its ``max_skipped_steps`` watch) pickles too."""

    _lightning_namespace: str


def _reduce_class(cls: _NamespacedError) -> tuple[Any, tuple[type, str]]:
    return error_class, (cls.__mro__[1], cls._lightning_namespace)


copyreg.pickle(_NamespacedError, _reduce_class)


def error_class(base: type[_E], namespace: str) -> type[_E]:
    """``base`` ([`DeepSpeedPrecisionError`][precision_deepspeed.errors.DeepSpeedPrecisionError] or a subclass) that is
    also ``namespace``'s
    ``MisconfigurationException``; ``namespace`` is a Lightning root module's name (``"lightning.pytorch"``,
    ``"pytorch_lightning"``, ``"lightning.fabric"``, ``"lightning_fabric"``). Built once per pair."""
    with _lock:
        built = _classes.get((base, namespace))
        if built is None:
            exceptions: Any = importlib.import_module(f"{namespace}.utilities.exceptions")
            body = {"__module__": base.__module__, "__qualname__": base.__qualname__, "_lightning_namespace": namespace}
            built = _NamespacedError(base.__name__, (base, exceptions.MisconfigurationException), body)
            _classes[(base, namespace)] = built
    return built  # type: ignore[return-value]


def min_loss_scale_error(exc: BaseException, spec: str, min_loss_scale: float) -> str:
    """The message for DeepSpeed's "overflow at the lowest loss scale" exception ``exc``: DeepSpeed's text first,
    then what it means and what to do (one wording for the Trainer and Fabric)."""
    return (
        f"{exc} Under {spec} every step overflowed at DeepSpeed's lowest loss scale "
        f"(min_loss_scale={min_loss_scale}): the fp16 gradients are not finite even "
        "unscaled, so every step is skipped. Look for inf/NaN in the loss or the data, lower the learning "
        "rate, or train in bf16 ('deepspeed:bf16-mixed'), whose range does not need loss scaling."
    )


def autocast_fp16_refusal(owner: str) -> str:
    """Why ``DeepSpeedPrecision("16-mixed", torch_autocast=True)`` is refused, and what to use instead."""
    from precision_deepspeed import _compat

    return (
        f"{owner} with torch_autocast=True (DeepSpeed's torch_autocast mode in float16) is refused: DeepSpeed "
        f"{_compat.deepspeed_version()} does not train it correctly. Its ZeRO optimizer scales the loss with a "
        "torch.amp.GradScaler (65536 at the start) but checks the gradients for overflow, clips them and reports "
        "their norm with its own loss scale, which is 1.0 because the parameters stay float32: a step whose scaled "
        "gradients overflow is skipped ('OVERFLOW! Skipping step') before the GradScaler sees it, so the GradScaler "
        "never lowers its scale and the following steps overflow and are skipped the same way; gradient clipping "
        "and the reported gradient norm see the gradients still multiplied by 65536. (Without ZeRO, DeepSpeed "
        "records no step its GradScaler skips.) Use 'deepspeed:bf16-mixed' (also with torch_autocast=True), "
        "which needs no loss scaling, or 'deepspeed:16-mixed' without torch_autocast on a device where DeepSpeed's "
        "native fp16 mode runs (CUDA)."
    )


def cpu_fp16_refusal(owner: str) -> str:
    """Why DeepSpeed's fp16 mode cannot run on this CPU (``_compat.cpu_supports_fp16()`` said no), and what can."""
    return (
        f"{owner} on the CPU: DeepSpeed's CPU accelerator refuses its fp16 mode here (DeepSpeed runs fp16 on a CPU "
        "from 0.16.8, and only with oneDNN's native fp16: AVX512-FP16 or AMX-FP16). Use 'deepspeed:bf16-mixed' (also "
        "with torch_autocast=True). DeepSpeed's fp16 autocast (DeepSpeedPrecision('16-mixed', torch_autocast=True)) "
        "is refused too: its ZeRO optimizer skips overflowing steps without lowering its GradScaler's scale."
    )


__all__ = [
    "LIGHTNING_BACKWARD_WARNING",
    "LIGHTNING_CLIP_BY_VALUE_ERROR",
    "LIGHTNING_LBFGS_ERROR",
    "LIGHTNING_SKIPPED_BACKWARD_ERROR",
    "CheckpointPrecisionError",
    "DeepSpeedConfigConflictError",
    "DeepSpeedOverflowStormError",
    "DeepSpeedPrecisionError",
    "KeepFP32Error",
    "autocast_fp16_refusal",
    "cpu_fp16_refusal",
    "error_class",
    "min_loss_scale_error",
    "setup_alone_error",
]
