"""Which DeepSpeed strategy a Trainer gets for ``precision_plugin="deepspeed:..."`` (``configure_strategy``).

Imports :mod:`precision_deepspeed.strategy`, never the plugin: plugin -> selection -> strategy -> config.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from precision_base import TrainerConfigurationError
from precision_base.plugin_support import registered_strategy_class, uses_cpu, wrong_strategy_error
from precision_deepspeed import _compat
from precision_deepspeed.config import HALF_PRECISIONS, DeepSpeedConfigConflictError, conflict_message
from precision_deepspeed.strategy import DeepSpeedCPUStrategy, user_config_conflicts


def cpu_fp16_refusal(owner: str) -> str:
    """Why DeepSpeed's fp16 mode cannot run on this CPU (``_compat.cpu_supports_fp16()`` said no), and what can."""
    return (
        f"{owner} on the CPU: DeepSpeed's CPU accelerator refuses its fp16 mode here (DeepSpeed runs fp16 on a CPU "
        "from 0.16.8, and only with oneDNN's native fp16: AVX512-FP16 or AMX-FP16). Use 'deepspeed:bf16-mixed' (also "
        "with torch_autocast=True). DeepSpeed's fp16 autocast (DeepSpeedPrecision('16-mixed', torch_autocast=True)) "
        "is refused too: its ZeRO optimizer skips overflowing steps without lowering its GradScaler's scale."
    )


def _strategies(namespace: str) -> Any:
    return importlib.import_module(f"{namespace}.strategies")


def _cpu_strategy_class(namespace: str) -> type:
    from precision_base.namespaces import for_namespace

    return for_namespace(DeepSpeedCPUStrategy, namespace)


def deepspeed_strategy_names(namespace: str = "lightning.pytorch") -> list[str]:
    """Names in Lightning's strategy registry that build a DeepSpeed strategy (``"deepspeed_stage_2"``...)."""
    base = _strategies(namespace).DeepSpeedStrategy
    registry = _strategies(namespace).StrategyRegistry
    return sorted(
        name
        for name in registry
        if isinstance(cls := registered_strategy_class(name, namespace), type) and issubclass(cls, base)
    )


def resolve_strategy(
    strategy: Any,
    *,
    accelerator: Any,
    section: Mapping[str, Any],
    precision: str,
    owner: str,
    namespace: str = "lightning.pytorch",
    native_fp16: bool = True,
) -> Any:
    """Turn the Trainer's ``strategy`` argument into a DeepSpeed strategy instance for the plugin.

    ``"auto"``, ``"deepspeed"`` and Lightning's ``"deepspeed_stage_*"`` names become an instance (on the CPU a
    :class:`~precision_deepspeed.strategy.DeepSpeedCPUStrategy`, otherwise Lightning's ``DeepSpeedStrategy``); a
    DeepSpeed strategy instance is kept. The config the user gave is checked against the plugin's ``section`` here,
    so a contradiction fails when the Trainer is built; the section itself is written later, once, by
    :func:`precision_deepspeed.strategy.write_plugin_config`.

    Raises:
        TrainerConfigurationError: ``strategy`` is not a DeepSpeed strategy, Lightning's own ``DeepSpeedStrategy``
            instance was given for the CPU, or fp16 was asked on a CPU DeepSpeed cannot run fp16 on.
        precision_deepspeed.config.DeepSpeedConfigConflictError: the user's config contradicts ``section``.
    """
    cpu = uses_cpu(accelerator)
    names = deepspeed_strategy_names(namespace)
    base = _strategies(namespace).DeepSpeedStrategy
    cpu_class = _cpu_strategy_class(namespace)
    remedy = (
        "Pass strategy='auto' (a DeepSpeed strategy is chosen for you), one of "
        + ", ".join(repr(n) for n in names)
        + ", or an instance of lightning.pytorch.strategies.DeepSpeedStrategy (on GPUs) or "
        "precision_deepspeed.DeepSpeedCPUStrategy (on CPU or GPUs)."
    )
    resolved: Any
    if isinstance(strategy, str):
        name = "deepspeed" if strategy == "auto" else strategy
        if name not in names:
            raise wrong_strategy_error(owner, strategy, remedy)
        init_params = _compat.registry_init_params(_strategies(namespace).StrategyRegistry, name)
        resolved = cpu_class(**init_params) if cpu else base(**init_params)
    elif isinstance(strategy, base):
        if cpu and not isinstance(strategy, cpu_class):
            raise wrong_strategy_error(
                owner,
                strategy,
                "Lightning's DeepSpeedStrategy refuses the CPU accelerator. Pass "
                "precision_deepspeed.DeepSpeedCPUStrategy(...) instead; it takes the same arguments.",
            )
        resolved = strategy
    else:
        raise wrong_strategy_error(owner, strategy, remedy)
    if cpu and native_fp16 and precision in HALF_PRECISIONS and not _compat.cpu_supports_fp16():
        raise TrainerConfigurationError(cpu_fp16_refusal(owner))
    problems = user_config_conflicts(resolved, section)
    if problems:
        raise DeepSpeedConfigConflictError(conflict_message(owner, problems))
    return resolved


__all__ = ["deepspeed_strategy_names", "resolve_strategy"]
