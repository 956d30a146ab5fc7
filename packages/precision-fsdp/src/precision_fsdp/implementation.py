"""``FSDPPrecisionImpl``: all code of ``precision_fsdp.FSDPPrecision``, in a mixin without Lightning bases.

The concrete class (:mod:`precision_fsdp.plugin`) lists this mixin and Lightning's ``FSDPPrecision`` as bases and
nothing else, so ``precision_base.namespaces.for_namespace`` builds the same class for ``pytorch_lightning``.
Namespace-specific classes are reached through ``self.lightning``; Lightning's methods through ``super()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

import torch
from torch.amp import GradScaler
from torch.optim import Optimizer
from typing_extensions import override

from precision_base import PRECISIONS, PrecisionPlugin, PrecisionPluginWarning
from precision_base.casting import cast_floating, default_dtype
from precision_base.contract import DtypeTable
from precision_base.doors import check_caller
from precision_base.numerics import warn_underflowing_hyperparameters
from precision_fsdp import _compat, float8, resume, switch
from precision_fsdp.clipping import clip_error_class, clip_grad_norm
from precision_fsdp.keep_fp32 import (
    KeepFP32,
    KeepFP32Error,
    KeepSpec,
    cast_except_kept_,
    install_fp32_forward,
    is_kept,
)
from precision_fsdp.overflow import DEFAULT_MAX_SKIPPED_STEPS, OverflowWatch, grads_finite
from precision_fsdp.policy import DtypePlan, dtype_name, parse_dtype
from precision_fsdp.scaler import (
    check_scaler_options,
    check_user_scaler,
    is_sharded_scaler,
    make_scaler,
    move_state,
    provisional_device,
)
from precision_fsdp.selection import choose_strategy
from precision_fsdp.sharding import FSDPVersion, fsdp1_root, fsdp_version_of, gather_root_in_steps

if TYPE_CHECKING:
    from lightning.pytorch.plugins.precision import FSDPPrecision as _LightningBase
    from torch.distributed.device_mesh import DeviceMesh
else:
    _LightningBase = object  # at run time the concrete class supplies Lightning's FSDPPrecision of its namespace

_LIGHTNING_PRECISION_ERROR = (
    "`precision={precision!r})` is not supported in FSDP. `precision` must be one of: {supported}."
)
"""Lightning's ``FSDPPrecision`` message for an unsupported precision (kept verbatim, ours follows it)."""

_LIGHTNING_TRUE_WARNING = "FSDP with `{precision}` enables computation in lower precision."
"""First sentence of Lightning's ``*-true`` warning, kept verbatim. Lightning's second sentence ("FSDP will always
retain a full-precision copy of the model parameters for sharding") is false here and in Lightning: the module is
cast to fp16/bf16 before FSDP shards it, so the sharded parameters are fp16/bf16. Ours says what is true instead."""


