"""A DeepSpeed strategy that also runs on DeepSpeed's CPU accelerator, and the choice of strategy for the Trainer.

Lightning's ``DeepSpeedStrategy`` refuses the CPU in three places: ``setup_environment`` requires a
``CUDAAccelerator``; ``setup_distributed`` validates device indices, which are ``None`` for CPU devices; and the
engine is created with ``device_rank=root_device.index`` (``None`` on CPU), which DeepSpeed compares with 0.
:class:`DeepSpeedCPUStrategy` steps around these three when its accelerator is Lightning's ``CPUAccelerator``,
and is Lightning's ``DeepSpeedStrategy`` unchanged on any other accelerator. DeepSpeed picks its CPU accelerator
itself when no GPU is visible, and gloo for the collectives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Union

import torch
from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.strategies import DeepSpeedStrategy, Strategy, StrategyRegistry

from precision_base import TrainerConfigurationError
from precision_deepspeed.config import HALF_PRECISIONS, apply_gradient_clipping

if TYPE_CHECKING:
    import deepspeed
    from torch.nn import Module


class DeepSpeedCPUStrategy(DeepSpeedStrategy):
    """Lightning's ``DeepSpeedStrategy``, usable with ``accelerator="cpu"`` (gloo, DeepSpeed's CPU accelerator).

    Takes every argument of ``lightning.pytorch.strategies.DeepSpeedStrategy``. On a non-CPU accelerator it
    behaves exactly like Lightning's class. When its precision plugin is a
    :class:`precision_deepspeed.DeepSpeedPrecision`, the plugin's precision section is merged into the config before
    Lightning formats it, so ZeRO-3's ``deepspeed.zero.Init`` already sees it.
    """

    _engine_rank_scope: bool = False

    def _on_cpu(self) -> bool:
        return isinstance(self.accelerator, CPUAccelerator)

    def setup_environment(self) -> None:
        if not self._on_cpu():
            super().setup_environment()
            return
        # DeepSpeedStrategy's override only adds the CUDA check; run the DDP-level setup it would defer to
        super(DeepSpeedStrategy, self).setup_environment()

    def setup_distributed(self) -> None:
        if not self._on_cpu():
            super().setup_distributed()
            return
        # the device-index check does not apply: CPU devices carry no index
        reset_seed()
        self.set_world_ranks()
        self._init_deepspeed_distributed()

    @property
    def root_device(self) -> torch.device:
        device = super().root_device
        if self._engine_rank_scope and device.type == "cpu" and device.index is None:
            # read only by deepspeed.initialize(args=Namespace(device_rank=root_device.index)): give it the rank
            return torch.device("cpu", self.local_rank)
        return device

    @contextlib.contextmanager
    def _engine_rank(self) -> Iterator[None]:
        self._engine_rank_scope = self._on_cpu()
        try:
            yield
        finally:
            self._engine_rank_scope = False

    def _setup_model_and_optimizer(
        self, model: Module, optimizer: Any, lr_scheduler: Any = None
    ) -> tuple[deepspeed.DeepSpeedEngine, Any]:
        with self._engine_rank():
            return super()._setup_model_and_optimizer(model, optimizer, lr_scheduler)

    def _initialize_deepspeed_inference(self, model: Module) -> None:
        with self._engine_rank():
            super()._initialize_deepspeed_inference(model)

    def _format_config(self) -> None:
        from precision_deepspeed.plugin import DeepSpeedPrecision

        plugin = self.precision_plugin
        if isinstance(plugin, DeepSpeedPrecision) and isinstance(self.config, dict):
            plugin.apply_to_config(self.config)
            module = self.lightning_module
            if module is not None:
                apply_gradient_clipping(self.config, module.trainer.gradient_clip_val, owner=plugin.spec)
        super()._format_config()


def on_cpu(accelerator: Any) -> bool:
    """Whether Lightning will run on the CPU for this ``accelerator`` argument."""
    if isinstance(accelerator, str):
        if accelerator == "cpu":
            return True
        return accelerator == "auto" and not torch.cuda.is_available()
    return isinstance(accelerator, CPUAccelerator)


def deepspeed_strategy_names() -> list[str]:
    """Names in Lightning's strategy registry that build a DeepSpeed strategy (``"deepspeed_stage_2"``...)."""
    return sorted(
        name
        for name, entry in StrategyRegistry.items()
        if isinstance(entry.get("strategy"), type) and issubclass(entry["strategy"], DeepSpeedStrategy)
    )


