"""Which DeepSpeed strategy a Trainer or Fabric gets for ``"deepspeed:..."`` (the plugin's ``configure_strategy``).

One choice for both doors, given the namespace: ``lightning.pytorch``/``pytorch_lightning`` choose among the
Trainer's strategies ([`precision_deepspeed.strategy.DeepSpeedCPUStrategy`][]), ``lightning.fabric``/
``lightning_fabric`` among Fabric's ([`precision_deepspeed.fabric.DeepSpeedCPUStrategy`][]). What differs per
door is data (`_Door`): the CPU strategy, the class names in the messages, whether a strategy name off the CPU
builds Lightning's class, and whether the plugin's section goes into Lightning's own class now (Fabric has no
``connect`` to write it later).

Imports [`precision_deepspeed.strategy`][], never the plugin: implementation -> selection -> strategy -> config.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from precision_base import TrainerConfigurationError
from precision_base.kit.plugin_support import uses_cpu, wrong_strategy_error
from precision_base.namespaces import FABRIC_NAMESPACES, for_namespace
from precision_deepspeed import _compat
from precision_deepspeed.config import (
    HALF_PRECISIONS,
    conflict_message,
    write_into_config,
)
from precision_deepspeed.errors import DeepSpeedConfigConflictError, cpu_fp16_refusal
from precision_deepspeed.strategy import SectionOwner, user_config_conflicts


@dataclass(frozen=True)
class _Door:
    """What strategy choice differs in between the Trainer and Fabric."""

    cpu_class: str
    """``"module:QualName"`` of the door's CPU strategy (built for the namespace)."""
    instances: str
    """The strategy instances to pass, in the remedy of a wrong strategy."""
    cpu_name: str
    """The CPU strategy as the messages name it."""
    names_build_lightnings_off_cpu: bool
    """Off the CPU, a strategy name builds Lightning's ``DeepSpeedStrategy`` (else the CPU strategy, which is
    Lightning's class unchanged there)."""
    writes_section_now: bool
    """Lightning's own ``DeepSpeedStrategy`` gets the plugin's section here (the door has no ``connect``)."""


_TRAINER = _Door(
    cpu_class="precision_deepspeed.strategy:DeepSpeedCPUStrategy",
    instances="an instance of lightning.pytorch.strategies.DeepSpeedStrategy (on GPUs) or "
    "precision_deepspeed.DeepSpeedCPUStrategy (on CPU or GPUs).",
    cpu_name="precision_deepspeed.DeepSpeedCPUStrategy",
    names_build_lightnings_off_cpu=True,
    writes_section_now=False,
)
_FABRIC = _Door(
    cpu_class="precision_deepspeed.fabric:DeepSpeedCPUStrategy",
    instances="an instance of precision_deepspeed.fabric.DeepSpeedCPUStrategy (CPU or GPUs) or "
    "lightning.fabric.strategies.DeepSpeedStrategy (GPUs).",
    cpu_name="precision_deepspeed.fabric.DeepSpeedCPUStrategy",
    names_build_lightnings_off_cpu=False,
    writes_section_now=True,
)


def _door(namespace: str) -> _Door:
    return _FABRIC if namespace in FABRIC_NAMESPACES else _TRAINER


def _strategies(namespace: str) -> Any:
    return importlib.import_module(f"{namespace}.strategies")


def _cpu_strategy_class(namespace: str) -> type:
    module, _, name = _door(namespace).cpu_class.partition(":")
    return for_namespace(getattr(importlib.import_module(module), name), namespace)


def deepspeed_strategy_names(namespace: str = "lightning.pytorch") -> list[str]:
    """Names in Lightning's strategy registry (the Trainer's or Fabric's) that build a DeepSpeed strategy
    (``"deepspeed_stage_2"``...)."""
    base = _strategies(namespace).DeepSpeedStrategy
    registry = _compat.strategy_registry(namespace)
    return sorted(
        name
        for name in registry
        if isinstance(cls := _compat.registered_class(registry, name), type) and issubclass(cls, base)
    )


