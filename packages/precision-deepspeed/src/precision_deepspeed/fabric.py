"""The DeepSpeed plugin for Lightning Fabric: ``precision_deepspeed.fabric.DeepSpeedPrecision`` and
``DeepSpeedCPUStrategy``.

One implementation, two thin adapters: the precision section of DeepSpeed's config, its conflict errors, the loss
scaling options, ``torch_autocast``, the dtypes, the conversions and the checkpoint record are
:class:`~precision_deepspeed.plugin.DeepSpeedPrecisionImpl`'s. :class:`FabricDeepSpeedPrecisionImpl` adapts what
differs in Fabric's loop: ``backward`` and ``optimizer_step`` get Fabric's arguments (the engine itself, no
closure), the autocast device is learned from the inputs (Fabric has no ``connect``), and ``configure_strategy``
pairs the plugin with Fabric's DeepSpeed strategies.

:class:`DeepSpeedCPUStrategy` is Fabric's ``DeepSpeedStrategy`` usable on ``accelerator="cpu"`` (gloo, DeepSpeed's
CPU accelerator), stepping around the same three CUDA-only spots as the Trainer's
:class:`precision_deepspeed.DeepSpeedCPUStrategy`; it writes the plugin's section into its config before Lightning
writes defaults. On other accelerators it is Lightning's class unchanged.
"""

from __future__ import annotations

import importlib
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Optional

import lightning.fabric as lf
import torch
from lightning.fabric.strategies.deepspeed import DeepSpeedStrategy as _FabricDeepSpeedStrategy
from typing_extensions import override

from precision_base import TrainerConfigurationError
from precision_base.fabric import bind_device_from_inputs
from precision_base.namespaces import for_namespace
from precision_base.plugin_support import uses_cpu, wrong_strategy_error
from precision_deepspeed import _compat
from precision_deepspeed.config import (
    HALF_PRECISIONS,
    DeepSpeedConfigConflictError,
    conflict_message,
    write_into_config,
)
from precision_deepspeed.plugin import DeepSpeedPrecisionError, DeepSpeedPrecisionImpl
from precision_deepspeed.selection import cpu_fp16_refusal
from precision_deepspeed.strategy import DeepSpeedCPUStrategy as _TrainerCPUStrategy
from precision_deepspeed.strategy import announce_cpu_op_build, user_config_conflicts, write_plugin_config

if TYPE_CHECKING:
    import deepspeed
    from lightning.fabric.strategies.deepspeed import DeepSpeedStrategy as _StrategyBase
    from torch.nn import Module
else:
    _StrategyBase = object  # at run time the concrete class supplies Fabric's DeepSpeedStrategy of its namespace


