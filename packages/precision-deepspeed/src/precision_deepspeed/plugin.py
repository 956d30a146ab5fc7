"""``DeepSpeedPrecision``: Lightning's DeepSpeed precision plugin, with a plugin-owned DeepSpeed config section.

The class keeps Lightning's name and public API, so Lightning's ``DeepSpeedStrategy`` accepts it and checkpoints
stay portable between this plugin and Lightning's built-in. What it adds:

* the precision section of DeepSpeed's config is the plugin's (:mod:`precision_deepspeed.config`): fp16 with
  dynamic loss scaling and all its knobs, bf16, or torch autocast inside the engine; a user config that
  contradicts it is an error naming both, never silently overridden;
* the Trainer's ``gradient_clip_val`` reaches DeepSpeed's ``gradient_clipping``, and a contradiction is an error;
* ``precision_base.Trainer(precision_plugin="deepspeed:...", accelerator="cpu")`` picks a DeepSpeed strategy that
  runs on DeepSpeed's CPU accelerator (:class:`~precision_deepspeed.strategy.DeepSpeedCPUStrategy`);
* ``convert_output`` returns floating outputs in the default dtype;
* :meth:`DeepSpeedPrecision.dtypes` states the dtype of each thing the plugin governs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.plugins.precision import DeepSpeedPrecision as _LightningDeepSpeedPrecision
from lightning.pytorch.utilities import GradClipAlgorithmType, rank_zero_warn
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor
from torch.nn import Module
from torch.optim import LBFGS, Optimizer

from precision_base import DtypeTable, PrecisionPlugin, PrecisionPluginError
from precision_base.casting import cast_floating
from precision_base.spec import PRECISIONS
from precision_deepspeed.config import (
    AUTOCAST_PRECISIONS,
    HALF_PRECISIONS,
    LossScaling,
    apply_gradient_clipping,
    merge_precision_section,
    render_precision_section,
)

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import Strategy

_DTYPE_NAMES: dict[str, str] = {
    "32-true": "float32",
    "16-true": "float16",
    "16-mixed": "float16",
    "bf16-true": "bfloat16",
    "bf16-mixed": "bfloat16",
}


class DeepSpeedPrecisionError(PrecisionPluginError, MisconfigurationException):
    """Training cannot go on as asked under DeepSpeed (also a Lightning ``MisconfigurationException``)."""


@functools.cache
def _deepspeed_constants() -> frozenset[str]:
    """Names defined in ``deepspeed.runtime.constants``: which config sections the installed DeepSpeed knows."""
    try:
        from deepspeed.runtime import constants
    except ImportError:  # pragma: no cover - deepspeed is a dependency
        return frozenset()
    return frozenset(dir(constants))


def deepspeed_has_torch_autocast() -> bool:
    """Whether the installed DeepSpeed reads a ``torch_autocast`` config section."""
    return "TORCH_AUTOCAST" in _deepspeed_constants()


def deepspeed_keeps_buffer_dtype() -> bool:
    """Whether the installed DeepSpeed leaves buffers in their dtype when it casts a module to fp16/bf16.

    Releases that know ``data_types.buffer_dtype`` cast parameters only; older ones cast the whole module.
    """
    return "BUFFER_DTYPE" in _deepspeed_constants()


class DeepSpeedPrecision(PrecisionPlugin, _LightningDeepSpeedPrecision):  # type: ignore[misc]
    """Precision plugin for DeepSpeed: the engine runs the model in the precision's dtype.

    Dtypes under the default (DeepSpeed-native) mode, for ``16-*``/``bf16-*`` with ``half`` = fp16/bf16:

    * parameters: fp32 master copy in DeepSpeed's optimizer; the module's working copy is ``half``
      (cast by ``deepspeed.initialize``; ``*-true`` casts it already in ``convert_module``);
    * compute: ``half``; gradients are reduced in ``half`` (DeepSpeed's ``communication_data_type``);
    * inputs: floating inputs are cast to ``half`` by ``convert_input``; outputs back to the default dtype;
    * no ``torch.autocast``.

    With ``torch_autocast=True`` (``16-mixed``/``bf16-mixed``, DeepSpeed releases with a ``torch_autocast``
    section) the module stays fp32, inputs stay fp32, and forward runs under ``torch.autocast`` in ``half``.

    Args:
        precision: ``"32-true"``, ``"16-true"``, ``"bf16-true"``, ``"16-mixed"`` or ``"bf16-mixed"``.
        loss_scale: fp16 only: ``0`` for dynamic loss scaling (default), otherwise a static scale.
        initial_scale_power: fp16 only: dynamic scaling starts at ``2 ** initial_scale_power``.
        loss_scale_window: fp16 only: steps without overflow before the scale is raised.
        hysteresis: fp16 only: overflows tolerated before the scale is lowered.
        consecutive_hysteresis: fp16 only: refill the hysteresis budget after each step without overflow.
        min_loss_scale: fp16 only: the lowest loss scale.
        torch_autocast: run the engine's forward under ``torch.autocast`` and keep fp32 parameters (mixed only).
        autocast_lower_precision_safe_modules: with ``torch_autocast``, ``"package.Class"`` names of modules whose
            parameters DeepSpeed communicates in the autocast dtype.

    Raises:
        ValueError: an unsupported ``precision``, fp16 knobs under a non-fp16 precision, or ``torch_autocast`` under a
            ``*-true`` precision or with a DeepSpeed that has no ``torch_autocast`` section.
    """

    backend: ClassVar[str] = "deepspeed"
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS

    def __init__(
        self,
        precision: str,
        *,
        loss_scale: float = 0.0,
        initial_scale_power: int = 16,
        loss_scale_window: int = 1000,
        hysteresis: int = 2,
        consecutive_hysteresis: bool = False,
        min_loss_scale: int = 1,
        torch_autocast: bool = False,
        autocast_lower_precision_safe_modules: Optional[Sequence[str]] = None,
    ) -> None:
        if not isinstance(precision, str) or precision not in self.precisions:
            raise ValueError(
                f"DeepSpeedPrecision(precision={precision!r}) is not supported; precision must be one of "
                + ", ".join(self.precisions)
            )
        scaling = LossScaling(
            loss_scale=loss_scale,
            initial_scale_power=initial_scale_power,
            loss_scale_window=loss_scale_window,
            hysteresis=hysteresis,
            consecutive_hysteresis=consecutive_hysteresis,
            min_loss_scale=min_loss_scale,
        )
        if scaling != LossScaling() and (precision not in HALF_PRECISIONS or torch_autocast):
            raise ValueError(
                f"fp16 loss scaling options apply to DeepSpeed's fp16 mode ({', '.join(HALF_PRECISIONS)}) only; "
                f"precision={precision!r}{' with torch_autocast=True' if torch_autocast else ''} does not use them"
            )
        if torch_autocast:
            if precision not in AUTOCAST_PRECISIONS:
                raise ValueError(
                    f"torch_autocast=True needs a mixed precision ({', '.join(AUTOCAST_PRECISIONS)}), got {precision!r}"
                )
            if not deepspeed_has_torch_autocast():
                raise ValueError(
                    "torch_autocast=True needs a DeepSpeed release that reads the 'torch_autocast' config section; "
                    "the installed DeepSpeed does not. Upgrade DeepSpeed or use torch_autocast=False."
                )
        elif autocast_lower_precision_safe_modules is not None:
            raise ValueError("autocast_lower_precision_safe_modules is only used with torch_autocast=True")
        super().__init__(precision)  # type: ignore[arg-type]
        self.loss_scaling = scaling
        self.torch_autocast = bool(torch_autocast)
        self.autocast_lower_precision_safe_modules = (
            tuple(autocast_lower_precision_safe_modules) if autocast_lower_precision_safe_modules is not None else None
        )
        self._configured_clip: Optional[float] = None
        self._warned: set[str] = set()

    # -- the DeepSpeed config ---------------------------------------------------------------------------
    @property
    def spec(self) -> str:
        """The plugin's name, e.g. ``"deepspeed:bf16-mixed"``."""
        return f"{self.backend}:{self.precision}"

    def precision_section(self) -> dict[str, Any]:
        """The precision section of the DeepSpeed config this plugin needs (``fp16``, ``bf16``, ``torch_autocast``)."""
        return render_precision_section(
            self.precision,
            loss_scaling=self.loss_scaling,
            torch_autocast=self.torch_autocast,
            autocast_lower_precision_safe_modules=self.autocast_lower_precision_safe_modules,
        )

    def deepspeed_config(self, user_config: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        """A copy of ``user_config`` with this plugin's precision section merged in.

        Raises:
            precision_deepspeed.config.DeepSpeedConfigConflictError: ``user_config`` contradicts the plugin.
        """
        return merge_precision_section(user_config, self.precision_section(), owner=self.spec)

    def apply_to_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Merge this plugin's precision section into ``config`` in place (a strategy's ``config``) and return it."""
        merged = self.deepspeed_config(config)
        config.clear()
        config.update(merged)
        return config

    def describe(self) -> Mapping[str, Any]:
        """For ``precision-plugins show``: the DeepSpeed config section this plugin writes."""
        return {"DeepSpeed config section": self.precision_section()}

    def configure_strategy(
        self, strategy: Union[str, Strategy], *, accelerator: Any, devices: Any
    ) -> Union[str, Strategy]:
        """Return a DeepSpeed strategy for the Trainer, with this plugin's config section merged into its config.

        ``"auto"``, ``"deepspeed"`` and Lightning's ``"deepspeed_stage_*"`` names become a strategy instance: on the
        CPU (``accelerator="cpu"``, or ``"auto"`` with no CUDA device visible) a
        :class:`~precision_deepspeed.strategy.DeepSpeedCPUStrategy`, otherwise Lightning's ``DeepSpeedStrategy``.
        A ``DeepSpeedStrategy`` instance is kept. Anything else raises
        :class:`~precision_base.TrainerConfigurationError` saying what to pass.
        """
        from precision_deepspeed.strategy import resolve_strategy

        resolved = resolve_strategy(
            strategy,
            accelerator=accelerator,
            precision=self.precision,
            owner=self.spec,
            native_fp16=not self.torch_autocast,
        )
        assert resolved.config is not None
        self.apply_to_config(resolved.config)
        return resolved

    # -- dtypes -----------------------------------------------------------------------------------------
    def dtypes(self) -> DtypeTable:
        """The dtype of parameters, compute, gradient reduction, buffers and inputs under this plugin."""
        if self.precision == "32-true":
            return DtypeTable(
                parameters="float32", compute="float32", reduction="float32", buffers="float32",
                inputs="float32", init="float32", autocast=None,
            )  # fmt: skip
        half = _DTYPE_NAMES[self.precision]
        if self.torch_autocast:
            return DtypeTable(
                parameters="float32", compute=half, reduction=half, buffers="float32", inputs="float32",
                init="float32", autocast=half,
                notes=(
                    "DeepSpeed's torch_autocast mode: the module stays float32; forward runs under torch.autocast",
                    f"reduction: {half} for parameters of lower-precision-safe modules (Linear, Conv by default), "
                    "float32 for the others",
                ),
            )  # fmt: skip
        true = self.precision.endswith("-true")
        buffers = half if true or not deepspeed_keeps_buffer_dtype() else "float32"
        return DtypeTable(
            parameters="float32", compute=half, reduction=half, buffers=buffers, inputs=half,
            init=half if true else "float32", autocast=None,
            notes=(
                f"parameters: DeepSpeed's optimizer updates a float32 master copy; the module computes with a {half} "
                f"copy ({'cast by convert_module' if true else 'cast by deepspeed.initialize'})",
                "no torch.autocast: every op runs in the module's dtype (DeepSpeed's native "
                + ("fp16 mode with dynamic loss scaling)" if half == "float16" else "bf16 mode)"),
            ),
        )  # fmt: skip

    # -- conversions and contexts -----------------------------------------------------------------------
    def convert_module(self, module: Module) -> Module:
        """``*-true``: cast the module to the precision's dtype; otherwise return it unchanged (DeepSpeed casts it)."""
        if self.precision.endswith("-true") and self.precision != "32-true":
            return module.to(dtype=self._desired_dtype)
        return module

    def convert_input(self, data: Any) -> Any:
        """Cast floating tensors in ``data`` to the dtype the engine computes in (none under ``torch_autocast``)."""
        if self.torch_autocast:
            return data
        return cast_floating(data, self._desired_dtype)

    def convert_output(self, data: Any) -> Any:
        """Cast floating tensors in ``data`` back to the default dtype (``torch.get_default_dtype()``)."""
        return cast_floating(data, torch.get_default_dtype())

    def tensor_init_context(self) -> AbstractContextManager[Any]:
        """``*-true``: create floating tensors in the precision's dtype; otherwise in the default dtype."""
        return super().tensor_init_context()

    def module_init_context(self) -> AbstractContextManager[Any]:
        """Like :meth:`tensor_init_context`, for module parameters."""
        return self.tensor_init_context()

    def forward_context(self) -> AbstractContextManager[Any]:
        """``torch.autocast`` on the plugin's device under ``torch_autocast=True``; otherwise nothing."""
        if self.torch_autocast:
            return torch.autocast(device_type=self.device_type, dtype=self._desired_dtype)
        return nullcontext()

    # -- training hooks ---------------------------------------------------------------------------------
    def connect(self, model: Any, optimizers: Any, lr_schedulers: Any) -> Any:
        """Bind the device, then check the strategy's DeepSpeed config against the plugin and the Trainer.

        When the strategy carries a DeepSpeed ``config`` (Lightning's ``DeepSpeedStrategy`` and subclasses), the
        plugin's section is merged into it (an error if it contradicts) and the Trainer's ``gradient_clip_val`` is
        checked against ``gradient_clipping``.
        """
        result = super().connect(model, optimizers, lr_schedulers)
        trainer = getattr(model, "_trainer", None)
        config = getattr(getattr(trainer, "strategy", None), "config", None)
        if isinstance(config, dict):
            self.apply_to_config(config)
            apply_gradient_clipping(config, trainer.gradient_clip_val, owner=self.spec)  # type: ignore[union-attr]
            clip = config.get("gradient_clipping")
            self._configured_clip = float(clip) if clip is not None else None
        return result

    def backward(  # type: ignore[override]
        self,
        tensor: Tensor,
        model: pl.LightningModule,
        optimizer: Any,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        r"""Back-propagate ``tensor`` through the DeepSpeed engine; ``*args``/``**kwargs`` go to ``engine.backward``.

        A ``LightningModule.backward`` override is ignored (with a warning): the engine owns the backward pass
        (loss scaling, gradient partitioning and reduction). ``optimizer`` is unused.
        """
        if is_overridden("backward", model):
            self._warn_once(
                "backward",
                f"{type(model).__name__} overrides LightningModule.backward, but {self.spec} ignores it: DeepSpeed's "
                "engine runs the backward pass itself (loss scaling, gradient partitioning and reduction).",
            )
        self._engine(model).backward(tensor, *args, **kwargs)

    def optimizer_step(  # type: ignore[override]
        self,
        optimizer: Any,
        model: pl.LightningModule,
        closure: Callable[[], Any],
        **kwargs: Any,
    ) -> Any:
        """Run the closure (forward and backward), the pre-step hooks, then ``engine.step(**kwargs)``.

        Raises:
            DeepSpeedPrecisionError: the optimizer is ``torch.optim.LBFGS``, or ``training_step`` returned ``None``
                (skipped backward) under automatic optimization.
        """
        if isinstance(optimizer, LBFGS):
            raise DeepSpeedPrecisionError(
                f"{self.spec} cannot step torch.optim.LBFGS: LBFGS re-evaluates the closure several times per step, "
                "and DeepSpeed's engine steps once per backward. Use another optimizer (e.g. torch.optim.AdamW)."
            )
        closure_result = closure()
        self._after_closure(model, optimizer)
        if closure_result is None and model.automatic_optimization:
            raise DeepSpeedPrecisionError(
                f"training_step returned None (a skipped backward), which {self.spec} cannot do under automatic "
                "optimization: every process must run backward and step DeepSpeed's engine together. Return a loss, "
                "or switch to manual optimization (self.automatic_optimization = False)."
            )
        return self._engine(model).step(**kwargs)

    def clip_gradients(
        self,
        optimizer: Optimizer,
        clip_val: Union[int, float] = 0.0,
        gradient_clip_algorithm: GradClipAlgorithmType = GradClipAlgorithmType.NORM,
    ) -> None:
        """DeepSpeed clips by norm inside ``engine.step()`` at its config's ``gradient_clipping``; nothing here.

        Raises:
            DeepSpeedPrecisionError: clipping by value was asked for (DeepSpeed clips by norm only).
        """
        if clip_val is None or clip_val <= 0:
            return
        if gradient_clip_algorithm == GradClipAlgorithmType.VALUE:
            raise DeepSpeedPrecisionError(
                f"{self.spec}: DeepSpeed clips gradients by norm only; use gradient_clip_algorithm='norm'."
            )
        if self._configured_clip is not None and float(clip_val) != self._configured_clip:
            self._warn_once(
                "clip",
                f"clip_gradients(clip_val={clip_val}) is not applied: DeepSpeed clips by norm at "
                f"gradient_clipping={self._configured_clip} from its config. Set the Trainer's gradient_clip_val "
                "instead; it reaches DeepSpeed's config.",
            )

    # -- helpers ----------------------------------------------------------------------------------------
    def _engine(self, model: pl.LightningModule) -> Any:
        engine = model.trainer.model
        if not (hasattr(engine, "backward") and hasattr(engine, "step")):
            raise DeepSpeedPrecisionError(
                f"{self.spec} needs a DeepSpeed engine, but the Trainer's model is {type(engine).__name__}. Use a "
                "DeepSpeed strategy (precision_base.Trainer picks one for strategy='auto')."
            )
        return engine

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            rank_zero_warn(message)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_warned"] = set()
        return state


__all__ = ["DeepSpeedPrecision", "DeepSpeedPrecisionError", "deepspeed_has_torch_autocast"]
