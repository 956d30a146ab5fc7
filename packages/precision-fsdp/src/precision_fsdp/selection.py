"""Which Lightning strategy an FSDP precision plugin trains with, chosen before Lightning sees any argument.

* ``strategy="auto"`` becomes [`FSDP2Strategy`][precision_fsdp.sharding.strategy.FSDP2Strategy] on every accelerator,
  CUDA included: FSDP2 (``fully_shard``) is the FSDP PyTorch develops (FSDP1 is in maintenance), it is the one that runs
  on CPU (gloo) as well as on GPUs, so one default behaves the same everywhere, and its per-parameter DTensor
  sharding gives the exact global norm for clip-by-norm. The model is sharded by a default policy unless the
  LightningModule shards it in ``configure_model``.
* FSDP1 stays one word away: ``strategy="fsdp"`` (or any ``FSDPStrategy``) on CUDA GPUs; an ``FSDPStrategy`` whose
  ``mixed_precision=`` would silently replace the plugin's dtypes is refused.
* any ``ModelParallelStrategy`` (FSDP2 with your own ``configure_model``) is accepted on any accelerator.
* anything else (``"ddp"``, ``"deepspeed"`` ...) is refused, naming what to pass instead.

Both doors choose here: [`choose_strategy`][precision_fsdp.selection.choose_strategy] for the Trainer
(``FSDPPrecision.configure_strategy``),
[`choose_fabric_strategy`][precision_fsdp.selection.choose_fabric_strategy] for Fabric
(``precision_fsdp.fabric.FSDPPrecision.configure_strategy``), each given
the Lightning namespace and, for Fabric, its [`FSDP2Strategy`][precision_fsdp.fabric.FSDP2Strategy] class.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

from precision_base.kit.plugin_support import registered_strategy_class, uses_cpu, wrong_strategy_error
from precision_base.namespaces import NAMESPACES, for_namespace
from precision_fsdp._compat import fsdp1_state_dict_type, fsdp2_cpu_problem, lightning_fsdp_on_cpu_message
from precision_fsdp.sharding.strategy import FSDP2Strategy

HOW_FSDP2 = (
    'strategy="auto" (FSDP2, sharded by a default policy; precision_fsdp.FSDP2Strategy(auto_wrap_policy=...) to '
    "choose the units), or ModelParallelStrategy(data_parallel_size=<devices>, tensor_parallel_size=1) with "
    'self.trainer.precision_plugin.fully_shard(module, mesh=self.device_mesh["data_parallel"]) in configure_model'
)
HOW_FSDP1 = 'strategy="fsdp" (or FSDPStrategy(...)) on CUDA GPUs'
HOW_FABRIC_FSDP2 = (
    'strategy="auto" (FSDP2, sharded by a default policy; precision_fsdp.fabric.FSDP2Strategy(auto_wrap_policy=...) '
    "to choose the units), or lightning.fabric.strategies.ModelParallelStrategy(parallelize_fn, "
    "data_parallel_size=<devices>, tensor_parallel_size=1) whose parallelize_fn calls "
    'plugin.fully_shard(module, mesh=device_mesh["data_parallel"])'
)
HOW_FABRIC_FSDP1 = 'strategy="fsdp" (or lightning.fabric.strategies.FSDPStrategy(...)) on CUDA GPUs'


@dataclass(frozen=True)
class DoorChoice:
    """What differs between the two doors' choice of strategy (the rules are the same): the texts, and how a
    strategy name is recognised as FSDP1.

    Attributes:
        is_fsdp1_name: ``(strategy name, Lightning namespace root) -> bool``.
        fsdp1_on_cpu: ``(Lightning namespace root, accelerator) -> text`` refusing FSDP1 on CPU.
        fsdp2_not_on_cpu: ``(the torch problem) -> text`` refusing FSDP2 on a CPU this torch cannot run it on.
        other: the text refusing any other strategy.
        fsdp1_mixed_precision: the text refusing an ``FSDPStrategy(mixed_precision=...)`` instance (both doors'
            ``FSDPStrategy`` prefer it to the plugin's ``mixed_precision_config``).
    """

    is_fsdp1_name: Callable[[str, types.ModuleType], bool]
    fsdp1_on_cpu: Callable[[types.ModuleType, Any], str]
    fsdp2_not_on_cpu: Callable[[str], str]
    other: str
    fsdp1_mixed_precision: str


def _choose(
    spec: str, lightning: types.ModuleType, strategy: Any, accelerator: Any, door: DoorChoice, auto: Callable[[], Any]
) -> Union[str, Any]:
    """The rules of both doors (see the module docstring); ``auto()`` builds the strategy for ``"auto"``."""
    cpu_problem = fsdp2_cpu_problem() if uses_cpu(accelerator) else None
    fsdp1: type = lightning.strategies.FSDPStrategy
    model_parallel: type = lightning.strategies.ModelParallelStrategy
    named_fsdp1 = isinstance(strategy, str) and strategy != "auto" and door.is_fsdp1_name(strategy, lightning)
    if named_fsdp1 or isinstance(strategy, fsdp1):
        if uses_cpu(accelerator):
            raise wrong_strategy_error(spec, strategy, door.fsdp1_on_cpu(lightning, accelerator) + _keep_full(strategy))
        mixed_precision = getattr(strategy, "mixed_precision", None) if isinstance(strategy, fsdp1) else None
        if mixed_precision is not None:
            raise wrong_strategy_error(spec, strategy, door.fsdp1_mixed_precision)
        return strategy
    if strategy == "auto" or isinstance(strategy, model_parallel):
        if cpu_problem is not None:
            raise wrong_strategy_error(spec, strategy, door.fsdp2_not_on_cpu(cpu_problem))
        return auto() if isinstance(strategy, str) else strategy
    raise wrong_strategy_error(spec, strategy, door.other)


def _keep_full(strategy: Any) -> str:
    """For a refused ``FSDPStrategy(state_dict_type="full")``: how its replacement keeps one-file checkpoints."""
    if fsdp1_state_dict_type(strategy) != "full":
        return ""
    return (
        " Your FSDPStrategy saves full state dicts (state_dict_type='full'); FSDP2Strategy keeps that with "
        "FSDP2Strategy(save_distributed_checkpoint=False) (its default writes a folder of shards)."
    )


def choose_strategy(
    spec: str, lightning: types.ModuleType, strategy: Any, *, accelerator: Any, devices: Any
) -> Union[str, Any]:
    """Check ``strategy`` for the FSDP plugin ``spec`` and return the one the Trainer should use.

    Args:
        spec: the plugin's name, e.g. ``"fsdp:bf16-mixed"``.
        lightning: the Lightning namespace's root module the plugin was built for.
        strategy: the Trainer's ``strategy=`` argument.
        accelerator: the Trainer's ``accelerator=`` argument.
        devices: the Trainer's ``devices=`` argument (unused: every choice here works with any device count).

    Raises:
        TrainerConfigurationError: the strategy cannot run this plugin; the message says what to pass.
    """
    namespace = lightning.__name__

    def auto() -> Any:
        built: type = for_namespace(FSDP2Strategy, namespace) if namespace in NAMESPACES else FSDP2Strategy
        return built()

    return _choose(spec, lightning, strategy, accelerator, TRAINER, auto)


def choose_fabric_strategy(
    spec: str, lightning: types.ModuleType, strategy: Any, *, accelerator: Any, fsdp2_strategy: type
) -> Union[str, Any]:
    """Check ``strategy`` for the Fabric FSDP plugin ``spec`` and return the one Fabric should use: ``"auto"`` ->
    ``fsdp2_strategy`` (Fabric's [`FSDP2Strategy`][precision_fsdp.fabric.FSDP2Strategy], built for the namespace: FSDP2
    over
    all processes, sharded by the plugin); any ``ModelParallelStrategy`` is kept; ``"fsdp"``/``FSDPStrategy``
    (FSDP1) is kept off CPU and refused on CPU; an ``FSDPStrategy(mixed_precision=...)`` is refused, as at the
    Trainer door.

    Args:
        spec: the plugin's name, e.g. ``"fsdp:bf16-mixed"``.
        lightning: the Fabric namespace's root module (``lightning.fabric`` or ``lightning_fabric``).
        strategy: Fabric's ``strategy=`` argument.
        accelerator: Fabric's ``accelerator=`` argument.
        fsdp2_strategy: the Fabric ``FSDP2Strategy`` class of this package.

    Raises:
        TrainerConfigurationError: the strategy cannot run this plugin; the message says what to pass.
    """
    return _choose(
        spec, lightning, strategy, accelerator, FABRIC, lambda: for_namespace(fsdp2_strategy, lightning.__name__)()
    )


def _registered_fsdp1(name: str, lightning: types.ModuleType) -> bool:
    cls = registered_strategy_class(name, lightning.__name__)
    return cls is not None and issubclass(cls, lightning.strategies.FSDPStrategy)


def _fsdp2_not_on_this_cpu(problem: str) -> str:
    return (
        f'FSDP2 cannot run on a CPU with this torch: {problem}. Train on CUDA GPUs (FSDP2 or strategy="fsdp" for '
        "FSDP1), or upgrade torch for FSDP2 on CPU."
    )


def _fsdp1_on_cpu(lightning: types.ModuleType, accelerator: Any) -> str:
    """The refusal of FSDP1 on CPU: the installed Lightning's own message, verbatim, then what to do instead."""
    shown = "cpu" if accelerator == "auto" else accelerator  # Lightning resolves "auto" before its check
    lightnings = lightning_fsdp_on_cpu_message(lightning, shown)
    if lightnings is None:  # a Lightning that would accept it: say it in our words
        lightnings = f"FSDPStrategy needs a CUDA accelerator, not accelerator={shown!r}."
    end = "" if lightnings.endswith(".") else "."  # Lightning 2.4.0-2.5.2's message has no full stop
    return (
        f"{lightnings}{end} FSDPStrategy is FSDP1, which cannot run on CPU (torch needs an "
        f"accelerator for FullyShardedDataParallel). On CPU, use FSDP2: pass {HOW_FSDP2}."
    )


TRAINER = DoorChoice(
    is_fsdp1_name=_registered_fsdp1,
    fsdp1_on_cpu=_fsdp1_on_cpu,
    fsdp2_not_on_cpu=_fsdp2_not_on_this_cpu,
    other=f"Pass {HOW_FSDP2} for FSDP2, or {HOW_FSDP1} for FSDP1.",
    fsdp1_mixed_precision=(
        "FSDPStrategy(mixed_precision=...) would replace the plugin's dtypes (Lightning's FSDPStrategy prefers "
        "it to the plugin's mixed_precision_config). Remove mixed_precision= and choose the dtypes on the "
        "plugin (its precision, reduce_dtype=...)."
    ),
)
"""The Trainer door's texts (``strategy="fsdp"``, a registered FSDP1 name, is looked up in Lightning's registry)."""

FABRIC = DoorChoice(
    is_fsdp1_name=lambda name, lightning: name.startswith("fsdp"),
    fsdp1_on_cpu=lambda lightning, accelerator: (
        "FSDPStrategy is FSDP1, which cannot run on CPU (torch needs an accelerator for "
        f"FullyShardedDataParallel). On CPU, use FSDP2: pass {HOW_FABRIC_FSDP2}."
    ),
    fsdp2_not_on_cpu=lambda problem: f"FSDP2 cannot run on a CPU with this torch: {problem}.",
    other=f"Pass {HOW_FABRIC_FSDP2} for FSDP2, or {HOW_FABRIC_FSDP1}.",
    fsdp1_mixed_precision=(
        "lightning.fabric.strategies.FSDPStrategy(mixed_precision=...) would replace the plugin's dtypes (Fabric's "
        "FSDPStrategy prefers it to the plugin's mixed_precision_config). Remove mixed_precision= and choose the "
        "dtypes on the plugin (its precision, reduce_dtype=...)."
    ),
)
"""The Fabric door's texts, as they were in ``precision_fsdp.fabric``."""
