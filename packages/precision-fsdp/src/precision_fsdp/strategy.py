"""Pairing the plugin with a Lightning strategy, and telling FSDP1 from FSDP2 on a model.

* FSDP1 runs under Lightning's ``FSDPStrategy`` (``strategy="fsdp"``), on CUDA GPUs only.
* FSDP2 runs under Lightning's ``ModelParallelStrategy`` with ``fully_shard`` applied in ``configure_model``; it
  also runs on CPU (gloo).
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy, Strategy, StrategyRegistry

from precision_base import TrainerConfigurationError
from precision_fsdp.policy import FSDPVersion

_HOW_FSDP2 = (
    "strategy=ModelParallelStrategy(data_parallel_size=<devices>, tensor_parallel_size=1) (from "
    "lightning.pytorch.strategies) and shard in configure_model with "
    'self.trainer.precision_plugin.fully_shard(module, mesh=self.device_mesh["data_parallel"])'
)
_HOW_FSDP1 = 'strategy="fsdp" (or FSDPStrategy(...)) on CUDA GPUs'


def _uses_cpu(accelerator: Any) -> bool:
    name = accelerator if isinstance(accelerator, str) else type(accelerator).__name__.lower()
    if name == "auto":
        return not torch.cuda.is_available()
    return "cpu" in name


def _uses_cuda(accelerator: Any) -> bool:
    name = accelerator if isinstance(accelerator, str) else type(accelerator).__name__.lower()
    if name == "auto":
        return torch.cuda.is_available()
    return name in ("gpu", "cuda") or "cuda" in name


def _registered_class(name: str) -> Optional[type]:
    try:
        entry = StrategyRegistry[name]
    except KeyError:
        return None
    cls = entry.get("strategy")
    return cls if isinstance(cls, type) else None


def configure_strategy(
    plugin_name: str, strategy: Union[str, Strategy], *, accelerator: Any, devices: Any
) -> Union[str, Strategy]:
    """Check ``strategy`` for an FSDP precision plugin and return the one the Trainer should use.

    * ``"auto"``: ``FSDPStrategy()`` when CUDA GPUs are used; otherwise an error pointing at ModelParallelStrategy.
    * ``FSDPStrategy`` (instance or registered name such as ``"fsdp"``): accepted on GPUs, refused on CPU.
    * ``ModelParallelStrategy`` instances: accepted anywhere (FSDP2).
    * anything else (``"ddp"``, ``"deepspeed"`` ...): refused, naming what to pass instead.

    Raises:
        TrainerConfigurationError: the strategy cannot run this plugin; the message says what to pass.
    """
    if isinstance(strategy, str):
        if strategy == "auto":
            if _uses_cuda(accelerator):
                return FSDPStrategy()
            raise TrainerConfigurationError(
                f"precision_plugin={plugin_name!r} with strategy='auto' needs CUDA GPUs for FSDP1, and "
                f"accelerator={accelerator!r} does not use them. To train with FSDP2 here, pass {_HOW_FSDP2}."
            )
        cls = _registered_class(strategy)
        if cls is not None and issubclass(cls, FSDPStrategy):
            if _uses_cpu(accelerator):
                raise TrainerConfigurationError(_fsdp1_on_cpu(plugin_name, repr(strategy)))
            return strategy
        raise TrainerConfigurationError(_wrong_strategy(plugin_name, repr(strategy)))
    if isinstance(strategy, FSDPStrategy):
        if _uses_cpu(accelerator):
            raise TrainerConfigurationError(_fsdp1_on_cpu(plugin_name, type(strategy).__name__ + "(...)"))
        return strategy
    if isinstance(strategy, ModelParallelStrategy):
        return strategy
    raise TrainerConfigurationError(_wrong_strategy(plugin_name, type(strategy).__name__ + "(...)"))


def _fsdp1_on_cpu(plugin_name: str, given: str) -> str:
    return (
        f"precision_plugin={plugin_name!r} with strategy={given} is FSDP1, which cannot run on CPU (torch needs an "
        f"accelerator for FullyShardedDataParallel). On CPU, use FSDP2: pass {_HOW_FSDP2}."
    )


def _wrong_strategy(plugin_name: str, given: str) -> str:
    return (
        f"precision_plugin={plugin_name!r} is an FSDP precision plugin and cannot work with strategy={given}. "
        f"Pass {_HOW_FSDP1} for FSDP1, or {_HOW_FSDP2} for FSDP2."
    )


def fsdp_version_of(model: Any) -> Optional[FSDPVersion]:
    """1 if ``model`` holds FSDP1 ``FullyShardedDataParallel`` modules, 2 if it holds ``fully_shard`` modules,
    ``None`` if neither (or ``model`` is not a module)."""
    if not isinstance(model, torch.nn.Module):
        return None
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    version: Optional[FSDPVersion] = None
    for module in model.modules():
        if isinstance(module, FullyShardedDataParallel):
            return 1
        if isinstance(module, FSDPModule):
            version = 2
    return version


def fsdp1_root(model: Any) -> Optional[torch.nn.Module]:
    """``model`` itself if it is an FSDP1 root (``FullyShardedDataParallel`` wrapping everything), else ``None``."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    return model if isinstance(model, FullyShardedDataParallel) else None