def _cast_unsharded_(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """Cast, in place, the floating parameters and buffers of ``module`` that FSDP2 has not sharded yet."""
    for sub in module.modules():
        for param in sub.parameters(recurse=False):
            if not isinstance(param, _compat.DTensor) and param.is_floating_point() and param.dtype != dtype:
                param.data = param.data.to(dtype)
        for name, buf in list(sub.named_buffers(recurse=False)):
            if buf.is_floating_point() and buf.dtype != dtype:
                setattr(sub, name, buf.to(dtype))  # assigning to a buffer's name keeps it a (non-)persistent buffer


class FSDPPrecisionImpl(PrecisionPlugin, _LightningBase):  # type: ignore[misc]  # precision: str vs Literal
    """Precision plugin for Fully Sharded Data Parallel: FSDP1 (``FSDPStrategy``) and FSDP2 (``fully_shard`` under
    ``ModelParallelStrategy`` or :class:`~precision_fsdp.FSDP2Strategy`).

    Dtypes (``dtypes()`` gives the full table for FSDP1 and FSDP2):

    ============  ==================  =============  ==============================  ==========
    precision     sharded params      compute        gradient reduction (default)    autocast
    ============  ==================  =============  ==============================  ==========
    32-true       fp32                fp32           fp32                            off
    16-true       fp16                fp16           fp16                            off
    bf16-true     bf16                bf16           bf16                            off
    16-mixed      fp32                fp16           fp32                            fp16
    bf16-mixed    fp32                bf16           fp32                            bf16
    ============  ==================  =============  ==============================  ==========

    Args:
        precision: ``"32-true"``, ``"16-true"``, ``"bf16-true"``, ``"16-mixed"`` or ``"bf16-mixed"`` (Lightning's
            aliases ``"32"``, ``"16"``, ``"bf16"``, ``32``, ``16`` are accepted too).
        scaler: for ``16-mixed`` only: a ``torch.amp.GradScaler`` (FSDP2) or ``ShardedGradScaler`` (FSDP1) to use.
            ``None`` builds the right kind for the FSDP version and device when the plugin is connected.
        reduce_dtype: dtype gradients are reduce-scattered in (``torch.float32``/``"fp32"``, ``"bf16"``,
            ``"fp16"``). Default: fp32 for ``*-mixed`` and ``32-true``, the parameter dtype for ``*-true``.
        init_scale: the default ``16-mixed`` scaler's starting scale. This and the three settings below are
            reachable by name through ``precision_base.resolve("fsdp:16-mixed", init_scale=...)``.
        growth_factor: factor the default scaler multiplies its scale by after ``growth_interval`` clean steps.
        backoff_factor: factor the default scaler multiplies its scale by after a step with inf/NaN gradients.
        growth_interval: number of consecutive clean steps before the default scaler grows its scale.
        max_skipped_steps: stop training with :class:`~precision_fsdp.overflow.OverflowStormError` after this many
            optimizer steps in a row were skipped for inf/NaN gradients (default 50; ``None`` never stops); a
            warning is given at half that count. Applies to ``16-mixed`` (the scaler skips such steps) and to the
            other precisions with ``check_finite_grads=True``.
        check_finite_grads: precisions other than ``16-mixed``: skip, on every rank, an optimizer step whose
            gradients hold inf/NaN on any rank (as DeepSpeed's bf16 ``check_grad_overflow``), counted against
            ``max_skipped_steps``. Costs one all-reduce of a flag per step. Default ``False``.
        fp8_emulate: ``fp8-*`` only: run torchao's float8 emulation where the hardware has no FP8 (a test device:
            CPU tests; slower than ``bf16-mixed``). Default ``False``: no FP8 hardware is an error.
        fp8_filter: ``fp8-*`` only: which Linear layers to convert, as qualified-name patterns or a callable
            ``(module, fqn) -> bool``; replaces the defaults (dims multiples of 16, not the first or last Linear).
            See :mod:`precision_fsdp.float8`.
        keep_fp32: modules that keep float32 parameters and compute in float32 while the rest follows the
            precision: qualified-name patterns (``"lm_head"``, ``"layers.*.norm"``) and/or module classes
            (``torch.nn.LayerNorm``). FSDP2 only: each is sharded as its own unit with a float32
            ``MixedPrecisionPolicy``, autocast is off inside it. See :mod:`precision_fsdp.keep_fp32`.
        keep_fp32_defaults: FSDP2: also keep in float32, without naming them, (1) under ``*-mixed``, every layer
            whose running statistics are float buffers (BatchNorm, SyncBatchNorm, InstanceNorm with
            ``track_running_stats``), whose fp16/bf16 weight would otherwise meet float32 statistics ("expected
            scalar type BFloat16 but found Float"), and (2) Hugging Face models' ``_keep_in_fp32_modules`` (float16
            precisions) and ``_keep_in_fp32_modules_strict`` (float16 and bfloat16), as transformers does. Default
            ``True``; ``False`` keeps only ``keep_fp32``. ``dtypes()`` notes say which rules are on.

    Raises:
        ValueError: unsupported ``precision`` (Lightning's message first); a scaler or scaler options for a
            precision that does not scale; an unsupported ``reduce_dtype``.
    """

    backend: ClassVar[str] = "fsdp"
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    lightning_precision_error: ClassVar[Optional[str]] = _LIGHTNING_PRECISION_ERROR
    extra_precisions: ClassVar[tuple[tuple[str, str], ...]] = float8.EXTRA_PRECISIONS

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
        fp8_filter: float8.Fp8Filter = None,
    ) -> None:
        canonical = self.canonical_precision(precision)
        self._keep = KeepFP32(keep_fp32)  # the default rules are added once the dtypes are known, below
        self._fp8 = float8.is_fp8(canonical)
        if not self._fp8 and (fp8_emulate or fp8_filter is not None):
            raise ValueError(
                f"fp8_emulate and fp8_filter apply to the FP8 precisions ({', '.join(float8.RECIPES)}), not "
                f"{canonical!r}; remove them."
            )
        float8.user_filter(fp8_filter)  # checks its type now
        self._fp8_emulate = bool(fp8_emulate)
        self._fp8_filter = fp8_filter
        self._fp8_seen = False
        self.fp8_converted: list[str] = []
        """Qualified names of the Linear layers converted to float8 (``fp8-*``), once the model was seen."""
        base = dict(float8.EXTRA_PRECISIONS).get(canonical, canonical)
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
        self._user_scaler = scaler is not None
        self._fsdp_version: Optional[FSDPVersion] = None
        self._fsdp1_root: Optional[torch.nn.Module] = None
        self._whole_model: Optional[torch.nn.Module] = None  # set by FSDP2Strategy while configure_model runs
        self._warned_true = False
        self.scaler: Optional[GradScaler] = scaler  # type: ignore[assignment]
        if scaler is None and canonical == "16-mixed":
            # provisional: holds the settings and any loaded state until connect() knows the FSDP version and device
            self.scaler = make_scaler(2, provisional_device(), options)
        if check_finite_grads and canonical == "16-mixed":
            raise ValueError(
                "check_finite_grads=True is for precisions without loss scaling: under '16-mixed' the loss scaler "
                "already skips steps with inf/NaN gradients (and max_skipped_steps watches them); remove it."
            )
        self._check_finite = bool(check_finite_grads)
        watched = canonical == "16-mixed" or self._check_finite
        self._overflow = OverflowWatch(max_skipped_steps) if watched else None
        self._max_skipped_steps = max_skipped_steps  # a precision schedule's switch to 16-mixed watches with it
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
        """1 or 2 once the plugin has seen the model (or sharded it with :meth:`fully_shard`), else ``None``."""
        return self._fsdp_version

    @override
    def dtypes(self, fsdp_version: Optional[FSDPVersion] = None) -> DtypeTable:
        """The dtype of parameters, compute, reduction, buffers and inputs.

        Args:
            fsdp_version: 1 (``FSDPStrategy``) or 2 (``fully_shard``). Default: the version the plugin is used with,
                or 2 before it knows (the two differ only in the buffers row).
        """
        version = fsdp_version or self._fsdp_version or 2
        table = self._plan.table(version, keep_defaults=tuple(self._keep.describe_defaults()))
        if self._keep:
            kept = ", ".join(self._keep.describe())
            note = f"keep_fp32 ({kept}): float32 parameters, compute, all-gather and reduction; autocast off inside"
            table = dataclasses.replace(table, notes=(*table.notes, note))
        return table

    @override
    def describe(self) -> Mapping[str, Any]:
        """The FSDP1 and FSDP2 configs, the FSDP1 dtype table and the scaler, for ``precision-plugins show``."""
        mp = self._plan.fsdp1_mixed_precision()
        policy = self._plan.fsdp2_policy()
        facts: dict[str, Any] = {
            "FSDP1 MixedPrecision (FSDPStrategy)": {
                "param_dtype": _name(mp.param_dtype),
                "reduce_dtype": _name(mp.reduce_dtype),
                "buffer_dtype": _name(mp.buffer_dtype),
            },
            "FSDP1 dtypes": dict(self.dtypes(1).rows()),
            "FSDP2 MixedPrecisionPolicy (fully_shard)": {
                "param_dtype": _name(policy.param_dtype),
                "reduce_dtype": _name(_compat.policy_reduce_dtype(policy)),
                "output_dtype": _name(policy.output_dtype),
                "cast_forward_inputs": policy.cast_forward_inputs,
            },
        }
        if self._fp8:
            facts["float8 (torchao, FSDP2 only)"] = float8.describe(self.precision)
        if self._keep:
            facts["keep_fp32 (FSDP2 only)"] = self._keep.facts(
                reduction="float32", outputs="float32" if self._plan.mixed else dtype_name(self._plan.compute)
            )
        if self.scaler is not None:
            facts["scaler"] = {
                "kind": type(self.scaler).__name__,
                "device": _compat.scaler_device(self.scaler),
            } | dict(self.scaler.state_dict())
        return facts

    @property
    @override
    def mixed_precision_config(self) -> _compat.MixedPrecision:
        """FSDP1's ``MixedPrecision``: ``param_dtype`` = compute dtype, ``reduce_dtype`` = :attr:`reduce_dtype`,
        ``buffer_dtype`` = compute dtype. ``FSDPStrategy`` passes it to ``FullyShardedDataParallel``.

        Warns (``*-true``, once), like Lightning's: "FSDP with `16-true` enables computation in lower precision."
        """
        self._warn_true_precision()
        return self._plan.fsdp1_mixed_precision()

    @property
    def mixed_precision_policy(self) -> _compat.MixedPrecisionPolicy:
        """FSDP2's ``MixedPrecisionPolicy``: ``param_dtype`` = compute dtype, ``reduce_dtype`` = :attr:`reduce_dtype`,
        forward inputs cast to ``param_dtype``, outputs left in it."""
        return self._plan.fsdp2_policy()

    def _warn_true_precision(self) -> None:
        if self._plan.mixed or self.precision == "32-true" or self._warned_true:
            return
        self._warned_true = True
        low = dtype_name(self._plan.storage)
        self.lightning.utilities.rank_zero_warn(
            _LIGHTNING_TRUE_WARNING.format(precision=self.precision)
            + f" The sharded parameters, gradients and optimizer state are {low} as well (precision-fsdp keeps no "
            "full-precision copy); use the matching '-mixed' precision to keep fp32 parameters."
        )

    def fully_shard(self, module: torch.nn.Module, mesh: Optional[DeviceMesh] = None, **kwargs: Any) -> Any:
        """Shard ``module`` with FSDP2 using this plugin's dtypes; the one line a ``configure_model`` needs::

            def configure_model(self):
                for layer in self.model.layers:
                    self.trainer.precision_plugin.fully_shard(layer, mesh=self.device_mesh["data_parallel"])
                self.trainer.precision_plugin.fully_shard(self.model, mesh=self.device_mesh["data_parallel"])

        Parameters and buffers not yet sharded are first cast to the storage dtype (fp32 for ``32-true`` and
        ``*-mixed``, fp16/bf16 for ``*-true``); ``mp_policy`` is :attr:`mixed_precision_policy`. Other keyword
        arguments go to torch's ``fully_shard``. Returns the sharded module. (Without a ``configure_model``,
        :class:`~precision_fsdp.FSDP2Strategy` calls this for you by its wrap policy.) Under
        :class:`~precision_fsdp.FSDP2Strategy`, the first call inside ``configure_model`` first runs
        :meth:`prepare_for_sharding` on the whole LightningModule (``fp8-*`` conversion, ``keep_fp32`` names).
        A module that is already sharded is returned as it is: Lightning calls ``configure_model`` again for
        ``validate`` / ``test`` / ``predict`` after ``fit``, and the model keeps the units of its first sharding.

        Warns (``*-true``, once), like Lightning's: "FSDP with `16-true` enables computation in lower precision."

        Raises:
            TypeError: ``mp_policy`` is passed (the dtypes come from the plugin and nowhere else).
        """
        if "mp_policy" in kwargs:
            raise TypeError(
                "FSDPPrecision.fully_shard() sets mp_policy from the plugin's precision; do not pass one (choose "
                "the precision and reduce_dtype on the plugin instead)"
            )
        if isinstance(module, _compat.FSDPModule):
            return module  # configure_model runs again for validate/test/predict after fit: sharded once, kept
        self._warn_true_precision()
        self._fsdp_version = 2
        if self._whole_model is not None and self._whole_model is not module:
            self.prepare_for_sharding(self._whole_model)  # names and first/last Linear relative to the whole model
        self._convert_fp8(module)
        if self._keep.active:
            for _name, kept, entry in self._keep.kept(module, skip=lambda m: isinstance(m, _compat.FSDPModule)):
                if isinstance(kept, _compat.FSDPModule):
                    continue
                self._keep_in_fp32(kept, entry)
                fp32 = _compat.MixedPrecisionPolicy(
                    param_dtype=torch.float32, reduce_dtype=torch.float32, cast_forward_inputs=True
                )
                _cast_unsharded_(kept, torch.float32)
                _compat.fully_shard(kept, mesh=mesh, mp_policy=fp32, **kwargs)
                if kept is module:
                    return module
        _cast_unsharded_(module, self._plan.storage)
        return _compat.fully_shard(module, mesh=mesh, mp_policy=self.mixed_precision_policy, **kwargs)

    def _convert_fp8(self, root: torch.nn.Module) -> None:
        """``fp8-*``: convert ``root``'s chosen Linear layers to float8, once (the first module the plugin sees)."""
        if not self._fp8 or self._fp8_seen or any(isinstance(m, _compat.FSDPModule) for m in root.modules()):
            return
        self._fp8_seen = True
        float8.check_can_run(self.spec, self._fp8_emulate)
        kept = [module for _name, module, _entry in self._keep.kept(root)]  # keep_fp32 wins over fp8
        self.fp8_converted = float8.convert(
            root, self.spec, self.precision, self._fp8_emulate, self._fp8_filter, exclude=kept
        )

    def prepare_for_sharding(self, root: torch.nn.Module) -> None:
        """Before sharding ``root``'s parts one by one: match ``keep_fp32`` names against the whole model and
        (``fp8-*``) convert its Linear layers to float8. :class:`~precision_fsdp.FSDP2Strategy` calls it; a
        ``configure_model`` that shards children separately calls it with ``self`` first (under
        :class:`~precision_fsdp.FSDP2Strategy` the first :meth:`fully_shard` call does it)."""
        self._whole_model = None
        self._keep.mark(root)
        self._convert_fp8(root)

    def expect_model(self, model: Optional[torch.nn.Module]) -> None:
        """The whole model that the next :meth:`fully_shard` calls shard parts of (``None``: forget it).
        :class:`~precision_fsdp.FSDP2Strategy` passes the LightningModule before ``configure_model`` runs, so that
        the first :meth:`fully_shard` there calls :meth:`prepare_for_sharding` with it, and ``None`` after."""
        self._whole_model = model

    def mark_keep_fp32(self, root: torch.nn.Module) -> None:
        """Match ``keep_fp32`` names against ``root`` (the whole model) before sharding its parts one by one, so a
        kept module passed to :meth:`fully_shard` on its own is recognised. :class:`~precision_fsdp.FSDP2Strategy`
        calls it; a ``configure_model`` that shards children separately calls it with ``self`` first."""
        self._keep.mark(root)

    def _keep_in_fp32(self, module: torch.nn.Module, entry: str) -> None:
        out = None if self._plan.mixed else self._plan.compute
        install_fp32_forward(module, entry, lambda: self.device_type, out)

    # -- Trainer front door ---------------------------------------------------------------------------------
    @override
    def configure_strategy(self, strategy: Any, *, accelerator: Any, devices: Any) -> Any:
        """``"auto"`` becomes :class:`~precision_fsdp.FSDP2Strategy` (FSDP2, default wrap policy) on every
        accelerator; ``"fsdp"``/``FSDPStrategy`` (FSDP1) is kept on CUDA and refused on CPU; any
        ``ModelParallelStrategy`` is kept; other strategies raise
        :class:`~precision_base.TrainerConfigurationError` naming what to pass. See :mod:`precision_fsdp.selection`.
        """
        chosen = choose_strategy(self.spec, self.lightning, strategy, accelerator=accelerator, devices=devices)
        fsdp1 = chosen == "fsdp" or isinstance(chosen, self.lightning.strategies.FSDPStrategy)
        if self._keep and fsdp1:
            raise KeepFP32Error(_KEEP_FP32_FSDP1)
        if self._fp8:
            if fsdp1:
                raise float8.Float8UnavailableError(_FP8_FSDP1.format(spec=self.spec))
            float8.check_can_run(self.spec, self._fp8_emulate)
        return chosen

    @override
    def connect(self, model: Any, optimizers: Any, lr_schedulers: Any) -> Any:
        """Learn the device, the FSDP version and (FSDP1) the root module from the model, then ready the scaler.

        Warns (:class:`~precision_base.PrecisionPluginWarning`, rank 0): an optimizer hyperparameter is 0 in the
        dtype of its parameters (Adam's ``eps=1e-8`` under ``16-true``); the message names the parameter group and
        a value that works (see :mod:`precision_base.numerics`).
        """
        version = fsdp_version_of(model)
        if version is not None:
            self._fsdp_version = version
        if version == 1 and self._keep:
            raise KeepFP32Error(_KEEP_FP32_FSDP1)
        if version == 1 and self._fp8:
            raise float8.Float8UnavailableError(_FP8_FSDP1.format(spec=self.spec))
        self._fsdp1_root = fsdp1_root(model)
        result = super().connect(model, optimizers, lr_schedulers)
        self._ready_scaler()
        warn_underflowing_hyperparameters(optimizers or (), self.spec, self.lightning.utilities.rank_zero_warn)
        return result

    def _ready_scaler(self) -> None:
        if self.scaler is None:
            return
        version: FSDPVersion = self._fsdp_version or 2
        if self._user_scaler:
            check_user_scaler(self.scaler, version, self.device_type)
            return
        right_kind = is_sharded_scaler(self.scaler) == (version == 1)
        if not right_kind or _compat.scaler_device(self.scaler) != self.device_type:
            self.scaler = move_state(self.scaler, make_scaler(version, self.device_type, self._scaler_options))

    # -- Lightning's Precision API --------------------------------------------------------------------------
    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """``*-true``: cast floating parameters and buffers to fp16/bf16/fp32 (skipped when they already are, which
        :meth:`fully_shard` ensures). ``*-mixed``: unchanged, parameters stay fp32. A LightningModule that is itself an
        FSDP2 unit holding parameters and defines no ``forward`` gets step methods that gather them
        (:func:`precision_fsdp.sharding.gather_root_in_steps`; logged on rank 0).

        Raises:
            precision_fsdp.float8.Float8UnavailableError: ``fp8-*`` and no Linear layer of the model was converted
                (sub-modules sharded before the whole model was seen, or a filter that chose none).
            precision_base.doors.WrongDoorError: Lightning code of the other door (Fabric for this Trainer class, a
                Trainer strategy for the Fabric class) is setting the plugin up; the message names the class to use.
        """
        check_caller(self)
        gathered = gather_root_in_steps(module)  # a LightningModule that is itself a unit holding parameters
        if gathered is not None:
            self.lightning.utilities.rank_zero_info(gathered)
        if self._fp8 and not float8.is_converted(module):
            raise float8.Float8UnavailableError(
                f"{self.spec}: no Linear layer of the model was converted to float8 (converted: "
                f"{self.fp8_converted or 'none'}). The plugin converts the first module it shards (with "
                "strategy='auto', the whole LightningModule, also when configure_model shards sub-modules through "
                "self.trainer.precision_plugin.fully_shard); when configure_model calls torch's fully_shard itself, "
                "or under another strategy (Lightning's ModelParallelStrategy), call "
                "self.trainer.precision_plugin.prepare_for_sharding(self) before any fully_shard. Check fp8_filter "
                "too: the defaults skip the first and last Linear and dimensions that are not multiples of 16."
            )
        if self._keep:
            return self._convert_with_kept(module)
        if self._keep.active and fsdp_version_of(module) == 2:  # the default float32 rules are FSDP2's only
            if not self._plan.mixed:
                return self._convert_with_kept(module)
            self._check_default_kept(module)
        if self._plan.mixed:
            return module
        target = self._plan.storage
        tensors = [*module.parameters(), *module.buffers()]
        if any(t.is_floating_point() and t.dtype != target for t in tensors):
            return module.to(dtype=target)
        return module

    def _convert_with_kept(self, module: torch.nn.Module) -> torch.nn.Module:
        """``convert_module`` with ``keep_fp32``: hooks on every kept module, the rest cast to the storage dtype.

        Raises:
            KeepFP32Error: the model is FSDP2-sharded but a kept module with parameters was sharded inside another
                unit (it was not reached by :meth:`fully_shard` before its parent), so it cannot have its own policy.
        """
        found = self._keep.kept(module)
        sharded = fsdp_version_of(module) == 2
        for name, kept, entry in found:
            has_params = any(True for _ in kept.parameters())
            if sharded and has_params and not is_kept(kept) and self._keep.is_default(entry):
                self._warn_default_not_kept(name, entry)
                continue
            if sharded and has_params and not is_kept(kept):
                raise KeepFP32Error(
                    f"keep_fp32 entry {entry} matches module {name!r}, but FSDP2 sharded it without the plugin's "
                    "float32 policy (inside another unit, or on its own with another policy), so it cannot keep "
                    "float32 parameters. Shard through trainer.precision_plugin.fully_shard(...) and call "
                    "trainer.precision_plugin.mark_keep_fp32(self) first in configure_model, or leave sharding to "
                    "strategy='auto' (FSDP2Strategy)."
                )
            self._keep_in_fp32(kept, entry)
        cast_except_kept_(module, self._plan.storage, [m for _, m, _ in found])
        return module

    def _check_default_kept(self, module: torch.nn.Module) -> None:
        """``*-mixed``: warn about each module a default rule keeps that FSDP2 sharded without the plugin."""
        for name, kept, entry in self._keep.kept(module):
            if not is_kept(kept) and any(True for _ in kept.parameters()):
                self._warn_default_not_kept(name, entry)

    def _warn_default_not_kept(self, name: str, entry: str) -> None:
        self.lightning.utilities.rank_zero_warn(
            f"{self.spec}: module {name!r} ({entry}) would be kept in float32 by default, but FSDP2 sharded it "
            "without the plugin (inside another unit or with another policy), so it computes as that unit does. If "
            "its forward fails with 'expected scalar type BFloat16 but found Float' (or Half), shard through "
            "trainer.precision_plugin.fully_shard(...) after trainer.precision_plugin.mark_keep_fp32(self), or "
            "leave sharding to strategy='auto' (FSDP2Strategy).",
            category=PrecisionPluginWarning,
        )

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
        """``*-mixed``: ``torch.autocast`` on :attr:`device_type` (the strategy's device: cuda, cpu, xpu ...) in
        fp16/bf16. ``*-true``: new floating tensors default to the parameter dtype."""
        if self._plan.autocast is not None:
            return torch.autocast(self.device_type, dtype=self._plan.autocast)
        return default_dtype(self._plan.storage)

    @override
    def train_step_context(self) -> AbstractContextManager[Any]:  # type: ignore[override]
        """:meth:`forward_context` itself (Lightning wraps it in a generator context manager: ~1.5 us a step)."""
        return self.forward_context()

    @override
    def convert_input(self, data: Any) -> Any:
        """Floating tensors -> fp32 for ``*-mixed`` (autocast and FSDP take it from there), else the parameter
        dtype. Integer tensors are left alone."""
        return cast_floating(data, self._plan.inputs)

    @override
    def convert_output(self, data: Any) -> Any:
        """Floating tensors -> ``torch.get_default_dtype()``, as the contract's :meth:`convert_output` (without its
        per-call imports: this runs every step)."""
        return cast_floating(data, torch.get_default_dtype())

    @override
    def optimizer_step(  # type: ignore[override]  # Lightning's own FSDPPrecision does the same
        self, optimizer: Any, model: Any, closure: Callable[[], Any], **kwargs: Any
    ) -> Any:
        """Lightning's step (with a scaler: closure, unscale so clipping sees true gradients, hooks and clipping,
        then the scaler steps, skipping on inf/NaN, and updates). Under ``16-mixed``, a run of skipped steps is
        watched: see ``max_skipped_steps``. With ``check_finite_grads``, a step with inf/NaN gradients on any rank
        is skipped on every rank: the gradients are dropped before the hooks, clipping and the optimizer run.

        Raises:
            precision_fsdp.overflow.OverflowStormError: ``max_skipped_steps`` steps in a row were skipped.
        """
        lightning_step = super().optimizer_step
        if self._check_finite and self._overflow is not None:
            skipped = [False]

            def checked_closure() -> Any:
                result = closure()
                skipped[0] = self._drop_nonfinite_grads(optimizer)
                return result

            output = lightning_step(optimizer, model, checked_closure, **kwargs)
            self._overflow.after_step(skipped[0], None, self.spec)
            return output
        return self._scaler_step_watched(lambda: lightning_step(optimizer, model, closure, **kwargs))

    def _drop_nonfinite_grads(self, optimizer: Any) -> bool:
        """``check_finite_grads``: whether any rank's gradients hold inf/NaN; if so they are dropped, so that the
        optimizer steps no parameter (parameters without gradients are not stepped)."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if grads_finite(params):
            return False
        optimizer.zero_grad(set_to_none=True)
        return True

    def _scaler_step_watched(self, step: Callable[[], Any]) -> Any:
        """Run ``step`` (an optimizer step through the scaler, if any); a step the scaler skipped (its scale fell)
        counts towards ``max_skipped_steps``."""
        before = self.scaler.get_scale() if self.scaler is not None else None
        output = step()
        if self.scaler is not None and self._overflow is not None and before is not None:
            after = self.scaler.get_scale()  # once: on a GPU each get_scale() waits for the device (.item())
            self._overflow.after_step(after < before, after, self.spec)
        return output

    @override
    def clip_grad_by_norm(self, optimizer: Optimizer, clip_val: Union[int, float]) -> None:
        """Clip by the exact global norm: DTensor gradients under FSDP2, the root's ``clip_grad_norm_`` under FSDP1.

        Raises:
            precision_fsdp.clipping.ClipGradNormError: (also Lightning's ``MisconfigurationException``, as the
                built-in raises) the global norm cannot be computed exactly; the message starts with Lightning's and
                names ``gradient_clip_algorithm='value'`` and the other alternatives.
        """
        error = clip_error_class(self.lightning)
        norm = clip_grad_norm(self.main_params(optimizer), clip_val, self._fsdp1_root, type(self).__name__, error)
        self._last_grad_norm = float(norm)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The scaler's state for ``16-mixed`` (the keys of Lightning's built-in, so checkpoints move between both
        classes), else empty."""
        return dict(self.scaler.state_dict()) if self.scaler is not None else {}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the scaler's state (written by this class or Lightning's built-in). State for a scaler this
        precision does not have was announced by :meth:`on_load_checkpoint` and is dropped."""
        if self.scaler is not None and state_dict:
            self.scaler.load_state_dict(state_dict)

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
            precision_fsdp.resume.PrecisionChangeError: the parameter storage dtype differs (``*-true`` on one side).
        """
        saved = resume.saved_precision(checkpoint, type(self).__qualname__)
        if saved is not None:
            init_scale = self.scaler.get_scale() if self.scaler is not None else None
            said = resume.changes(saved, self.precision, init_scale)
            if said:
                self.lightning.utilities.rank_zero_warn(resume.message(saved, self.precision, said))
        super().on_load_checkpoint(checkpoint)

    @override
    def precision_stats(self, strategy: Any = None) -> Mapping[str, float]:
        """What :class:`precision_base.PrecisionMonitor` logs: ``loss_scale`` (``16-mixed``), ``skipped_steps``
        (cumulative optimizer steps skipped for inf/NaN gradients: ``16-mixed``, or ``check_finite_grads=True``),
        ``nonfinite_grad_steps`` (the same steps: here every step with inf/NaN gradients is skipped) and
        ``grad_norm`` (the unscaled global gradient norm of the last step, when clipping by norm computed it)."""
        stats: dict[str, float] = {}
        if self.scaler is not None:
            stats["loss_scale"] = float(self.scaler.get_scale())
        if self._overflow is not None:
            stats["skipped_steps"] = float(self._overflow.skipped_total)
            stats["nonfinite_grad_steps"] = float(self._overflow.skipped_total)
        norm = getattr(self, "_last_grad_norm", None)
        if norm is not None:
            stats["grad_norm"] = norm
        return stats

    # -- precision schedules (precision_base.PrecisionSchedule) --------------------------------------------
    def precision_switch_problem(
        self, precision: str, strategy: Any = None, current: Optional[str] = None
    ) -> Optional[str]:
        """Why this plugin cannot switch from ``current`` (default: its precision now) to ``precision`` (canonical)
        during a run, or ``None`` when it can (FSDP2, the same parameter storage dtype, no fp8 on either side). See
        :mod:`precision_fsdp.switch`."""
        return switch.problem(self, precision, strategy, current, self._check_finite)

    def switch_precision(self, precision: str, model: Optional[torch.nn.Module] = None) -> None:
        """Run ``precision`` (canonical) from the next step on: the plugin's dtypes, its table and scaler, and the
        ``MixedPrecisionPolicy`` of every FSDP2 unit of ``model``; parameters and optimizer state are kept. Call it
        between optimizer steps (:class:`precision_base.PrecisionSchedule` does). See :mod:`precision_fsdp.switch`.

        Raises:
            ValueError: :meth:`precision_switch_problem` names a reason.
        """
        reason = switch.problem(self, precision, check_finite_grads=self._check_finite)
        if reason is not None:
            raise ValueError(f"{self.spec} -> {self.backend}:{precision}: {reason}")
        if precision == self.precision:
            return
        self._plan = switch.next_plan(self._plan, str(self.precision), precision)
        self.precision = precision  # type: ignore[assignment]
        self._fp8 = float8.is_fp8(precision)
        _compat.set_lightning_input_dtype(self, self._plan.inputs)
        if precision != "16-mixed":
            self.scaler = None
        elif self.scaler is None:  # fresh, at its init_scale (resume.changes says the same for a resume)
            self.scaler = make_scaler(self._fsdp_version or 2, self.device_type, self._scaler_options)  # type: ignore[assignment]
            self._user_scaler = False
        watched = precision == "16-mixed" or self._check_finite
        if not watched:
            self._overflow = None
        elif self._overflow is None:
            self._overflow = OverflowWatch(self._max_skipped_steps)
        if model is not None:
            switch.update_policies(model, self.mixed_precision_policy)

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


_FP8_FSDP1 = (
    "{spec} needs FSDP2 (fully_shard): torchao's float8 training and float8 all-gather are built for FSDP2. Use "
    "strategy='auto' (precision_fsdp.FSDP2Strategy) or Lightning's ModelParallelStrategy."
)

_KEEP_FP32_FSDP1 = (
    "keep_fp32 needs FSDP2 (fully_shard): FSDP1 (FSDPStrategy / strategy='fsdp') applies one MixedPrecision per "
    "wrapped unit and has no public per-module float32 override. Use strategy='auto' (precision_fsdp.FSDP2Strategy) "
    "or Lightning's ModelParallelStrategy, or drop keep_fp32."
)


def _compute_dtype_of(plugin: Any) -> Optional[torch.dtype]:
    """What Lightning's ``ThroughputMonitor`` reports for ``plugin``: the compute dtype for ours, else ``None``."""
    return plugin.param_dtype if isinstance(plugin, FSDPPrecisionImpl) else None


def _name(dtype: Optional[torch.dtype]) -> Optional[str]:
    return None if dtype is None else dtype_name(dtype)