class FabricDeepSpeedPrecisionImpl(DeepSpeedPrecisionImpl):
    """All Fabric-specific code of :class:`DeepSpeedPrecision`; everything else is
    :class:`~precision_deepspeed.plugin.DeepSpeedPrecisionImpl`'s (same arguments, dtypes and errors)."""

    @override
    def configure_strategy(self, strategy: Any, *, accelerator: Any, devices: Any) -> Any:
        """The Fabric strategy to use, with the plugin's section in its config.

        ``"auto"``, ``"deepspeed"`` and Fabric's ``"deepspeed_stage_*"`` names become a :class:`DeepSpeedCPUStrategy`
        (Lightning's ``DeepSpeedStrategy`` off CPU); a ``DeepSpeedStrategy`` instance is kept (on CPU only ours),
        and the plugin's section is merged into its config now.

        Raises:
            TrainerConfigurationError: not a DeepSpeed strategy, Lightning's own ``DeepSpeedStrategy`` on CPU, or fp16
                on a CPU whose DeepSpeed accelerator has no fp16.
            precision_deepspeed.config.DeepSpeedConfigConflictError: the user's config contradicts the plugin.
        """
        strategies: Any = importlib.import_module(f"{self.lightning.__name__}.strategies")
        base: type = strategies.DeepSpeedStrategy
        cpu_class = for_namespace(DeepSpeedCPUStrategy, self.lightning.__name__)
        registry = strategies.STRATEGY_REGISTRY
        names = sorted(n for n in registry if issubclass(registry[n]["strategy"], base))
        remedy = (
            "Pass strategy='auto' (a DeepSpeed strategy is chosen for you), one of "
            + ", ".join(repr(n) for n in names)
            + ", or an instance of precision_deepspeed.fabric.DeepSpeedCPUStrategy (CPU or GPUs) or "
            "lightning.fabric.strategies.DeepSpeedStrategy (GPUs)."
        )
        cpu = uses_cpu(accelerator)
        resolved: Any
        if isinstance(strategy, str):
            name = "deepspeed" if strategy == "auto" else strategy
            if name not in names:
                raise wrong_strategy_error(self.spec, strategy, remedy)
            resolved = cpu_class(**_compat.registry_init_params(registry, name))
        elif isinstance(strategy, base):
            if cpu and not isinstance(strategy, cpu_class):
                raise wrong_strategy_error(
                    self.spec,
                    strategy,
                    "Lightning's DeepSpeedStrategy refuses the CPU accelerator. Pass "
                    "precision_deepspeed.fabric.DeepSpeedCPUStrategy(...) instead; it takes the same arguments.",
                )
            resolved = strategy
        else:
            raise wrong_strategy_error(self.spec, strategy, remedy)
        if cpu and not self.torch_autocast and self.precision in HALF_PRECISIONS and not _compat.cpu_supports_fp16():
            raise TrainerConfigurationError(cpu_fp16_refusal(self.spec))
        problems = user_config_conflicts(resolved, self.precision_section())
        if problems:
            raise DeepSpeedConfigConflictError(conflict_message(self.spec, problems))
        if not isinstance(resolved, cpu_class) and isinstance(resolved.config, dict):
            # Lightning's own class: it formats its config in setup_environment, where nothing of ours runs
            write_into_config(
                resolved.config,
                self.precision_section(),
                owner=self.spec,
                strategy_loss_scaling=_compat.strategy_loss_scaling(resolved),
            )
        return resolved

    @override
    def convert_input(self, data: Any) -> Any:
        """Learn the compute device from the inputs, then cast like the Trainer class."""
        bind_device_from_inputs(self, data)
        return super().convert_input(data)

    @override
    def backward(self, tensor: torch.Tensor, model: Any, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """``engine.backward(tensor, ...)``: Fabric hands over the DeepSpeed engine; it scales, partitions and
        reduces the gradients."""
        model.backward(tensor, *args, **kwargs)

    @override
    def optimizer_step(self, optimizer: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """``optimizer.step(**kwargs)``, then the ``max_skipped_steps`` watch, as in the Trainer class. Fabric
        passes the engine or DeepSpeed's own optimizer (Lightning 2.6 passes the ZeRO optimizer): a skipped step is
        ``engine.was_step_applied()`` false for the one, the optimizer's overflow flag for the other.

        Raises:
            DeepSpeedPrecisionError: (fp16) a step overflowed again at the lowest loss scale; DeepSpeed's message
                first, then what to do.
            precision_deepspeed.plugin.DeepSpeedOverflowStormError: ``max_skipped_steps`` steps in a row were
                skipped (a :class:`precision_base.OverflowStormError`).
        """
        try:
            with torch.no_grad():  # as in the Trainer plugin's optimizer_step
                result = optimizer.step(**kwargs)
        except Exception as exc:
            if not _compat.is_min_loss_scale_error(exc):
                raise
            raise DeepSpeedPrecisionError(
                f"{exc} Under {self.spec} every step overflowed at min_loss_scale="
                f"{self.loss_scaling.min_loss_scale}: look for inf/NaN in the loss or the data, lower the learning "
                "rate, or use 'deepspeed:bf16-mixed'."
            ) from exc
        if hasattr(optimizer, "was_step_applied"):  # the engine
            self._count_skipped_step(optimizer)
        else:  # DeepSpeed's optimizer (what Fabric steps when it does not take the engine for an optimizer)
            self._count_skipped_optimizer_step(optimizer)
        return result


class DeepSpeedPrecision(FabricDeepSpeedPrecisionImpl, lf.plugins.precision.DeepSpeedPrecision):  # type: ignore[misc]
    """Precision plugin for DeepSpeed under Lightning Fabric.

    The same arguments, dtypes and errors as the Trainer class :class:`precision_deepspeed.DeepSpeedPrecision`.
    """


class FabricDeepSpeedCPUStrategyImpl(_StrategyBase):
    """All code of the Fabric :class:`DeepSpeedCPUStrategy` (see the module docstring)."""

    _engine_rank_scope: bool = False

    # the Trainer CPU strategy's helpers use no super() and only attributes both classes have: shared, not copied
    def _on_cpu(self) -> bool:
        return _TrainerCPUStrategy._on_cpu(self)  # type: ignore[arg-type]

    def _engine_rank(self) -> AbstractContextManager[None]:
        return _TrainerCPUStrategy._engine_rank(self)  # type: ignore[arg-type]

    @property
    def precision_plugin(self) -> Any:
        """The precision plugin (Fabric calls it ``precision``); :func:`write_plugin_config` reads this name."""
        return self.precision

    @property
    def lightning_module(self) -> None:
        """Fabric has no LightningModule (and no Trainer ``gradient_clip_val``); :func:`write_plugin_config` asks."""
        return None

    @override
    def setup_environment(self) -> None:
        """On CPU: the DDP-level setup without DeepSpeedStrategy's CUDA check (the check is all its override adds)."""
        cpu = self._on_cpu()
        (_compat.base_method(self, "DeepSpeedStrategy", "setup_environment") if cpu else super().setup_environment)()

    @override
    def _setup_distributed(self) -> None:
        if not self._on_cpu():
            super()._setup_distributed()
            return
        # the device-index check does not apply: CPU devices carry no index
        _compat.reset_seed(self)
        self._set_world_ranks()
        announce_cpu_op_build(self.global_rank, "lightning.fabric")
        self._init_deepspeed_distributed()
        if not _compat.config_formatted(self):
            self._format_config()
            self._config_initialized = True

    @property
    @override
    def root_device(self) -> torch.device:
        device = super().root_device
        if self._engine_rank_scope and device.type == "cpu" and device.index is None:
            return torch.device("cpu", self.local_rank)  # read only by deepspeed.initialize(args=...device_rank)
        return device

    @override
    def _initialize_engine(
        self, model: Module, optimizer: Optional[Any] = None, scheduler: Optional[Any] = None
    ) -> tuple[deepspeed.DeepSpeedEngine, Any, Any]:
        with self._engine_rank():
            return super()._initialize_engine(model, optimizer, scheduler)

    @override
    def _format_config(self) -> None:
        write_plugin_config(self)
        super()._format_config()


class DeepSpeedCPUStrategy(FabricDeepSpeedCPUStrategyImpl, _FabricDeepSpeedStrategy):
    """Lightning Fabric's ``DeepSpeedStrategy``, usable with ``accelerator="cpu"``; takes every argument of
    ``lightning.fabric.strategies.DeepSpeedStrategy``. See :class:`FabricDeepSpeedCPUStrategyImpl`."""


__all__ = [
    "DeepSpeedCPUStrategy",
    "DeepSpeedPrecision",
    "FabricDeepSpeedCPUStrategyImpl",
    "FabricDeepSpeedPrecisionImpl",
]
