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
* Lightning's own ``DeepSpeedStrategy`` (what GPU users pass) gets the plugin's section with every option: the
  defaults Lightning writes first are told apart from the user's config;
* the same code serves ``lightning.pytorch`` and ``pytorch_lightning``: everything lives in
  :class:`DeepSpeedPrecisionImpl`, and ``precision_base.namespaces.for_namespace(DeepSpeedPrecision,
  "pytorch_lightning")`` builds the class for the other namespace;
* :meth:`DeepSpeedPrecision.dtypes` states the dtype of each thing the plugin governs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.plugins.precision import DeepSpeedPrecision as _LightningDeepSpeedPrecision
from lightning.pytorch.utilities import GradClipAlgorithmType, rank_zero_warn
from torch import Tensor
from torch.nn import Module
from torch.optim import LBFGS, Optimizer
from typing_extensions import override

from precision_base import DtypeTable, PrecisionPlugin, PrecisionPluginError
from precision_base.casting import cast_floating
from precision_base.doors import check_caller
from precision_base.keep_fp32 import KeepSpec
from precision_base.namespaces import namespace_of
from precision_base.overflow import DEFAULT_MAX_SKIPPED_STEPS, OverflowStormError, OverflowWatch
from precision_base.plugin_support import PRECISION_DTYPE_NAMES, precision_dtype
from precision_base.spec import PRECISIONS
from precision_deepspeed import _compat, switch
from precision_deepspeed.config import (
    AUTOCAST_PRECISIONS,
    HALF_PRECISIONS,
    LossScaling,
    merge_precision_section,
    render_precision_section,
)
from precision_deepspeed.keep_fp32 import install_kept, parse_keep_fp32, reduced_in_half
from precision_deepspeed.resume import CheckpointPrecisionError, SavedPrecision, engine_mode, mismatch_error
from precision_deepspeed.selection import resolve_strategy
from precision_deepspeed.strategy import guard_resume, write_plugin_config

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import Strategy

    _LightningBase = _LightningDeepSpeedPrecision  # mypy checks overrides and super() calls against Lightning's class
else:
    _LightningBase = object  # at run time the concrete class supplies Lightning's class of its namespace

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


class DeepSpeedPrecisionError(PrecisionPluginError, MisconfigurationException):
    """Training cannot go on as asked under DeepSpeed (also a Lightning ``MisconfigurationException``)."""


class DeepSpeedOverflowStormError(OverflowStormError, DeepSpeedPrecisionError):
    """``max_skipped_steps`` steps in a row were skipped for inf/NaN gradients under DeepSpeed.

    It is :class:`precision_base.OverflowStormError` (what the FSDP plugin raises too: catch that one), and also a
    :class:`DeepSpeedPrecisionError`, the type this plugin raised for it before the watch was shared.
    """


def autocast_fp16_refusal(owner: str) -> str:
    """Why ``DeepSpeedPrecision("16-mixed", torch_autocast=True)`` is refused, and what to use instead."""
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


def deepspeed_has_torch_autocast() -> bool:
    """Whether the installed DeepSpeed reads a ``torch_autocast`` config section."""
    return _compat.deepspeed_has_torch_autocast()