def cpu_supports_fp16() -> bool:
    """Whether DeepSpeed's CPU accelerator accepts fp16 here (it asks oneDNN for native fp16 support)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except Exception:  # an older torch without the probe: DeepSpeed treats that as unsupported too
        return False


def resolve_strategy(
    strategy: Union[str, Strategy], *, accelerator: Any, precision: str, owner: str, native_fp16: bool = True
) -> DeepSpeedStrategy:
    """Turn the Trainer's ``strategy`` argument into a DeepSpeed strategy instance for ``precision``.

    Raises:
        TrainerConfigurationError: ``strategy`` is not a DeepSpeed strategy, Lightning's own ``DeepSpeedStrategy``
            instance was given for the CPU, or fp16 was asked on a CPU DeepSpeed cannot run fp16 on.
    """
    cpu = on_cpu(accelerator)
    names = deepspeed_strategy_names()
    hint = (
        "Pass strategy='auto' (a DeepSpeed strategy is chosen for you), one of "
        + ", ".join(repr(n) for n in names)
        + ", or an instance of lightning.pytorch.strategies.DeepSpeedStrategy (on GPUs) or "
        "precision_deepspeed.DeepSpeedCPUStrategy (on CPU or GPUs)."
    )
    resolved: DeepSpeedStrategy
    if isinstance(strategy, str):
        name = "deepspeed" if strategy == "auto" else strategy
        if name not in names:
            raise TrainerConfigurationError(
                f"{owner} runs through DeepSpeed's engine and needs a DeepSpeed strategy, but the Trainer got "
                f"strategy={strategy!r}. {hint}"
            )
        init_params = dict(StrategyRegistry[name]["init_params"])
        resolved = DeepSpeedCPUStrategy(**init_params) if cpu else DeepSpeedStrategy(**init_params)
    elif isinstance(strategy, DeepSpeedStrategy):
        if cpu and not isinstance(strategy, DeepSpeedCPUStrategy):
            raise TrainerConfigurationError(
                f"{owner} on the CPU: Lightning's DeepSpeedStrategy refuses the CPU accelerator. Pass "
                "precision_deepspeed.DeepSpeedCPUStrategy(...) instead; it takes the same arguments."
            )
        resolved = strategy
    else:
        raise TrainerConfigurationError(
            f"{owner} runs through DeepSpeed's engine and needs a DeepSpeed strategy, but the Trainer got "
            f"{type(strategy).__name__}. {hint}"
        )
    if cpu and native_fp16 and precision in HALF_PRECISIONS and not cpu_supports_fp16():
        raise TrainerConfigurationError(
            f"{owner} on the CPU: DeepSpeed's fp16 mode needs native fp16 support in its CPU accelerator (oneDNN fp16, "
            "i.e. AVX512-FP16 or AMX-FP16), which this CPU lacks. Use 'deepspeed:bf16-mixed', or "
            "precision_deepspeed.DeepSpeedPrecision('16-mixed', torch_autocast=True) for fp16 autocast."
        )
    if resolved.config is None:  # pragma: no cover - Lightning always builds a config
        resolved.config = {}
    return resolved


__all__ = ["DeepSpeedCPUStrategy", "cpu_supports_fp16", "deepspeed_strategy_names", "on_cpu", "resolve_strategy"]
