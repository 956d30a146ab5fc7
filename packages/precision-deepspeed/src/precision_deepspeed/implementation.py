"""``DeepSpeedPrecisionImpl``: all code of both ``DeepSpeedPrecision`` classes, in a mixin without Lightning bases.

The concrete classes ([`precision_deepspeed.plugin`][] for the Trainer, [`precision_deepspeed.fabric`][] for
Fabric) list this mixin (Fabric's through
[`FabricDeepSpeedPrecisionImpl`][precision_deepspeed.fabric.FabricDeepSpeedPrecisionImpl]) and
Lightning's ``DeepSpeedPrecision`` as bases and nothing else, so ``precision_base.namespaces.for_namespace`` builds
the same class for ``pytorch_lightning``. Namespace-specific classes are reached through ``self.lightning``;
Lightning's methods through ``super()``, its private ones through `precision_deepspeed._compat`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

import torch
from torch.nn import Module
from typing_extensions import override

from precision_base import DtypeTable
from precision_base.doors.identity import check_caller
from precision_base.kit.casting import cast_floating
from precision_base.kit.keep_fp32 import KeepSpec
from precision_base.kit.numerics import UnderflowCheck
from precision_base.kit.overflow import DEFAULT_MAX_SKIPPED_STEPS, OverflowWatch
from precision_base.kit.plugin_support import precision_dtype
from precision_base.spec import PRECISIONS
from precision_deepspeed import _compat, schedule
from precision_deepspeed.config import (
    LossScaling,
    check_precision_options,
    merge_precision_section,
    render_precision_section,
)
from precision_deepspeed.dtypes import dtype_table, kept_reduction
from precision_deepspeed.errors import (
    CheckpointPrecisionError,
    DeepSpeedOverflowStormError,
    DeepSpeedPrecisionError,
    error_class,
)
from precision_deepspeed.keep_fp32 import install_kept, parse_keep_fp32
from precision_deepspeed.resume import SavedPrecision, engine_mode, mismatch_error
from precision_deepspeed.selection import resolve_strategy
from precision_deepspeed.steps import DeepSpeedStepsImpl
from precision_deepspeed.strategy import guard_resume, write_plugin_config

if TYPE_CHECKING:
    from lightning.pytorch.strategies import Strategy


def deepspeed_has_torch_autocast() -> bool:
    """Whether the installed DeepSpeed reads a ``torch_autocast`` config section."""
    return _compat.deepspeed_has_torch_autocast()


class DeepSpeedPrecisionImpl(DeepSpeedStepsImpl):
    """All code of [`DeepSpeedPrecision`][precision_deepspeed.plugin.DeepSpeedPrecision] (and of Fabric's); it has no
    Lightning
    base and reaches Lightning through ``super()``.

    See [`DeepSpeedPrecision`][precision_deepspeed.plugin.DeepSpeedPrecision] for the arguments and the dtypes. The
    training-step
    hooks are [`DeepSpeedStepsImpl`][precision_deepspeed.steps.DeepSpeedStepsImpl]'s.
    """

    backend: ClassVar[str] = "deepspeed"
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    lightning_precision_error: ClassVar[Optional[str]] = (
        "`{door}(strategy='deepspeed', precision={precision!r})` is not supported. `precision` must be one of: "
        "{supported}."
    )
    """Lightning's (Trainer) ``DeepSpeedPrecision`` message for an unsupported precision, with the call of the door
    the class is for (``{door}``: ``Trainer``, or ``Fabric`` for [`precision_deepspeed.fabric.DeepSpeedPrecision`][]):
    a Fabric user reads ``Fabric(strategy='deepspeed', ...)``, not a Trainer call they never wrote."""

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
        watch = OverflowWatch(max_skipped_steps, error_class(DeepSpeedOverflowStormError, self.lightning.__name__))
        scaling = LossScaling(
            loss_scale=loss_scale,
            initial_scale_power=initial_scale_power,
            loss_scale_window=loss_scale_window,
            hysteresis=hysteresis,
            consecutive_hysteresis=consecutive_hysteresis,
            min_loss_scale=min_loss_scale,
        )
        check_precision_options(precision, scaling, bool(torch_autocast), autocast_lower_precision_safe_modules)
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
        self._underflow = UnderflowCheck()  # the numerics warning, once per optimizer DeepSpeed steps

    # -- the DeepSpeed config ---------------------------------------------------------------------------
    def precision_section(self) -> dict[str, Any]:
        """The precision section of the DeepSpeed config this plugin needs (``fp16``, ``bf16``, ``torch_autocast``).

        With ``max_skipped_steps`` (default ``precision_base.kit.overflow.DEFAULT_MAX_SKIPPED_STEPS``) under bf16, on a
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
            precision_deepspeed.errors.DeepSpeedConfigConflictError: ``user_config`` contradicts the plugin.
        """
        return merge_precision_section(user_config, self.precision_section(), owner=self.spec)

    @override
    def audit_collectives(self) -> tuple[tuple[Any, str, str], ...]:
        """The all-gather and reduce-scatter DeepSpeed's comm layer cached when it started (ZeRO calls those, past
        ``torch.distributed``'s module attributes): the audit records them too."""
        return _compat.cached_collectives()

    @override
    def describe(self) -> Mapping[str, Any]:
        """For ``precision-plugins show``: the DeepSpeed config section this plugin writes, and ``keep_fp32``."""
        facts: dict[str, Any] = {"DeepSpeed config section": self.precision_section()}
        if self.keep_fp32:
            facts["keep_fp32"] = self.keep_fp32.facts(reduction=kept_reduction(self), outputs="float32")
        return facts

    @override
    def configure_strategy(
        self, strategy: Union[str, Strategy], *, accelerator: Any, devices: Any
    ) -> Union[str, Strategy]:
        """Return a DeepSpeed strategy for the Trainer or Fabric; a user config that contradicts the plugin fails here.

        ``"auto"``, ``"deepspeed"`` and Lightning's ``"deepspeed_stage_*"`` names become a strategy instance: on the
        CPU (``accelerator="cpu"``, or ``"auto"`` with no CUDA device visible) the door's DeepSpeed CPU strategy
        ([`DeepSpeedCPUStrategy`][precision_deepspeed.strategy.DeepSpeedCPUStrategy], Fabric's
        [`DeepSpeedCPUStrategy`][precision_deepspeed.fabric.DeepSpeedCPUStrategy]); off the CPU Lightning's
        ``DeepSpeedStrategy``
        for the Trainer and Fabric's CPU strategy (Lightning's class unchanged there) for Fabric. A
        ``DeepSpeedStrategy`` instance is kept. Anything else raises
        [`TrainerConfigurationError`][precision_base.TrainerConfigurationError]
        saying what to pass. The plugin's section is written into the strategy's config later, once
        ([`precision_deepspeed.strategy.write_plugin_config`][]);
        see [`precision_deepspeed.selection.resolve_strategy`][].
        """
        return resolve_strategy(  # type: ignore[no-any-return]
            strategy,
            accelerator=accelerator,
            plugin=self,
            namespace=self.lightning.__name__,
        )

    # -- dtypes -----------------------------------------------------------------------------------------
    @override
    def dtypes(self) -> DtypeTable:
        """The dtype of parameters, compute, gradient reduction, buffers and inputs under this plugin
        ([`precision_deepspeed.dtypes.dtype_table`][])."""
        return dtype_table(self)

    # -- conversions and contexts -----------------------------------------------------------------------
    @override
    def convert_module(self, module: Module) -> Module:
        """``*-true``: cast the module to the precision's dtype; otherwise return it unchanged (DeepSpeed casts it).
        Kept modules (``keep_fp32``, and the default rules of ``keep_fp32_defaults``) get their float32 forward first:
        autocast off and float32 inputs under ``torch_autocast``; in DeepSpeed's native mode also float32 copies of
        their parameters inside the forward and outputs cast back to the precision's dtype
        ([`precision_deepspeed.keep_fp32.install_fp32_compute`][]).

        Raises:
            precision_base.errors.WrongDoorError: Lightning code of the other door (Fabric for this Trainer class, a
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
        """Like [`tensor_init_context`][precision_deepspeed.implementation.DeepSpeedPrecisionImpl.tensor_init_context],
        for module parameters."""
        return self.tensor_init_context()

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        """``torch.autocast`` on the plugin's device under ``torch_autocast=True``; otherwise nothing."""
        if self.torch_autocast:
            return torch.autocast(device_type=self.device_type, dtype=self._compute_dtype)
        return nullcontext()

    @override
    def train_step_context(self) -> AbstractContextManager[Any]:  # type: ignore[override]
        """[`forward_context`][precision_deepspeed.implementation.DeepSpeedPrecisionImpl.forward_context] itself
        (Lightning wraps it in a generator context manager: ~1.5 us a step)."""
        return self.forward_context()

    # -- training hooks ---------------------------------------------------------------------------------
    @override
    def connect(self, model: Any, optimizers: Any, lr_schedulers: Any) -> Any:
        """Bind the device, and make sure the strategy's DeepSpeed config carries the plugin's section.

        With Lightning's own ``DeepSpeedStrategy`` this is where the section and the Trainer's ``gradient_clip_val``
        are written ([`precision_deepspeed.strategy.write_plugin_config`][]; Lightning has written its defaults by
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
        checkpoints; [`DeepSpeedCPUStrategy`][precision_deepspeed.strategy.DeepSpeedCPUStrategy] checks before DeepSpeed
        loads.

        Raises:
            precision_deepspeed.errors.CheckpointPrecisionError: the recorded DeepSpeed mode differs.
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
    def precision_stats(self, strategy: Any = None) -> Mapping[str, float]:
        """What [`precision_base.PrecisionMonitor`][] logs, read from the DeepSpeed engine of ``strategy``:
        ``loss_scale`` (fp16 precisions: the scale DeepSpeed multiplies the loss by, its ``torch.amp.GradScaler``'s
        where the engine has one, else its loss scaler's), ``skipped_steps`` and ``nonfinite_grad_steps``
        (cumulative steps DeepSpeed skipped for inf/NaN gradients: fp16 overflow, bf16 ``check_grad_overflow``) and
        ``grad_norm`` (the global norm DeepSpeed computed at the last step, when it did). Empty before the engine
        exists."""
        engine = getattr(strategy, "model", None)
        if engine is None or not hasattr(engine, "step") or not hasattr(engine, "skipped_steps"):
            return {}
        # Fabric steps DeepSpeed's optimizer, not the engine, whose count then stays 0: the watch counted them
        stats = self._overflow.stats(at_least=_compat.engine_skipped_steps(engine))
        if self.precision.startswith("16-"):
            scale = _compat.engine_loss_scale(engine)
            if scale is not None:
                stats["loss_scale"] = scale
        norm = _compat.engine_grad_norm(engine)
        if norm is not None:
            stats["grad_norm"] = norm
        return stats

    # -- precision schedules (precision_base.PrecisionSchedule) --------------------------------------------
    def precision_switch_problem(
        self, precision: str, strategy: Any = None, current: Optional[str] = None
    ) -> Optional[str]:
        """Why this plugin cannot switch to ``precision`` during a run: DeepSpeed's engine fixes the precision when
        ``deepspeed.initialize`` builds it ([`precision_deepspeed.schedule.REASON`][])."""
        return schedule.problem(self.precision if current is None else current, precision)

    def switch_precision(self, precision: str, model: Any = None) -> None:
        """Refused: see
        [`precision_switch_problem`][precision_deepspeed.implementation.DeepSpeedPrecisionImpl.precision_switch_problem].

        Raises:
            DeepSpeedPrecisionError: always, for another precision than this one.
        """
        reason = schedule.problem(self.precision, precision)
        if reason is not None:
            raise self._error(DeepSpeedPrecisionError)(f"{self.spec} -> deepspeed:{precision}: {reason}")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_warned"] = set()
        return state


__all__ = ["DeepSpeedPrecisionImpl", "deepspeed_has_torch_autocast"]
