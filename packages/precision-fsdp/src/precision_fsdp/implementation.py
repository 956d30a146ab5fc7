"""``FSDPPrecisionImpl``: all code of ``precision_fsdp.FSDPPrecision``, in a mixin without Lightning bases.

The concrete class ([`precision_fsdp.plugin`][]) lists this mixin and Lightning's ``FSDPPrecision`` as bases and
nothing else, so ``precision_base.namespaces.for_namespace`` builds the same class for ``pytorch_lightning``.
Namespace-specific classes are reached through ``self.lightning``; Lightning's methods through ``super()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

import torch
from torch.amp import GradScaler
from torch.optim import Optimizer
from typing_extensions import override

from precision_base import PRECISIONS, PrecisionPlugin
from precision_base.contract import DtypeTable
from precision_base.doors.identity import check_caller, door_of
from precision_base.kit.casting import cast_floating, default_dtype
from precision_base.kit.extra import ExtraPrecisionFeature
from precision_base.kit.keep_fp32 import KeepFP32, KeepSpec
from precision_base.kit.numerics import UnderflowCheck
from precision_base.kit.overflow import DEFAULT_MAX_SKIPPED_STEPS
from precision_fsdp import _compat, resume
from precision_fsdp.checkpoints import load_scaler_state, resume_warning, scaler_state
from precision_fsdp.clipping import clip_grad_norm
from precision_fsdp.dtypes import describe_facts, dtype_table
from precision_fsdp.errors import KeepFP32Error, clip_error_class
from precision_fsdp.float8.config import Fp8Filter
from precision_fsdp.float8.feature import check_options, converted, feature_for
from precision_fsdp.float8.recipes import FLOAT8
from precision_fsdp.policy import DtypePlan, dtype_name, parse_dtype
from precision_fsdp.scaler import (
    check_scaler,
    check_scaler_options,
    loss_scale,
    make_scaler,
    provisional_device,
    ready_scaler,
)
from precision_fsdp.schedule import next_plan, problem, switched_scaler, update_policies
from precision_fsdp.selection import choose_strategy
from precision_fsdp.sharding.model import (
    KEEP_FP32_FSDP1,
    convert_kept,
    kept_modules,
    refuse_mp_policy,
    shard,
    true_precision_warning,
)
from precision_fsdp.sharding.root_unit import gather_root_in_steps
from precision_fsdp.sharding.sharded_init import ShardedInitCheck
from precision_fsdp.sharding.units import FSDPVersion, fsdp1_root, fsdp_version_of
from precision_fsdp.steps import StepWatch

if TYPE_CHECKING:
    from lightning.pytorch.plugins.precision import FSDPPrecision as _LightningBase
    from torch.distributed.device_mesh import DeviceMesh
else:
    _LightningBase = object  # at run time the concrete class supplies Lightning's FSDPPrecision of its namespace

_LIGHTNING_PRECISION_ERROR = (
    "`precision={precision!r})` is not supported in FSDP. `precision` must be one of: {supported}."
)
"""Lightning's ``FSDPPrecision`` message for an unsupported precision (kept verbatim, ours follows it)."""