class DeepSpeedPrecisionImpl(PrecisionPlugin, _LightningBase):  # type: ignore[misc]
    """All code of :class:`DeepSpeedPrecision`; it has no Lightning base and reaches Lightning through ``super()``.

    See :class:`DeepSpeedPrecision` for the arguments and the dtypes.
    """

    backend: ClassVar[str] = "deepspeed"
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    lightning_precision_error: ClassVar[Optional[str]] = (
        "`Trainer(strategy='deepspeed', precision={precision!r})` is not supported. `precision` must be one of: "
        "{supported}."
    )

    def __init__(
        self,
        precision: Any,
        *,
        loss_scale: float = 0.0,
        initial_scale_power: int = 16,
        loss_scale_window: int = 1000,
        hysteresis: int = 2,
        consecutive_hysteresis: bool = False,
        min_loss_scale: int = 1,
        torch_autocast: bool = False,
        autocast_lower_precision_safe_modules: Optional[Sequence[str]] = None,
        max_skipped_steps: Optional[int] = DEFAULT_MAX_SKIPPED_STEPS,
        keep_fp32: Union[KeepSpec, Iterable[KeepSpec], None] = None,
        keep_fp32_defaults: bool = True,
    ) -> None:
        precision = self.canonical_precision(precision)
        watch = OverflowWatch(max_skipped_steps, DeepSpeedOverflowStormError)
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
            if not _compat.deepspeed_has_torch_autocast():
                raise ValueError(
                    "torch_autocast=True needs a DeepSpeed release that reads the 'torch_autocast' config section; "
                    "the installed DeepSpeed does not. Upgrade DeepSpeed or use torch_autocast=False."
                )
            if precision in HALF_PRECISIONS:
                raise ValueError(autocast_fp16_refusal(f"deepspeed:{precision}"))
        elif autocast_lower_precision_safe_modules is not None:
            raise ValueError("autocast_lower_precision_safe_modules is only used with torch_autocast=True")
        keep = parse_keep_fp32(
            keep_fp32,
            precision=precision,
            torch_autocast=bool(torch_autocast),
            safe_modules=autocast_lower_precision_safe_modules,
            defaults=bool(keep_fp32_defaults),
        )
        super().__init__(precision)  # type: ignore[call-arg]
        self.keep_fp32 = keep
        self.loss_scaling = scaling
        self.torch_autocast = bool(torch_autocast)
        self._compute_dtype = precision_dtype(precision)  # looked up once: convert_input runs every step
        self.autocast_lower_precision_safe_modules = (
            tuple(autocast_lower_precision_safe_modules) if autocast_lower_precision_safe_modules is not None else None
        )
        self.max_skipped_steps = watch.limit
        self._overflow = watch
        self._configured_clip: Optional[float] = None
        self._fitting = True
        self._warned: set[str] = set()

    # -- the DeepSpeed config ---------------------------------------------------------------------------
    def precision_section(self) -> dict[str, Any]:
        """The precision section of the DeepSpeed config this plugin needs (``fp16``, ``bf16``, ``torch_autocast``).

        With ``max_skipped_steps`` (default ``precision_base.overflow.DEFAULT_MAX_SKIPPED_STEPS``) under bf16, on a
        DeepSpeed whose ``check_grad_overflow`` is off by default (0.17 up to 0.19.0), the ``bf16`` section turns it
        on, without which DeepSpeed's bf16 mode would never skip a step to count; where it is on by default (0.19.8)
        nothing is added. DeepSpeed releases without the option (before 0.17) never skip a bf16 step: there is
        nothing to count.
        """
        section = render_precision_section(
            self.precision,
            loss_scaling=self.loss_scaling,
            torch_autocast=self.torch_autocast,
            autocast_lower_precision_safe_modules=self.autocast_lower_precision_safe_modules,
        )
        if (
            self.max_skipped_steps is not None
            and section["bf16"].get("enabled")
            and _compat.deepspeed_checks_bf16_overflow()
            and not _compat.deepspeed_bf16_overflow_check_default()
        ):
            section["bf16"]["check_grad_overflow"] = True
        return section

    def deepspeed_config(self, user_config: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        """A copy of ``user_config`` with this plugin's precision section merged in (for a DeepSpeed config you pass
        to ``deepspeed.initialize`` yourself; a strategy's config gets the section without this call).

        Raises:
            precision_deepspeed.config.DeepSpeedConfigConflictError: ``user_config`` contradicts the plugin.
        """
        return merge_precision_section(user_config, self.precision_section(), owner=self.spec)

    def describe(self) -> Mapping[str, Any]:
        """For ``precision-plugins show``: the DeepSpeed config section this plugin writes, and ``keep_fp32``."""
        facts: dict[str, Any] = {"DeepSpeed config section": self.precision_section()}
        if self.keep_fp32:
            facts["keep_fp32"] = self.keep_fp32.facts(reduction=self._kept_reduction(), outputs="float32")
        return facts

    def _kept_reduction(self) -> str:
        """The gradient-reduction dtype of kept modules, as text (DeepSpeed picks it by module class)."""
        half = PRECISION_DTYPE_NAMES[self.precision]
        on_list = reduced_in_half(self.keep_fp32, self.autocast_lower_precision_safe_modules)
        if self.keep_fp32.patterns:
            return (
                f"float32, but {half} for parameters of kept modules whose exact class is on DeepSpeed's "
                "lower-precision-safe list (autocast_lower_precision_safe_modules; default Linear, Conv1d/2d/3d)"
            )
        if on_list:
            return f"{half} for {', '.join(on_list)} (on DeepSpeed's lower-precision-safe list), float32 otherwise"
        return "float32"

    def configure_strategy(
        self, strategy: Union[str, Strategy], *, accelerator: Any, devices: Any
    ) -> Union[str, Strategy]:
        """Return a DeepSpeed strategy for the Trainer; a user config that contradicts the plugin fails here.

        ``"auto"``, ``"deepspeed"`` and Lightning's ``"deepspeed_stage_*"`` names become a strategy instance: on the
        CPU (``accelerator="cpu"``, or ``"auto"`` with no CUDA device visible) a
        :class:`~precision_deepspeed.strategy.DeepSpeedCPUStrategy`, otherwise Lightning's ``DeepSpeedStrategy``.
        A ``DeepSpeedStrategy`` instance is kept. Anything else raises
        :class:`~precision_base.TrainerConfigurationError` saying what to pass. The plugin's section is written into
        the strategy's config later, once (:func:`precision_deepspeed.strategy.write_plugin_config`).
        """
        return resolve_strategy(  # type: ignore[no-any-return]
            strategy,
            accelerator=accelerator,
            section=self.precision_section(),
            precision=self.precision,
            owner=self.spec,
            namespace=namespace_of(self) or "lightning.pytorch",
            native_fp16=not self.torch_autocast,
        )

    def _default_keep_notes(self) -> tuple[str, ...]:
        """The default float32 rules in effect and what DeepSpeed's mode does for the modules they keep."""
        half = PRECISION_DTYPE_NAMES[self.precision]
        if self.torch_autocast:
            how = f"parameters float32 (as everywhere in this mode); reduction: {self._kept_reduction()}"
        else:
            buffers = "running statistics float32" if self.precision.endswith("-mixed") else f"buffers {half}"
            how = (
                f"their parameters are stored {half} like all others (deepspeed.initialize casts every parameter and "
                f"ZeRO flattens them into {half} groups; master float32 in the optimizer) and computed in float32 "
                f"from a float32 copy of each, taken inside the forward; inputs cast to float32, {buffers}; "
                f"outputs cast back to {half}; gradients reduced in {half}"
            )
        return tuple(f"default: {rule}; under DeepSpeed: {how}" for rule in self.keep_fp32.describe_defaults())

    # -- dtypes -----------------------------------------------------------------------------------------
    def dtypes(self) -> DtypeTable:
        """The dtype of parameters, compute, gradient reduction, buffers and inputs under this plugin."""
        if self.precision == "32-true":
            return DtypeTable(
                parameters="float32", compute="float32", reduction="float32", buffers="float32",
                inputs="float32", init="float32", autocast=None,
            )  # fmt: skip
        half = PRECISION_DTYPE_NAMES[self.precision]
        if self.torch_autocast:
            return DtypeTable(
                parameters="float32", compute=half, reduction=half, buffers="float32", inputs="float32",
                init="float32", autocast=half,
                notes=(
                    "DeepSpeed's torch_autocast mode: the module stays float32; forward runs under torch.autocast",
                    f"reduction: {half} for parameters of lower-precision-safe modules (Linear, Conv by default), "
                    "float32 for the others",
                ) + ((
                    f"keep_fp32 ({', '.join(self.keep_fp32.describe())}): float32 compute and outputs, autocast off "
                    f"inside; reduction: {self._kept_reduction()}",
                ) if self.keep_fp32 else ()) + self._default_keep_notes(),
            )  # fmt: skip
        true = self.precision.endswith("-true")
        buffers = half if true or not _compat.deepspeed_keeps_buffer_dtype() else "float32"
        return DtypeTable(
            parameters="float32", compute=half, reduction=half, buffers=buffers, inputs=half,
            init=half if true else "float32", autocast=None,
            notes=(
                f"parameters: DeepSpeed's optimizer updates a float32 master copy; the module computes with a {half} "
                f"copy ({'cast by convert_module' if true else 'cast by deepspeed.initialize'})",
                "no torch.autocast: every op runs in the module's dtype (DeepSpeed's native "
                + ("fp16 mode with dynamic loss scaling)" if half == "float16" else "bf16 mode)"),
                *self._default_keep_notes(),
            ),
        )  # fmt: skip

    # -- conversions and contexts -----------------------------------------------------------------------
    @override
    def convert_module(self, module: Module) -> Module:
        """``*-true``: cast the module to the precision's dtype; otherwise return it unchanged (DeepSpeed casts it).
        Kept modules (``keep_fp32``, and the default rules of ``keep_fp32_defaults``) get their float32 forward first:
        autocast off and float32 inputs under ``torch_autocast``; in DeepSpeed's native mode also float32 copies of
        their parameters inside the forward and outputs cast back to the precision's dtype
        (:func:`precision_deepspeed.keep_fp32.install_fp32_compute`).

        Raises:
            precision_base.doors.WrongDoorError: Lightning code of the other door (Fabric for this Trainer class, a
                Trainer strategy for the Fabric class) is setting the plugin up; the message names the class to use.
        """
        check_caller(self)
        if self.keep_fp32.active:
            native = None if self.torch_autocast else precision_dtype(self.precision)
            install_kept(self.keep_fp32, module, lambda: self.device_type, native)
        if self.precision.endswith("-true") and self.precision != "32-true":
            return module.to(dtype=precision_dtype(self.precision))
        return module

    @override
    def convert_input(self, data: Any) -> Any:
        """Cast floating tensors in ``data`` to the dtype the engine computes in (none under ``torch_autocast``)."""
        if self.torch_autocast:
            return data
        return cast_floating(data, self._compute_dtype)

    @override
    def tensor_init_context(self) -> AbstractContextManager[Any]:
        """``*-true``: create floating tensors in the precision's dtype; otherwise in the default dtype."""
        return super().tensor_init_context()  # type: ignore[misc, no-any-return]

    @override
    def module_init_context(self) -> AbstractContextManager[Any]:
        """Like :meth:`tensor_init_context`, for module parameters."""
        return self.tensor_init_context()

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        """``torch.autocast`` on the plugin's device under ``torch_autocast=True``; otherwise nothing."""
        if self.torch_autocast:
            return torch.autocast(device_type=self.device_type, dtype=self._compute_dtype)
        return nullcontext()

    @override
    def train_step_context(self) -> AbstractContextManager[Any]:  # type: ignore[override]
        """:meth:`forward_context` itself (Lightning wraps it in a generator context manager: ~1.5 us a step)."""
        return self.forward_context()

    @override
    def convert_output(self, data: Any) -> Any:
        """Floating tensors -> ``torch.get_default_dtype()``, as the contract's :meth:`convert_output` (without its
        per-call imports: this runs every step)."""
        return cast_floating(data, torch.get_default_dtype())

    # -- training hooks ---------------------------------------------------------------------------------
    @override
    def connect(self, model: Any, optimizers: Any, lr_schedulers: Any) -> Any:
        """Bind the device, and make sure the strategy's DeepSpeed config carries the plugin's section.

        With Lightning's own ``DeepSpeedStrategy`` this is where the section and the Trainer's ``gradient_clip_val``
        are written (:func:`precision_deepspeed.strategy.write_plugin_config`; Lightning has written its defaults by
        then and they give way); a ``DeepSpeedCPUStrategy`` has written them already.
        """
        result = super().connect(model, optimizers, lr_schedulers)
        trainer = _compat.trainer_of(model)
        strategy = getattr(trainer, "strategy", None)
        if strategy is not None:
            self._configured_clip = write_plugin_config(strategy)
        # evaluating a checkpoint in another precision is fine; only resuming training is checked
        self._fitting = getattr(getattr(trainer, "state", None), "fn", "fit") == "fit"
        if strategy is not None:
            guard_resume(strategy, self)  # Lightning's own DeepSpeedStrategy: check before DeepSpeed's loader runs
        return result

    @override
    def state_dict(self) -> dict[str, Any]:
        """What Lightning files in the checkpoint under ``"DeepSpeedPrecision"``: the precision and the plugin's
        DeepSpeed config section (Lightning's built-in class ignores both when it loads the checkpoint)."""
        return {"precision": self.precision, "deepspeed_config_section": self.precision_section()}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Check a checkpoint's recorded precision against the plugin's when training resumes from it.

        Lightning calls this after the strategy restored the engine, so it catches what DeepSpeed's loader lets
        through (fp16 <-> fp32, torch_autocast <-> fp32) with Lightning's own ``DeepSpeedStrategy`` and single-file
        checkpoints; :class:`~precision_deepspeed.strategy.DeepSpeedCPUStrategy` checks before DeepSpeed loads.

        Raises:
            precision_deepspeed.resume.CheckpointPrecisionError: the recorded DeepSpeed mode differs.
        """
        section = state_dict.get("deepspeed_config_section")
        if (
            self._fitting
            and isinstance(section, Mapping)
            and engine_mode(section) != engine_mode(self.precision_section())
        ):
            saved = SavedPrecision(engine_mode(section), state_dict.get("precision"))
            raise CheckpointPrecisionError(mismatch_error(None, saved, self.spec, self.precision_section()))

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
            raise DeepSpeedPrecisionError(
                f"{LIGHTNING_LBFGS_ERROR} {self.spec} cannot step torch.optim.LBFGS: LBFGS re-evaluates the closure "
                "several times per step, and DeepSpeed's engine steps once per backward. Use another optimizer "
                "(e.g. torch.optim.AdamW)."
            )
        closure_result = closure()
        self._after_closure(model, optimizer)  # type: ignore[misc]
        if closure_result is None and model.automatic_optimization:
            raise DeepSpeedPrecisionError(
                f"{LIGHTNING_SKIPPED_BACKWARD_ERROR}. Under {self.spec} every process must run backward and step "
                "DeepSpeed's engine together: return a loss, or switch to manual optimization "
                "(self.automatic_optimization = False)."
            )
        engine = self._engine(model)
        try:
            with torch.no_grad():  # as torch's optimizers step; DeepSpeed 0.18's ZeRO all-gather needs it on gloo
                result = engine.step(**kwargs)
        except Exception as exc:
            if not _compat.is_min_loss_scale_error(exc):
                raise
            raise DeepSpeedPrecisionError(
                f"{exc} Under {self.spec} every step overflowed at DeepSpeed's lowest loss scale "
                f"(min_loss_scale={self.loss_scaling.min_loss_scale}): the fp16 gradients are not finite even "
                "unscaled, so every step is skipped. Look for inf/NaN in the loss or the data, lower the learning "
                "rate, or train in bf16 ('deepspeed:bf16-mixed'), whose range does not need loss scaling."
            ) from exc
        self._count_skipped_step(engine)
        return result

    @override
    def precision_stats(self, strategy: Any = None) -> Mapping[str, float]:
        """What :class:`precision_base.PrecisionMonitor` logs, read from the DeepSpeed engine of ``strategy``:
        ``loss_scale`` (fp16 precisions: the scale DeepSpeed multiplies the loss by, its ``torch.amp.GradScaler``'s
        where the engine has one, else its loss scaler's), ``skipped_steps`` and ``nonfinite_grad_steps``
        (cumulative steps DeepSpeed skipped for inf/NaN gradients: fp16 overflow, bf16 ``check_grad_overflow``) and
        ``grad_norm`` (the global norm DeepSpeed computed at the last step, when it did). Empty before the engine
        exists."""
        engine = getattr(strategy, "model", None)
        if engine is None or not hasattr(engine, "step") or not hasattr(engine, "skipped_steps"):
            return {}
        # Fabric steps DeepSpeed's optimizer, not the engine, whose count then stays 0: the watch counted them
        skipped = float(max(_compat.engine_skipped_steps(engine), self._overflow.skipped_total))
        stats: dict[str, float] = {"skipped_steps": skipped, "nonfinite_grad_steps": skipped}
        if self.precision.startswith("16-"):
            scale = _compat.engine_loss_scale(engine)
            if scale is not None:
                stats["loss_scale"] = scale
        norm = engine.get_global_grad_norm()
        if norm is not None:
            stats["grad_norm"] = float(norm)
        return stats

    def _count_skipped_step(self, engine: Any) -> None:
        """After ``engine.step()``: record whether DeepSpeed applied the step (``engine.was_step_applied()``, read at
        gradient-accumulation boundaries only) in the shared watch (:mod:`precision_base.overflow`).

        Raises:
            DeepSpeedOverflowStormError: ``max_skipped_steps`` steps in a row were skipped (an
                :class:`~precision_base.OverflowStormError`); a ``RuntimeWarning`` comes at half the limit.
        """
        if not engine.is_gradient_accumulation_boundary():
            return
        scale = _compat.engine_loss_scale(engine) if self.precision in HALF_PRECISIONS else None
        self._overflow.after_step(not engine.was_step_applied(), scale, self.spec)

    def _count_skipped_optimizer_step(self, optimizer: Any) -> None:
        """Like :meth:`_count_skipped_step`, for DeepSpeed's optimizer stepped on its own (Lightning Fabric steps the
        engine's ZeRO/fp16 optimizer, not the engine): skipped when it flagged an overflow."""
        scale = _compat.optimizer_loss_scale(optimizer) if self.precision in HALF_PRECISIONS else None
        self._overflow.after_step(_compat.optimizer_overflowed(optimizer), scale, self.spec)

    @override
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
                f"{LIGHTNING_CLIP_BY_VALUE_ERROR} {self.spec}: use gradient_clip_algorithm='norm'."
            )
        if self._configured_clip is not None and float(clip_val) != self._configured_clip:
            self._warn_once(
                "clip",
                f"clip_gradients(clip_val={clip_val}) is not applied: DeepSpeed clips by norm at "
                f"gradient_clipping={self._configured_clip} from its config. Set the Trainer's gradient_clip_val "
                "instead; it reaches DeepSpeed's config.",
            )

    # -- helpers ----------------------------------------------------------------------------------------
    # -- precision schedules (precision_base.PrecisionSchedule) --------------------------------------------
    def precision_switch_problem(
        self, precision: str, strategy: Any = None, current: Optional[str] = None
    ) -> Optional[str]:
        """Why this plugin cannot switch to ``precision`` during a run: DeepSpeed's engine fixes the precision when
        ``deepspeed.initialize`` builds it (:data:`precision_deepspeed.switch.REASON`)."""
        return switch.problem(self.precision if current is None else current, precision)

    def switch_precision(self, precision: str, model: Any = None) -> None:
        """Refused: see :meth:`precision_switch_problem`.

        Raises:
            DeepSpeedPrecisionError: always, for another precision than this one.
        """
        reason = switch.problem(self.precision, precision)
        if reason is not None:
            raise DeepSpeedPrecisionError(f"{self.spec} -> deepspeed:{precision}: {reason}")

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


class DeepSpeedPrecision(DeepSpeedPrecisionImpl, _LightningDeepSpeedPrecision):  # type: ignore[misc]
    """Precision plugin for DeepSpeed: the engine runs the model in the precision's dtype.

    Dtypes under the default (DeepSpeed-native) mode, for ``16-*``/``bf16-*`` with ``half`` = fp16/bf16:

    * parameters: fp32 master copy in DeepSpeed's optimizer; the module's working copy is ``half``
      (cast by ``deepspeed.initialize``; ``*-true`` casts it already in ``convert_module``);
    * compute: ``half``; gradients are reduced in ``half`` (DeepSpeed's ``communication_data_type``);
    * inputs: floating inputs are cast to ``half`` by ``convert_input``; outputs back to the default dtype;
    * no ``torch.autocast``.

    With ``torch_autocast=True`` (``bf16-mixed``, DeepSpeed releases with a ``torch_autocast`` section) the module
    stays fp32, inputs stay fp32, and forward runs under ``torch.autocast`` in bf16. ``16-mixed`` with
    ``torch_autocast=True`` is refused (:func:`autocast_fp16_refusal` says why).

    Args:
        precision: ``"32-true"``, ``"16-true"``, ``"bf16-true"``, ``"16-mixed"`` or ``"bf16-mixed"`` (or Lightning's
            aliases ``"32"``, ``"16"``, ``"bf16"``, ``32``, ``16``).
        loss_scale: fp16 only: ``0`` for dynamic loss scaling (default), otherwise a static scale.
        initial_scale_power: fp16 only: dynamic scaling starts at ``2 ** initial_scale_power``.
        loss_scale_window: fp16 only: steps without overflow before the scale is raised.
        hysteresis: fp16 only: overflows tolerated before the scale is lowered.
        consecutive_hysteresis: fp16 only: refill the hysteresis budget after each step without overflow.
        min_loss_scale: fp16 only: the lowest loss scale.
        torch_autocast: run the engine's forward under ``torch.autocast`` and keep fp32 parameters (mixed only).
        autocast_lower_precision_safe_modules: with ``torch_autocast``, ``"package.Class"`` names of modules whose
            parameters DeepSpeed communicates in the autocast dtype.
        max_skipped_steps: stop with :class:`precision_base.OverflowStormError` (here
            :class:`DeepSpeedOverflowStormError`, also a :class:`DeepSpeedPrecisionError`) after this many optimizer
            steps in a row that DeepSpeed skipped for non-finite gradients (``engine.was_step_applied()`` false: fp16
            overflows; bf16 with DeepSpeed's ``check_grad_overflow``, on by default in 0.19.8 and turned on by the
            plugin where it is off by default; DeepSpeed before 0.17 never skips a bf16 step), warning
            (``RuntimeWarning``) at half of it. Default 50, the FSDP plugin's too; ``None`` never stops.
        keep_fp32: with ``torch_autocast=True``: modules (qualified-name patterns relative to the LightningModule,
            and/or ``torch.nn.Module`` classes) that compute in float32 with autocast off inside; see
            :mod:`precision_deepspeed.keep_fp32`. Refused without ``torch_autocast`` (DeepSpeed's native modes cast
            the whole module).
        keep_fp32_defaults: also keep in float32, without naming them (the FSDP plugin's rule): under ``*-mixed``
            every layer whose running statistics are float buffers (BatchNorm, SyncBatchNorm, InstanceNorm with
            ``track_running_stats``), whose fp16/bf16 weight would otherwise meet float32 statistics ("expected
            scalar type BFloat16 but found Float"), and Hugging Face models' ``_keep_in_fp32_modules`` (fp16) and
            ``_keep_in_fp32_modules_strict`` (fp16 and bf16). In DeepSpeed's native mode they compute in float32
            from float32 copies of their fp16/bf16 parameters. Default ``True``; ``dtypes()`` notes say which.

    Raises:
        ValueError: an unsupported ``precision``, fp16 knobs under a non-fp16 precision, ``torch_autocast`` under a
            ``*-true`` precision, under ``16-mixed`` or with a DeepSpeed that has no ``torch_autocast`` section, or a
            ``max_skipped_steps`` that is not a positive int or ``None``.
        precision_deepspeed.keep_fp32.KeepFP32Error: ``keep_fp32`` without ``torch_autocast=True``, or a class both
            in ``keep_fp32`` and in ``autocast_lower_precision_safe_modules``.
    """


__all__ = [
    "DeepSpeedOverflowStormError",
    "DeepSpeedPrecision",
    "DeepSpeedPrecisionError",
    "DeepSpeedPrecisionImpl",
    "autocast_fp16_refusal",
    "deepspeed_has_torch_autocast",
]
