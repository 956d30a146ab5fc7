"""``FSDPPrecision``: Lightning's FSDP precision plugin for FSDP1 and FSDP2, with the built-in's defects fixed.

The class keeps Lightning's name and derives from Lightning's ``FSDPPrecision``, so ``FSDPStrategy`` accepts it and
checkpoints written by either class resume with the other (Lightning files the plugin state under the class's
``__qualname__``; the state is the loss scaler's, with the same keys in both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

import torch
from lightning.pytorch.plugins.precision import FSDPPrecision as _LightningFSDPPrecision
from lightning.pytorch.plugins.precision import Precision as _LightningPrecision
from torch import Tensor
from torch.amp import GradScaler
from torch.distributed.tensor import DTensor
from torch.optim import Optimizer

from precision_base import PRECISIONS, InvalidSpecError, PrecisionPlugin, SpecTypeError, normalize_precision
from precision_base.casting import cast_floating, default_dtype
from precision_base.contract import DtypeTable
from precision_fsdp.clipping import clip_grad_norm
from precision_fsdp.policy import DtypePlan, FSDPVersion, dtype_name, parse_dtype
from precision_fsdp.scaler import (
    check_scaler_options,
    check_user_scaler,
    is_sharded_scaler,
    make_scaler,
    move_state,
    provisional_device,
    scaler_device,
)
from precision_fsdp.strategy import configure_strategy, fsdp1_root, fsdp_version_of

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import Strategy
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy


def _cast_unsharded_(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """Cast, in place, the floating parameters and buffers of ``module`` that FSDP2 has not sharded yet."""
    for sub in module.modules():
        for param in sub._parameters.values():
            floating = param is not None and not isinstance(param, DTensor) and param.is_floating_point()
            if floating and param is not None and param.dtype != dtype:
                param.data = param.data.to(dtype)
        for name, buf in sub._buffers.items():
            if buf is not None and buf.is_floating_point() and buf.dtype != dtype:
                sub._buffers[name] = buf.to(dtype)


class FSDPPrecision(PrecisionPlugin, _LightningFSDPPrecision):  # type: ignore[misc]  # precision: str vs Literal
    """Precision plugin for Fully Sharded Data Parallel: FSDP1 (``FSDPStrategy``) and FSDP2 (``fully_shard`` under
    ``ModelParallelStrategy``).

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

    Raises:
        ValueError: unsupported ``precision``; a scaler or scaler options for a precision that does not scale;
            an unsupported ``reduce_dtype``.
    """

    backend: ClassVar[str] = "fsdp"
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS

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
    ) -> None:
        try:
            canonical = normalize_precision(precision)
        except (InvalidSpecError, SpecTypeError):
            raise ValueError(
                f"precision={precision!r} is not supported by FSDPPrecision; use one of {', '.join(self.precisions)}"
            ) from None
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
        self._plan = DtypePlan.for_precision(canonical, None if reduce_dtype is None else parse_dtype(reduce_dtype))
        self._desired_input_dtype = self._plan.inputs  # read by Lightning's ThroughputMonitor
        self._scaler_options = options
        self._user_scaler = scaler is not None
        self._fsdp_version: Optional[FSDPVersion] = None
        self._fsdp1_root: Optional[torch.nn.Module] = None
        self.scaler: Optional[GradScaler] = scaler  # type: ignore[assignment]
        if scaler is None and canonical == "16-mixed":
            # provisional: holds the settings and any loaded state until connect() knows the FSDP version and device
            self.scaler = make_scaler(2, provisional_device(), options)

    # -- what the plugin declares ---------------------------------------------------------------------------
    @property
    def reduce_dtype(self) -> torch.dtype:
        """Dtype gradients are reduce-scattered in (FSDP1 and FSDP2)."""
        return self._plan.reduce

    @property
    def param_dtype(self) -> torch.dtype:
        """Dtype of the unsharded parameters during forward and backward (FSDP's ``param_dtype``)."""
        return self._plan.compute

    @property
    def fsdp_version(self) -> Optional[FSDPVersion]:
        """1 or 2 once the plugin has seen the model (or sharded it with :meth:`fully_shard`), else ``None``."""
        return self._fsdp_version

    def dtypes(self, fsdp_version: Optional[FSDPVersion] = None) -> DtypeTable:
        """The dtype of parameters, compute, reduction, buffers and inputs.

        Args:
            fsdp_version: 1 (``FSDPStrategy``) or 2 (``fully_shard``). Default: the version the plugin is used with,
                or 2 before it knows (the two differ only in the buffers row).
        """
        return self._plan.table(fsdp_version or self._fsdp_version or 2)

    def describe(self) -> Mapping[str, Any]:
        """The FSDP1 and FSDP2 configs, the FSDP1 dtype table and the scaler, for ``precision-plugins show``."""
        mp = self.mixed_precision_config
        policy = self.mixed_precision_policy
        facts: dict[str, Any] = {
            "FSDP1 MixedPrecision (FSDPStrategy)": {
                "param_dtype": _name(mp.param_dtype),
                "reduce_dtype": _name(mp.reduce_dtype),
                "buffer_dtype": _name(mp.buffer_dtype),
            },
            "FSDP1 dtypes": dict(self.dtypes(1).rows()),
            "FSDP2 MixedPrecisionPolicy (fully_shard)": {
                "param_dtype": _name(policy.param_dtype),
                "reduce_dtype": _name(policy.reduce_dtype),
                "output_dtype": _name(policy.output_dtype),
                "cast_forward_inputs": policy.cast_forward_inputs,
            },
        }
        if self.scaler is not None:
            facts["scaler"] = {"kind": type(self.scaler).__name__, "device": scaler_device(self.scaler)} | dict(
                self.scaler.state_dict()
            )
        return facts

    @property
    def mixed_precision_config(self) -> MixedPrecision:
        """FSDP1's ``MixedPrecision``: ``param_dtype`` = compute dtype, ``reduce_dtype`` = :attr:`reduce_dtype`,
        ``buffer_dtype`` = compute dtype. ``FSDPStrategy`` passes it to ``FullyShardedDataParallel``."""
        return self._plan.fsdp1_mixed_precision()

    @property
    def mixed_precision_policy(self) -> MixedPrecisionPolicy:
        """FSDP2's ``MixedPrecisionPolicy``: ``param_dtype`` = compute dtype, ``reduce_dtype`` = :attr:`reduce_dtype`,
        forward inputs cast to ``param_dtype``, outputs left in it."""
        return self._plan.fsdp2_policy()

    def fully_shard(self, module: torch.nn.Module, mesh: Optional[DeviceMesh] = None, **kwargs: Any) -> Any:
        """Shard ``module`` with FSDP2 using this plugin's dtypes; the one line a ``configure_model`` needs::

            def configure_model(self):
                for layer in self.model.layers:
                    self.trainer.precision_plugin.fully_shard(layer, mesh=self.device_mesh["data_parallel"])
                self.trainer.precision_plugin.fully_shard(self.model, mesh=self.device_mesh["data_parallel"])

        Parameters and buffers not yet sharded are first cast to the storage dtype (fp32 for ``32-true`` and
        ``*-mixed``, fp16/bf16 for ``*-true``); ``mp_policy`` is :attr:`mixed_precision_policy`. Other keyword
        arguments go to ``torch.distributed.fsdp.fully_shard``. Returns the sharded module.

        Raises:
            TypeError: ``mp_policy`` is passed (the dtypes come from the plugin and nowhere else).
        """
        from torch.distributed.fsdp import fully_shard

        if "mp_policy" in kwargs:
            raise TypeError(
                "FSDPPrecision.fully_shard() sets mp_policy from the plugin's precision; do not pass one (choose "
                "the precision and reduce_dtype on the plugin instead)"
            )
        _cast_unsharded_(module, self._plan.storage)
        self._fsdp_version = 2
        return fully_shard(module, mesh=mesh, mp_policy=self.mixed_precision_policy, **kwargs)

    # -- Trainer front door ---------------------------------------------------------------------------------
    def configure_strategy(
        self, strategy: Union[str, Strategy], *, accelerator: Any, devices: Any
    ) -> Union[str, Strategy]:
        """``"auto"`` becomes ``FSDPStrategy()`` on CUDA GPUs; CPU needs ``ModelParallelStrategy`` (FSDP2); strategies
        that are not FSDP raise :class:`~precision_base.TrainerConfigurationError` naming what to pass."""
        return configure_strategy(f"fsdp:{self.precision}", strategy, accelerator=accelerator, devices=devices)

    def connect(self, model: Any, optimizers: Any, lr_schedulers: Any) -> Any:
        """Learn the device, the FSDP version and (FSDP1) the root module from the model, then ready the scaler."""
        version = fsdp_version_of(model)
        if version is not None:
            self._fsdp_version = version
        self._fsdp1_root = fsdp1_root(model)
        result = super().connect(model, optimizers, lr_schedulers)
        self._ready_scaler()
        return result

    def _ready_scaler(self) -> None:
        if self.scaler is None:
            return
        version: FSDPVersion = self._fsdp_version or 2
        if self._user_scaler:
            check_user_scaler(self.scaler, version, self.device_type)
            return
        right_kind = is_sharded_scaler(self.scaler) == (version == 1)
        if not right_kind or scaler_device(self.scaler) != self.device_type:
            self.scaler = move_state(self.scaler, make_scaler(version, self.device_type, self._scaler_options))

    # -- Lightning's Precision API --------------------------------------------------------------------------
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """``*-true``: cast floating parameters and buffers to fp16/bf16/fp32 (skipped when they already are, which
        :meth:`fully_shard` ensures). ``*-mixed``: unchanged, parameters stay fp32."""
        if self._plan.mixed:
            return module
        target = self._plan.storage
        tensors = [*module.parameters(), *module.buffers()]
        if any(t.is_floating_point() and t.dtype != target for t in tensors):
            return module.to(dtype=target)
        return module

    def tensor_init_context(self) -> AbstractContextManager[None]:
        """Floating tensors created inside are in the storage dtype (fp32 for ``32-true``/``*-mixed``)."""
        return default_dtype(self._plan.storage)

    def module_init_context(self) -> AbstractContextManager[None]:
        """Parameters of modules created inside are in the storage dtype (fp32 for ``32-true``/``*-mixed``)."""
        return default_dtype(self._plan.storage)

    def forward_context(self) -> AbstractContextManager[Any]:
        """``*-mixed``: ``torch.autocast`` on :attr:`device_type` (the strategy's device: cuda, cpu, xpu ...) in
        fp16/bf16. ``*-true``: new floating tensors default to the parameter dtype."""
        if self._plan.autocast is not None:
            return torch.autocast(self.device_type, dtype=self._plan.autocast)
        return default_dtype(self._plan.storage)

    def convert_input(self, data: Any) -> Any:
        """Floating tensors -> fp32 for ``*-mixed`` (autocast and FSDP take it from there), else the parameter
        dtype. Integer tensors are left alone."""
        return cast_floating(data, self._plan.inputs)

    def convert_output(self, data: Any) -> Any:
        """Floating tensors -> torch's default dtype (fp32 unless changed)."""
        return cast_floating(data, torch.get_default_dtype())

    def pre_backward(self, tensor: Tensor, module: pl.LightningModule) -> Tensor:  # type: ignore[override]
        """Scale the loss (``16-mixed``), then run Lightning's ``on_before_backward`` hooks."""
        if self.scaler is not None:
            tensor = self.scaler.scale(tensor)
        return _LightningPrecision.pre_backward(self, tensor, module)

    def optimizer_step(  # type: ignore[override]
        self, optimizer: Any, model: pl.LightningModule, closure: Callable[[], Any], **kwargs: Any
    ) -> Any:
        """Without a scaler: Lightning's step. With one (``16-mixed``): run the closure, unscale (so clipping sees
        true gradients), run the hooks and clipping, then let the scaler step (skipped on inf/NaN) and update."""
        if self.scaler is None:
            return _LightningPrecision.optimizer_step(self, optimizer, model=model, closure=closure, **kwargs)
        result = closure()
        if not getattr(optimizer, "_step_supports_amp_scaling", False):
            self.scaler.unscale_(optimizer)
        self._after_closure(model, optimizer)
        if result is None and model.automatic_optimization:
            return result  # the training step returned None: there is nothing to step
        output = self.scaler.step(optimizer, **kwargs)
        self.scaler.update()
        return output

    def clip_grad_by_norm(self, optimizer: Optimizer, clip_val: Union[int, float]) -> None:  # type: ignore[override]
        """Clip by the exact global norm: DTensor gradients under FSDP2, the root's ``clip_grad_norm_`` under FSDP1.

        Raises:
            precision_fsdp.clipping.ClipGradNormError: the global norm cannot be computed exactly; the message names
                ``gradient_clip_algorithm='value'`` and the other alternatives.
        """
        clip_grad_norm(self.main_params(optimizer), clip_val, self._fsdp1_root)

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state for ``16-mixed`` (same keys as Lightning's built-in), else empty."""
        return dict(self.scaler.state_dict()) if self.scaler is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the scaler's state (written by this class or Lightning's built-in)."""
        if self.scaler is not None and state_dict:
            self.scaler.load_state_dict(state_dict)

    # -- pickling -------------------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fsdp1_root"] = None  # a live model does not travel with the plugin
        return state

    def __repr__(self) -> str:
        return f"{type(self).__name__}(precision={self.precision!r}, reduce_dtype={dtype_name(self.reduce_dtype)})"


def _name(dtype: Optional[torch.dtype]) -> Optional[str]:
    return None if dtype is None else dtype_name(dtype)