class FSDPPrecisionImpl(PrecisionPlugin, _LightningBase):  # type: ignore[misc]  # precision: str vs Literal
    """All code of [`FSDPPrecision`][precision_fsdp.plugin.FSDPPrecision] (and of Fabric's
    [`precision_fsdp.fabric.FSDPPrecision`][]), without Lightning bases; Lightning is reached through ``super()``.

    See [`FSDPPrecision`][precision_fsdp.plugin.FSDPPrecision] for the arguments, the dtype table and the errors.
    """

    backend: ClassVar[str] = "fsdp"
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    lightning_precision_error: ClassVar[Optional[str]] = _LIGHTNING_PRECISION_ERROR
    extra_precisions: ClassVar[tuple[tuple[str, str], ...]] = FLOAT8.bases

    def __init__(
        self,
        precision: Union[str, int],
        scaler: Optional[GradScaler] = None,
        *,
        reduce_dtype: Optional[Union[torch.dtype, str]] = None,
        init_scale: Optional[float] = None,
        growth_factor: Optional[float] = None,
        backoff_factor: Optional[float] = None,
        growth_interval: Optional[int] = None,
        max_skipped_steps: Optional[int] = DEFAULT_MAX_SKIPPED_STEPS,
        check_finite_grads: bool = False,
        keep_fp32: Union[KeepSpec, Iterable[KeepSpec], None] = None,
        keep_fp32_defaults: bool = True,
        fp8_emulate: bool = False,
        fp8_filter: Fp8Filter = None,
    ) -> None:
        canonical = self.canonical_precision(precision)
        self._keep = KeepFP32(keep_fp32)  # the default rules are added once the dtypes are known, below
        check_options(canonical, fp8_emulate, fp8_filter)
        self._fp8_options = (bool(fp8_emulate), fp8_filter)  # a precision schedule's switch builds features with them
        self._feature: ExtraPrecisionFeature = feature_for(canonical, *self._fp8_options)
        base = FLOAT8.base_of(canonical)
        options = check_scaler_options(
            canonical,
            scaler,
            {
                "init_scale": init_scale,
                "growth_factor": growth_factor,
                "backoff_factor": backoff_factor,
                "growth_interval": growth_interval,
            },
        )
        self.precision = canonical  # type: ignore[assignment]
        self._plan = DtypePlan.for_precision(base, None if reduce_dtype is None else parse_dtype(reduce_dtype))
        _compat.set_lightning_input_dtype(self, self._plan.inputs)
        self._keep = KeepFP32(
            keep_fp32,
            running_stats=bool(keep_fp32_defaults) and self._plan.mixed,
            hf_dtype=self._plan.compute if keep_fp32_defaults else None,
        )
        self._scaler_options = options
        self._fsdp_version: Optional[FSDPVersion] = None
        self._fsdp1_root: Optional[torch.nn.Module] = None
        self._whole_model: Optional[torch.nn.Module] = None  # set by FSDP2Strategy while configure_model runs
        self._warned_true = False
        self._underflow = UnderflowCheck()  # the numerics warning, once per optimizer (connect and every step)
        self._sharded_init = ShardedInitCheck()  # shards initialised alike on a CPU mesh, at each optimizer's 1st step
        self._set_scaler(scaler, user=scaler is not None)
        if scaler is None and canonical == "16-mixed":
            # a ShardedGradScaler from construction on, as Lightning's; it holds the settings and any loaded state
            # until connect() knows the FSDP version and device (FSDP2 then gets a torch.amp.GradScaler)
            self._set_scaler(make_scaler(1, provisional_device(), options), user=False)
        if check_finite_grads and canonical == "16-mixed":
            raise ValueError(
                "check_finite_grads=True is for precisions without loss scaling: under '16-mixed' the loss scaler "
                "already skips steps with inf/NaN gradients (and max_skipped_steps watches them); remove it."
            )
        self._steps = StepWatch(canonical, max_skipped_steps, bool(check_finite_grads))
        _compat.route_throughput_compute_dtype(self.lightning, _compute_dtype_of)

    # -- what the plugin declares ---------------------------------------------------------------------------
    @property
    def reduce_dtype(self) -> torch.dtype:
        """Dtype gradients are reduce-scattered in (FSDP1 and FSDP2)."""
        return self._plan.reduce

    @property
    def param_dtype(self) -> torch.dtype:
        """Dtype of the unsharded parameters during forward and backward (FSDP's ``param_dtype``): the compute
        dtype, which Lightning's ``ThroughputMonitor`` reports for this plugin."""
        return self._plan.compute

    @property
    def fsdp_version(self) -> Optional[FSDPVersion]:
        """1 or 2 once the plugin has seen the model (or sharded it with `fully_shard`), else ``None``."""
        return self._fsdp_version

    @property
    def fp8_converted(self) -> list[str]:
        """Qualified names of the Linear layers converted to float8 (``fp8-*``), once the model was seen."""
        return converted(self._feature)

    @override
    def dtypes(self, fsdp_version: Optional[FSDPVersion] = None) -> DtypeTable:
        """The dtype of parameters, compute, reduction, buffers and inputs.

        Args:
            fsdp_version: 1 (``FSDPStrategy``) or 2 (``fully_shard``). Default: the version the plugin is used with,
                or 2 before it knows (the two differ only in the buffers row).
        """
        version = fsdp_version or self._fsdp_version or 2
        return dtype_table(self._plan, self._keep, version, self._feature, self)

    @override
    def describe(self) -> Mapping[str, Any]:
        """The FSDP1 and FSDP2 configs, the FSDP1 dtype table and the scaler, for ``precision-plugins show``."""
        return describe_facts(self._plan, self._keep, self.scaler, self._feature, self, self.dtypes(1))

    @property
    @override
    def mixed_precision_config(self) -> _compat.MixedPrecision:
        """FSDP1's ``MixedPrecision``: ``param_dtype`` = compute dtype, ``reduce_dtype`` =
        [`reduce_dtype`][precision_fsdp.implementation.FSDPPrecisionImpl.reduce_dtype],
        ``buffer_dtype`` = compute dtype. ``FSDPStrategy`` passes it to ``FullyShardedDataParallel``.

        Warns (``*-true``, once), like Lightning's: "FSDP with `16-true` enables computation in lower precision."
        """
        self._warn_true_precision()
        return self._plan.fsdp1_mixed_precision()

    def _warn_true_precision(self) -> None:
        """``*-true``, once: Lightning's first sentence, then what is true here
        ([`true_precision_warning`][precision_fsdp.sharding.model.true_precision_warning])."""
        message = None if self._warned_true else true_precision_warning(self._plan, self.precision)
        if message is not None:
            self._warned_true = True
            self.lightning.utilities.rank_zero_warn(message)

    # -- Trainer front door ---------------------------------------------------------------------------------
    @override
    def configure_strategy(self, strategy: Any, *, accelerator: Any, devices: Any) -> Any:
        """``"auto"`` becomes [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy] (FSDP2, default wrap policy) on every
        accelerator; ``"fsdp"``/``FSDPStrategy`` (FSDP1) is kept on CUDA and refused on CPU; any
        ``ModelParallelStrategy`` is kept; other strategies raise
        [`TrainerConfigurationError`][precision_base.TrainerConfigurationError] naming what to pass. See
        [`precision_fsdp.selection`][].
        """
        chosen = choose_strategy(self.spec, self.lightning, strategy, accelerator=accelerator, devices=devices)
        fsdp1 = chosen == "fsdp" or isinstance(chosen, self.lightning.strategies.FSDPStrategy)
        if self._keep and fsdp1:
            raise KeepFP32Error(KEEP_FP32_FSDP1)
        self._feature.check_sharding(self, 1 if fsdp1 else 2)
        self._feature.check_machine(self)
        return chosen

    @override
    def connect(self, model: Any, optimizers: Any, lr_schedulers: Any) -> Any:
        """Learn the device, the FSDP version and (FSDP1) the root module from the model, then ready the scaler.

        Warns (rank 0, once per run): an optimizer hyperparameter is 0 in the dtype of its parameters (Adam's
        ``eps=1e-8`` under ``16-true``), a [`PrecisionPluginWarning`][precision_base.PrecisionPluginWarning] naming
        the parameter group and a value that works (see [`precision_base.kit.numerics`][]; an optimizer not seen here is
        checked at its first step: `optimizer_step`); ``*-true``: Lightning's "FSDP with `16-true` enables
        computation in lower precision", whichever strategy sharded the model.
        """
        version = fsdp_version_of(model)
        if version is not None:
            self._fsdp_version = version
        if version == 1 and self._keep:
            raise KeepFP32Error(KEEP_FP32_FSDP1)
        self._feature.check_sharding(self, version)
        self._fsdp1_root = fsdp1_root(model)
        result = super().connect(model, optimizers, lr_schedulers)
        self._ready_scaler()
        self._warn_true_precision()
        self._underflow(optimizers or (), self.spec, self._rank_zero_warn)
        return result

    def _ready_scaler(self) -> None:
        ready = ready_scaler(
            self.scaler, self._user_scaler, self._fsdp_version or 2, self.device_type, self._scaler_options
        )
        self._set_scaler(ready, user=self._user_scaler)

    @property
    def scaler(self) -> Any:
        """The ``16-mixed`` loss scaler (``None`` for the other precisions). One assigned here, as with Lightning's
        plugins (``plugin.scaler = my_scaler``), is the user's, like one passed to ``scaler=``: used as given (a
        ``GradScaler`` is checked against the device at connect; any other object needs only ``scale``,
        ``unscale_``, ``step`` and ``update``).

        Raises:
            ValueError: (on assignment) the precision is not ``16-mixed``.
            TypeError: (on assignment) the object lacks one of those methods.
        """
        return self.__dict__.get("_scaler")

    @scaler.setter
    def scaler(self, value: Any) -> None:
        check_scaler(self.precision, value)
        self._set_scaler(value, user=value is not None)

    def _set_scaler(self, scaler: Any, *, user: bool) -> None:
        """Set the scaler, saying whether it is the user's (kept as is) or the plugin's own (rebuilt as needed)."""
        self.__dict__["_scaler"] = scaler
        self._user_scaler = user

    # -- Lightning's Precision API --------------------------------------------------------------------------
    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """``*-true``: cast floating parameters and buffers to fp16/bf16/fp32 (skipped when they already are, which
        `fully_shard` ensures). ``*-mixed``: unchanged, parameters stay fp32. A LightningModule that is itself an
        FSDP2 unit holding parameters and defines no ``forward`` gets step methods that gather them
        ([`precision_fsdp.sharding.root_unit.gather_root_in_steps`][]; logged on rank 0).

        Raises:
            precision_fsdp.errors.Float8UnavailableError: ``fp8-*`` and no Linear layer of the model was converted
                (sub-modules sharded before the whole model was seen, or a filter that chose none).
            precision_base.errors.WrongDoorError: Lightning code of the other door (Fabric for this Trainer class, a
                Trainer strategy for the Fabric class) is setting the plugin up; the message names the class to use.
        """
        check_caller(self)
        self._sharded_init.watch(module)
        gathered = gather_root_in_steps(module)  # a LightningModule that is itself a unit holding parameters
        if gathered is not None:
            self.lightning.utilities.rank_zero_info(gathered)
        self._feature.check_model(self, module)
        kept = convert_kept(
            module,
            self._plan,
            self._keep,
            lambda: self.device_type,
            spec=self.spec,
            precision=self.precision,
            door=door_of(self),
            warn=self.lightning.utilities.rank_zero_warn,
        )
        if kept is not None:
            return kept
        if self._plan.mixed:
            return module
        target = self._plan.storage
        tensors = [*module.parameters(), *module.buffers()]
        if any(t.is_floating_point() and t.dtype != target for t in tensors):
            return module.to(dtype=target)
        return module

    @override
    def tensor_init_context(self) -> AbstractContextManager[None]:
        """Floating tensors created inside are in the storage dtype (fp32 for ``32-true``/``*-mixed``)."""
        return default_dtype(self._plan.storage)

    @override
    def module_init_context(self) -> AbstractContextManager[None]:
        """Parameters of modules created inside are in the storage dtype (fp32 for ``32-true``/``*-mixed``)."""
        return default_dtype(self._plan.storage)

    @override
    def forward_context(self) -> AbstractContextManager[Any]:
        """``*-mixed``: ``torch.autocast`` on `device_type` (the strategy's device: cuda, cpu, xpu ...) in
        fp16/bf16. ``*-true``: new floating tensors default to the parameter dtype."""
        if self._plan.autocast is not None:
            return torch.autocast(self.device_type, dtype=self._plan.autocast)
        return default_dtype(self._plan.storage)

    @override
    def train_step_context(self) -> AbstractContextManager[Any]:  # type: ignore[override]
        """[`forward_context`][precision_fsdp.implementation.FSDPPrecisionImpl.forward_context] itself (Lightning wraps
        it in a generator context manager: ~1.5 us a step)."""
        return self.forward_context()

    @override
    def convert_input(self, data: Any) -> Any:
        """Floating tensors -> fp32 for ``*-mixed`` (autocast and FSDP take it from there), else the parameter
        dtype. Integer tensors are left alone."""
        return cast_floating(data, self._plan.inputs)

    @override
    def optimizer_step(  # type: ignore[override]  # Lightning's own FSDPPrecision does the same
        self, optimizer: Any, model: Any, closure: Callable[[], Any], **kwargs: Any
    ) -> Any:
        """Lightning's step (with a scaler: closure, unscale so clipping sees true gradients, hooks and clipping,
        then the scaler steps, skipping on inf/NaN, and updates). Under ``16-mixed``, a run of skipped steps is
        watched: see ``max_skipped_steps``. With ``check_finite_grads``, a step with inf/NaN gradients on any rank
        is skipped on every rank: the gradients are dropped before the hooks, clipping and the optimizer run.

        Warns: the first step of an optimizer that `connect` did not see gets its numerics check (see `connect`).

        Raises:
            precision_base.errors.OverflowStormError: ``max_skipped_steps`` steps in a row were skipped.
        """
        self._underflow((optimizer,), self.spec, self._rank_zero_warn)
        self._sharded_init(optimizer, self.spec, self._rank_zero_warn)
        lightning_step = super().optimizer_step
        return self._steps.trainer_step(
            lambda checked: lightning_step(optimizer, model, checked, **kwargs),
            optimizer,
            closure,
            self.scaler,
            self.spec,
        )

    @override
    def clip_grad_by_norm(self, optimizer: Optimizer, clip_val: Union[int, float]) -> None:
        """Clip by the exact global norm: DTensor gradients under FSDP2, the root's ``clip_grad_norm_`` under FSDP1.

        Raises:
            precision_fsdp.errors.ClipGradNormError: (also Lightning's ``MisconfigurationException``, as the
                built-in raises) the global norm cannot be computed exactly; the message starts with Lightning's and
                names ``gradient_clip_algorithm='value'`` and the other alternatives.
        """
        error = clip_error_class(self.lightning)
        norm = clip_grad_norm(self.main_params(optimizer), clip_val, self._fsdp1_root, type(self).__name__, error)
        self._last_grad_norm = float(norm)

    @override
    def precision_stats(self, strategy: Any = None) -> Mapping[str, float]:
        """What [`precision_base.PrecisionMonitor`][] logs: ``loss_scale`` (``16-mixed``), ``skipped_steps``
        (cumulative optimizer steps skipped for inf/NaN gradients: ``16-mixed``, or ``check_finite_grads=True``),
        ``nonfinite_grad_steps`` (the same steps: here every step with inf/NaN gradients is skipped) and
        ``grad_norm`` (the unscaled global gradient norm of the last step, when clipping by norm computed it)."""
        stats: dict[str, float] = {}
        scale = loss_scale(self.scaler)
        if scale is not None:
            stats["loss_scale"] = scale
        stats.update(self._steps.stats())
        norm = getattr(self, "_last_grad_norm", None)
        if norm is not None:
            stats["grad_norm"] = norm
        return stats

    # -- sharding with FSDP2 (see precision_fsdp.sharding.model) ---------------------------------------------
    @property
    def mixed_precision_policy(self) -> _compat.MixedPrecisionPolicy:
        """FSDP2's ``MixedPrecisionPolicy`` of an outermost unit: ``param_dtype`` = compute dtype, ``reduce_dtype`` =
        reduce dtype, forward inputs cast to ``param_dtype``, outputs left in it. Under ``*-mixed``, a unit that
        [`fully_shard`][precision_fsdp.implementation.FSDPPrecisionImpl.fully_shard] later finds inside another
        stops casting its inputs ([`DtypePlan.fsdp2_policy`][precision_fsdp.policy.DtypePlan.fsdp2_policy])."""
        return self._plan.fsdp2_policy()

    def fully_shard(self, module: torch.nn.Module, mesh: Optional[DeviceMesh] = None, **kwargs: Any) -> Any:
        """Shard ``module`` with FSDP2 using this plugin's dtypes; the one line a ``configure_model`` needs::

            def configure_model(self):
                for layer in self.model.layers:
                    self.trainer.precision_plugin.fully_shard(layer, mesh=self.device_mesh["data_parallel"])
                self.trainer.precision_plugin.fully_shard(self.model, mesh=self.device_mesh["data_parallel"])

        Parameters and buffers not yet sharded are first cast to the storage dtype (fp32 for ``32-true`` and
        ``*-mixed``, fp16/bf16 for ``*-true``); ``mp_policy`` is
        [`mixed_precision_policy`][precision_fsdp.implementation.FSDPPrecisionImpl.mixed_precision_policy]. Other
        keyword arguments go to torch's ``fully_shard``. Returns the sharded module. (Without a ``configure_model``,
        [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy] calls this for you by its wrap policy.) Under
        [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy], the first call inside ``configure_model`` first runs
        [`prepare_for_sharding`][precision_fsdp.implementation.FSDPPrecisionImpl.prepare_for_sharding] on the whole
        LightningModule (``fp8-*`` conversion, ``keep_fp32`` names).
        A module that is already sharded is returned as it is: Lightning calls ``configure_model`` again for
        ``validate`` / ``test`` / ``predict`` after ``fit``, and the model keeps the units of its first sharding.

        Warns (``*-true``, once), like Lightning's: "FSDP with `16-true` enables computation in lower precision."

        Raises:
            TypeError: ``mp_policy`` is passed (the dtypes come from the plugin and nowhere else).
        """
        refuse_mp_policy(kwargs)
        if isinstance(module, _compat.FSDPModule):
            return module  # configure_model runs again for validate/test/predict after fit: sharded once, kept
        self._warn_true_precision()
        self._fsdp_version = 2
        if self._whole_model is not None and self._whole_model is not module:
            self.prepare_for_sharding(self._whole_model)  # names and first/last Linear relative to the whole model
        self._feature.prepare_model(self, module, exclude=kept_modules(self._keep, module))
        return shard(module, mesh, kwargs, self._plan, self._keep, lambda: self.device_type)

    def prepare_for_sharding(self, root: torch.nn.Module) -> None:
        """Before sharding ``root``'s parts one by one: match ``keep_fp32`` names against the whole model and
        (``fp8-*``) convert its Linear layers to float8. [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy] calls it; a
        ``configure_model`` that shards children separately calls it with ``self`` first (under
        [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy] the first
        [`fully_shard`][precision_fsdp.implementation.FSDPPrecisionImpl.fully_shard] call does it)."""
        self._whole_model = None
        self._keep.mark(root)
        self._feature.prepare_model(self, root, exclude=kept_modules(self._keep, root))

    def expect_model(self, model: Optional[torch.nn.Module]) -> None:
        """The whole model that the next
        [`fully_shard`][precision_fsdp.implementation.FSDPPrecisionImpl.fully_shard] calls shard parts of (``None``:
        forget it). [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy] passes the LightningModule before
        ``configure_model`` runs, so that the first
        [`fully_shard`][precision_fsdp.implementation.FSDPPrecisionImpl.fully_shard] there calls
        [`prepare_for_sharding`][precision_fsdp.implementation.FSDPPrecisionImpl.prepare_for_sharding] with it, and
        ``None`` after."""
        self._whole_model = model

    def mark_keep_fp32(self, root: torch.nn.Module) -> None:
        """Match ``keep_fp32`` names against ``root`` (the whole model) before sharding its parts one by one, so a
        kept module passed to [`fully_shard`][precision_fsdp.implementation.FSDPPrecisionImpl.fully_shard] on its
        own is recognised. [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy]
        calls it; a ``configure_model`` that shards children separately calls it with ``self`` first."""
        self._keep.mark(root)

    # -- precision schedules (see precision_fsdp.schedule) --------------------------------------------------
    def precision_switch_problem(
        self, precision: str, strategy: Any = None, current: Optional[str] = None
    ) -> Optional[str]:
        """Why this plugin cannot switch from ``current`` (default: its precision now) to ``precision`` (canonical)
        during a run, or ``None`` when it can (FSDP2, the same parameter storage dtype, no fp8 as the target). See
        [`precision_fsdp.schedule`][]."""
        return problem(self, precision, strategy, current, self._steps.check_finite)

    def switch_precision(self, precision: str, model: Optional[torch.nn.Module] = None) -> None:
        """Run ``precision`` (canonical) from the next step on: the plugin's dtypes, its table and scaler, and the
        ``MixedPrecisionPolicy`` of every FSDP2 unit of ``model``; parameters and optimizer state are kept. Call it
        between optimizer steps ([`precision_base.PrecisionSchedule`][] does). See [`precision_fsdp.schedule`][].

        Raises:
            ValueError: the switch is refused: the reason
                [`precision_switch_problem`][precision_fsdp.implementation.FSDPPrecisionImpl.precision_switch_problem]
                names.
        """
        reason = problem(self, precision, check_finite_grads=self._steps.check_finite)
        if reason is not None:
            raise ValueError(f"{self.spec} -> {self.backend}:{precision}: {reason}")
        if precision == self.precision:
            return
        self._plan = next_plan(self._plan, str(self.precision), precision)
        self.precision = precision
        self._feature = feature_for(precision, *self._fp8_options)
        _compat.set_lightning_input_dtype(self, self._plan.inputs)
        scaler, own = switched_scaler(
            precision, self.scaler, self._fsdp_version, self.device_type, self._scaler_options
        )
        if own:
            self._set_scaler(scaler, user=False)
        self._steps.follow(precision)
        if model is not None:
            update_policies(model, self._plan)

    # -- checkpoints (see precision_fsdp.checkpoints) -------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        """The scaler's state for ``16-mixed`` (the keys of Lightning's built-in, so checkpoints move between both
        classes), else empty."""
        return scaler_state(self.scaler)

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the scaler's state (written by this class or Lightning's built-in). State for a scaler this
        precision does not have was announced by
        [`on_load_checkpoint`][precision_fsdp.implementation.FSDPPrecisionImpl.on_load_checkpoint] and is dropped."""
        load_scaler_state(self.scaler, state_dict)

    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Record the precision in the checkpoint (key ``"precision_fsdp"``; Lightning's built-in ignores it)."""
        resume.record(checkpoint, self.precision)
        super().on_save_checkpoint(checkpoint)

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Before the state is restored: compare the checkpoint's precision with this one.

        Warns: what changes, e.g. "resuming a checkpoint written under precision '16-mixed' with precision
        'bf16-mixed': the 16-mixed loss scaler state is dropped: bf16-mixed does not scale the loss; ...".

        Raises:
            precision_fsdp.errors.PrecisionChangeError: the parameter storage dtype differs (``*-true`` on one side).
        """
        message = resume_warning(checkpoint, type(self).__qualname__, self.precision, self.scaler)
        if message is not None:
            self.lightning.utilities.rank_zero_warn(message)
        super().on_load_checkpoint(checkpoint)

    # -- pickling -------------------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fsdp1_root"] = None  # a live model does not travel with the plugin
        state["_whole_model"] = None
        return state

    def __repr__(self) -> str:
        keep = f", keep_fp32=({', '.join(self._keep.describe())})" if self._keep else ""
        return (
            f"{type(self).__name__}(precision={self.precision!r}, reduce_dtype={dtype_name(self.reduce_dtype)}{keep})"
        )


def _compute_dtype_of(plugin: Any) -> Optional[torch.dtype]:
    """What Lightning's ``ThroughputMonitor`` reports for ``plugin``: the compute dtype for ours, else ``None``."""
    return plugin.param_dtype if isinstance(plugin, FSDPPrecisionImpl) else None