def resolve_strategy(strategy: Any, *, accelerator: Any, plugin: SectionOwner, namespace: str) -> Any:
    """Turn the Trainer's or Fabric's ``strategy`` argument into a DeepSpeed strategy instance for ``plugin``.

    ``"auto"``, ``"deepspeed"`` and Lightning's ``"deepspeed_stage_*"`` names become an instance (on the CPU the
    door's DeepSpeed CPU strategy; off the CPU Lightning's ``DeepSpeedStrategy`` for the Trainer, the CPU strategy
    for Fabric); a DeepSpeed strategy instance is kept. The config the user gave is checked against the plugin's
    section here, so a contradiction fails when the Trainer (or Fabric) is built; the section itself is written
    later, once, by [`precision_deepspeed.strategy.write_plugin_config`][] (for Fabric, into Lightning's own
    class now: it formats its config where nothing of the plugin runs).

    Args:
        strategy: the ``strategy=`` argument.
        accelerator: the ``accelerator=`` argument.
        plugin: the precision plugin (its ``spec``, ``precision``, ``torch_autocast`` and section).
        namespace: the Lightning namespace the plugin was built for (``"lightning.pytorch"``,
            ``"pytorch_lightning"``, ``"lightning.fabric"``, ``"lightning_fabric"``).

    Raises:
        TrainerConfigurationError: ``strategy`` is not a DeepSpeed strategy, Lightning's own ``DeepSpeedStrategy``
            instance was given for the CPU, or fp16 was asked on a CPU DeepSpeed cannot run fp16 on.
        precision_deepspeed.errors.DeepSpeedConfigConflictError: the user's config contradicts the plugin's section.
    """
    door = _door(namespace)
    owner = plugin.spec
    section = plugin.precision_section()
    cpu = uses_cpu(accelerator)
    names = deepspeed_strategy_names(namespace)
    base = _strategies(namespace).DeepSpeedStrategy
    cpu_class = _cpu_strategy_class(namespace)
    remedy = (
        "Pass strategy='auto' (a DeepSpeed strategy is chosen for you), one of "
        + ", ".join(repr(n) for n in names)
        + ", or "
        + door.instances
    )
    resolved: Any
    if isinstance(strategy, str):
        name = "deepspeed" if strategy == "auto" else strategy
        if name not in names:
            raise wrong_strategy_error(owner, strategy, remedy)
        init_params = _compat.registry_init_params(_compat.strategy_registry(namespace), name)
        lightnings = door.names_build_lightnings_off_cpu and not cpu
        resolved = base(**init_params) if lightnings else cpu_class(**init_params)
    elif isinstance(strategy, base):
        if cpu and not isinstance(strategy, cpu_class):
            raise wrong_strategy_error(
                owner,
                strategy,
                f"Lightning's DeepSpeedStrategy refuses the CPU accelerator. Pass {door.cpu_name}(...) instead; it "
                "takes the same arguments.",
            )
        resolved = strategy
    else:
        raise wrong_strategy_error(owner, strategy, remedy)
    native_fp16 = not getattr(plugin, "torch_autocast", False)
    if cpu and native_fp16 and plugin.precision in HALF_PRECISIONS and not _compat.cpu_supports_fp16():
        raise TrainerConfigurationError(cpu_fp16_refusal(owner))
    problems = user_config_conflicts(resolved, section)
    if problems:
        raise DeepSpeedConfigConflictError(conflict_message(owner, problems))
    if door.writes_section_now and not isinstance(resolved, cpu_class) and isinstance(resolved.config, dict):
        # Lightning's own class: it formats its config in setup_environment, where nothing of the plugin runs
        write_into_config(
            resolved.config, section, owner=owner, strategy_loss_scaling=_compat.strategy_loss_scaling(resolved)
        )
    return resolved


__all__ = ["deepspeed_strategy_names", "resolve_strategy"]
