"""``DeepSpeedStepsImpl``: the training-step hooks of both ``DeepSpeedPrecision`` classes, a mixin without Lightning
bases ([`DeepSpeedPrecisionImpl`][precision_deepspeed.implementation.DeepSpeedPrecisionImpl] derives from it).

DeepSpeed's engine runs backward (loss scaling, gradient partitioning and reduction), the optimizer step and
clipping by norm; the hooks here hand each to it, turn DeepSpeed's "overflow at the lowest loss scale" into a
[`DeepSpeedPrecisionError`][precision_deepspeed.errors.DeepSpeedPrecisionError] (one wording for the Trainer and
Fabric), and record
every optimizer step in the shared ``max_skipped_steps`` watch ([`precision_base.kit.overflow.OverflowWatch`][]):
skipped when ``engine.was_step_applied()`` is false, or DeepSpeed's own optimizer flagged an overflow (what Fabric
steps).

Before the first step of each optimizer, at both doors and with any DeepSpeed strategy, the numerics check
([`precision_base.kit.numerics`][]) reads the optimizer DeepSpeed really steps (`stepped_optimizer`): under DeepSpeed's
fp16/bf16 modes and ZeRO that is the torch optimizer over float32 master partitions, so Adam's ``eps=1e-8`` is fine
there and only a value that is 0 in float32 is warned about. ZeRO-3 fills that optimizer's groups only while it
steps: they are checked from its step pre-hook (``torch.optim.Optimizer.register_step_pre_hook``). Not at
``connect``: Lightning connects the plugin before ``deepspeed.initialize`` makes the master copy, so the optimizer
seen there holds the module's fp16/bf16 parameters, which DeepSpeed does not step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
from torch import Tensor
from torch.optim import LBFGS, Optimizer
from typing_extensions import override

from precision_base import PrecisionPlugin
from precision_base.kit.numerics import UnderflowCheck
from precision_base.kit.overflow import OverflowWatch
from precision_deepspeed import _compat
from precision_deepspeed.config import HALF_PRECISIONS, LossScaling
from precision_deepspeed.errors import (
    LIGHTNING_BACKWARD_WARNING,
    LIGHTNING_CLIP_BY_VALUE_ERROR,
    LIGHTNING_LBFGS_ERROR,
    LIGHTNING_SKIPPED_BACKWARD_ERROR,
    DeepSpeedPrecisionError,
    error_class,
    min_loss_scale_error,
)

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.precision import DeepSpeedPrecision as _LightningBase
    from lightning.pytorch.utilities import GradClipAlgorithmType
else:
    _LightningBase = object  # at run time the concrete class supplies Lightning's class of its namespace


class DeepSpeedStepsImpl(PrecisionPlugin, _LightningBase):  # type: ignore[misc]
    """``backward``, ``optimizer_step`` and ``clip_gradients`` through DeepSpeed's engine, and the skipped-step watch.

    The attributes below are set by
    [`DeepSpeedPrecisionImpl`][precision_deepspeed.implementation.DeepSpeedPrecisionImpl].
    """

    loss_scaling: LossScaling
    _overflow: OverflowWatch
    _configured_clip: Optional[float]
    _warned: set[str]
    _underflow: UnderflowCheck

    @override
    def backward(  # type: ignore[override]
        self,
        tensor: Tensor,
        model: pl.LightningModule,
        optimizer: Any,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        r"""Back-propagate ``tensor`` through the DeepSpeed engine; ``*args``/``**kwargs`` go to ``engine.backward``.

        A ``LightningModule.backward`` override is ignored (with Lightning's warning): the engine owns the backward
        pass (loss scaling, gradient partitioning and reduction). ``optimizer`` is unused.
        """
        if _compat.overrides_backward(model):
            self._warn_once(
                "backward",
                f"{LIGHTNING_BACKWARD_WARNING} ({type(model).__name__}.backward is not called under {self.spec}: "
                "DeepSpeed's engine runs loss scaling, gradient partitioning and reduction itself.)",
            )
        self._engine(model).backward(tensor, *args, **kwargs)

    @override
    def optimizer_step(  # type: ignore[override]
        self,
        optimizer: Any,
        model: pl.LightningModule,
        closure: Callable[[], Any],
        **kwargs: Any,
    ) -> Any:
        """Run the closure (forward and backward), the pre-step hooks, then ``engine.step(**kwargs)`` under
        ``torch.no_grad()`` (without it, DeepSpeed 0.18's ZeRO-2 step fails on gloo with torch 2.13+: "Output 0 of
        Split is a view and is being modified inplace.").

        Raises:
            DeepSpeedPrecisionError: the optimizer is ``torch.optim.LBFGS``, ``training_step`` returned ``None``
                (skipped backward) under automatic optimization, or (fp16) a step overflowed again at the lowest loss
                scale: DeepSpeed's own message first, then what to do.
        """
        if isinstance(optimizer, LBFGS):
            raise self._error(DeepSpeedPrecisionError)(
                f"{LIGHTNING_LBFGS_ERROR} {self.spec} cannot step torch.optim.LBFGS: LBFGS re-evaluates the closure "
                "several times per step, and DeepSpeed's engine steps once per backward. Use another optimizer "
                "(e.g. torch.optim.AdamW)."
            )
        closure_result = closure()
        _compat.after_closure(self, model, optimizer)
        if closure_result is None and model.automatic_optimization:
            raise self._error(DeepSpeedPrecisionError)(
                f"{LIGHTNING_SKIPPED_BACKWARD_ERROR}. Under {self.spec} every process must run backward and step "
                "DeepSpeed's engine together: return a loss, or switch to manual optimization "
                "(self.automatic_optimization = False)."
            )
        engine = self._engine(model)
        self._check_numerics(engine)
        result = self._step_checked(lambda: engine.step(**kwargs))
        self._count_skipped_step(engine)
        return result

    def _check_numerics(self, engine_or_optimizer: Any) -> None:
        """Before a step: the numerics warning ([`precision_base.kit.numerics.UnderflowCheck`][], rank 0) for the
        optimizer DeepSpeed steps (`stepped_optimizer`), each parameter group once. ZeRO-3 fills that optimizer's
        groups only inside its step (one sub-group at a time): those are checked from its step pre-hook."""
        self._underflow((stepped_optimizer(engine_or_optimizer),), self.spec, self._rank_zero_warn, in_step=True)

    def _step_checked(self, step: Callable[[], Any]) -> Any:
        """``step()`` (the engine's or its optimizer's) under ``torch.no_grad()`` (as torch's optimizers step;
        without it, DeepSpeed 0.18's ZeRO-2 step fails on gloo with torch 2.13+: "Output 0 of Split is a view and is
        being modified inplace.").

        Raises:
            DeepSpeedPrecisionError: (fp16) a step overflowed again at the lowest loss scale: DeepSpeed's own message
                first, then what to do ([`precision_deepspeed.errors.min_loss_scale_error`][]).
        """
        try:
            with torch.no_grad():
                return step()
        except Exception as exc:
            if not _compat.is_min_loss_scale_error(exc):
                raise
            message = min_loss_scale_error(exc, self.spec, self.loss_scaling.min_loss_scale)
            raise self._error(DeepSpeedPrecisionError)(message) from exc

    def _error(self, base: type[DeepSpeedPrecisionError]) -> type[DeepSpeedPrecisionError]:
        """``base`` as raised by this plugin: also its Lightning namespace's ``MisconfigurationException``."""
        return error_class(base, self.lightning.__name__)

    def _count_skipped_step(self, engine: Any) -> None:
        """After ``engine.step()``: record whether DeepSpeed applied the step (``engine.was_step_applied()``, read at
        gradient-accumulation boundaries only) in the shared watch ([`precision_base.kit.overflow`][]).

        Raises:
            DeepSpeedOverflowStormError: ``max_skipped_steps`` steps in a row were skipped (an
                [`OverflowStormError`][precision_base.OverflowStormError]); a ``RuntimeWarning`` comes at half the
                limit.
        """
        skipped = _compat.engine_step_skipped(engine)
        if skipped is None:
            return
        scale = _compat.engine_loss_scale(engine) if self.precision in HALF_PRECISIONS else None
        self._overflow.after_step(skipped, scale, self.spec)

    def _count_skipped_optimizer_step(self, optimizer: Any) -> None:
        """Like `_count_skipped_step`, for DeepSpeed's optimizer stepped on its own (Lightning Fabric steps the
        engine's ZeRO/fp16 optimizer, not the engine): skipped when it flagged an overflow."""
        scale = _compat.optimizer_loss_scale(optimizer) if self.precision in HALF_PRECISIONS else None
        self._overflow.after_step(_compat.optimizer_overflowed(optimizer), scale, self.spec)

    @override
    def clip_gradients(
        self,
        optimizer: Optimizer,
        clip_val: Union[int, float] = 0.0,
        gradient_clip_algorithm: Union[GradClipAlgorithmType, str] = "norm",
    ) -> None:
        """DeepSpeed clips by norm inside ``engine.step()`` at its config's ``gradient_clipping``; nothing here.

        Raises:
            DeepSpeedPrecisionError: clipping by value was asked for (DeepSpeed clips by norm only).
        """
        if clip_val is None or clip_val <= 0:
            return
        if gradient_clip_algorithm == "value":  # Lightning's GradClipAlgorithmType is a str enum
            raise self._error(DeepSpeedPrecisionError)(
                f"{LIGHTNING_CLIP_BY_VALUE_ERROR} {self.spec}: use gradient_clip_algorithm='norm'."
            )
        if self._configured_clip is not None and float(clip_val) != self._configured_clip:
            self._warn_once(
                "clip",
                f"clip_gradients(clip_val={clip_val}) is not applied: DeepSpeed clips by norm at "
                f"gradient_clipping={self._configured_clip} from its config. Set the Trainer's gradient_clip_val "
                "instead; it reaches DeepSpeed's config.",
            )

    def _engine(self, model: pl.LightningModule) -> Any:
        engine = model.trainer.model
        if not (hasattr(engine, "backward") and hasattr(engine, "step")):
            raise self._error(DeepSpeedPrecisionError)(
                f"{self.spec} needs a DeepSpeed engine, but the Trainer's model is {type(engine).__name__}. Use a "
                "DeepSpeed strategy (precision_base.Trainer picks one for strategy='auto')."
            )
        return engine

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.lightning.utilities.rank_zero_warn(message)


def stepped_optimizer(engine_or_optimizer: Any) -> Any:
    """The torch optimizer whose parameter groups a DeepSpeed step updates, given the engine or DeepSpeed's optimizer.

    The engine's ``optimizer`` is DeepSpeed's wrapper under fp16, bf16 and ZeRO (its own ``optimizer`` is the torch
    optimizer, whose groups hold the float32 master partitions) or the torch optimizer itself (``32-true`` without
    ZeRO); anything else is returned as it is.
    """
    optimizer = getattr(engine_or_optimizer, "optimizer", None)
    if optimizer is None or not hasattr(optimizer, "param_groups"):
        optimizer = engine_or_optimizer
    inner = getattr(optimizer, "optimizer", None)
    return inner if inner is not None and hasattr(inner, "param_groups") else optimizer


__all__ = ["DeepSpeedStepsImpl", "stepped_optimizer"]
