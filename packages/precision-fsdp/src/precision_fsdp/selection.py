"""Which Lightning strategy an FSDP precision plugin trains with, chosen before Lightning sees any argument.

* ``strategy="auto"`` becomes :class:`~precision_fsdp.fsdp2_strategy.FSDP2Strategy` on every accelerator, CUDA
  included: FSDP2 (``fully_shard``) is the FSDP PyTorch develops (FSDP1 is in maintenance), it is the one that runs
  on CPU (gloo) as well as on GPUs, so one default behaves the same everywhere, and its per-parameter DTensor
  sharding gives the exact global norm for clip-by-norm. The model is sharded by a default policy unless the
  LightningModule shards it in ``configure_model``.
* FSDP1 stays one word away: ``strategy="fsdp"`` (or any ``FSDPStrategy``) on CUDA GPUs; an ``FSDPStrategy`` whose
  ``mixed_precision=`` would silently replace the plugin's dtypes is refused.
* any ``ModelParallelStrategy`` (FSDP2 with your own ``configure_model``) is accepted on any accelerator.
* anything else (``"ddp"``, ``"deepspeed"`` ...) is refused, naming what to pass instead.

Both doors choose here: :func:`choose_strategy` for the Trainer (``FSDPPrecision.configure_strategy``),
:func:`choose_fabric_strategy` for Fabric (``precision_fsdp.fabric.FSDPPrecision.configure_strategy``), each given
the Lightning namespace and, for Fabric, its :class:`~precision_fsdp.fabric.FSDP2Strategy` class.
"""

from __future__ import annotations

import types
from typing import Any, Union

from precision_base.namespaces import NAMESPACES, for_namespace
from precision_base.plugin_support import registered_strategy_class, uses_cpu, wrong_strategy_error
from precision_fsdp._compat import fsdp2_cpu_problem, lightning_fsdp_on_cpu_message
from precision_fsdp.fsdp2_strategy import FSDP2Strategy

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
    cpu_problem = fsdp2_cpu_problem() if uses_cpu(accelerator) else None
    fsdp1: type = lightning.strategies.FSDPStrategy
    model_parallel: type = lightning.strategies.ModelParallelStrategy
    if isinstance(strategy, str):
        if strategy == "auto":
            if cpu_problem is not None:
                raise wrong_strategy_error(spec, strategy, _fsdp2_not_on_this_cpu(cpu_problem))
            built: type = for_namespace(FSDP2Strategy, namespace) if namespace in NAMESPACES else FSDP2Strategy
            return built()
        cls = registered_strategy_class(strategy, namespace)
        if cls is not None and issubclass(cls, fsdp1):
            if uses_cpu(accelerator):
                raise wrong_strategy_error(spec, strategy, _fsdp1_on_cpu(lightning, accelerator))
            return strategy
        raise wrong_strategy_error(spec, strategy, f"Pass {HOW_FSDP2} for FSDP2, or {HOW_FSDP1} for FSDP1.")
    if isinstance(strategy, fsdp1):
        if uses_cpu(accelerator):
            raise wrong_strategy_error(spec, strategy, _fsdp1_on_cpu(lightning, accelerator))
        if getattr(strategy, "mixed_precision", None) is not None:
            raise wrong_strategy_error(
                spec,
                strategy,
                "FSDPStrategy(mixed_precision=...) would replace the plugin's dtypes (Lightning's FSDPStrategy prefers "
                "it to the plugin's mixed_precision_config). Remove mixed_precision= and choose the dtypes on the "
                "plugin (its precision, reduce_dtype=...).",
            )
        return strategy
    if isinstance(strategy, model_parallel):
        if cpu_problem is not None:
            raise wrong_strategy_error(spec, strategy, _fsdp2_not_on_this_cpu(cpu_problem))
        return strategy
    raise wrong_strategy_error(spec, strategy, f"Pass {HOW_FSDP2} for FSDP2, or {HOW_FSDP1} for FSDP1.")


def choose_fabric_strategy(
    spec: str, lightning: types.ModuleType, strategy: Any, *, accelerator: Any, fsdp2_strategy: type
) -> Union[str, Any]:
    """Check ``strategy`` for the Fabric FSDP plugin ``spec`` and return the one Fabric should use: ``"auto"`` ->
    ``fsdp2_strategy`` (Fabric's :class:`~precision_fsdp.fabric.FSDP2Strategy`, built for the namespace: FSDP2 over
    all processes, sharded by the plugin); any ``ModelParallelStrategy`` is kept; ``"fsdp"``/``FSDPStrategy``
    (FSDP1) is kept off CPU and refused on CPU.

    Args:
        spec: the plugin's name, e.g. ``"fsdp:bf16-mixed"``.
        lightning: the Fabric namespace's root module (``lightning.fabric`` or ``lightning_fabric``).
        strategy: Fabric's ``strategy=`` argument.
        accelerator: Fabric's ``accelerator=`` argument.
        fsdp2_strategy: the Fabric ``FSDP2Strategy`` class of this package.

    Raises:
        TrainerConfigurationError: the strategy cannot run this plugin; the message says what to pass.
    """
    cpu_problem = fsdp2_cpu_problem() if uses_cpu(accelerator) else None
    fsdp1: type = lightning.strategies.FSDPStrategy
    model_parallel: type = lightning.strategies.ModelParallelStrategy
    wants_fsdp1 = (isinstance(strategy, str) and strategy.startswith("fsdp")) or isinstance(strategy, fsdp1)
    if wants_fsdp1:
        if uses_cpu(accelerator):
            raise wrong_strategy_error(
                spec,
                strategy,
                "FSDPStrategy is FSDP1, which cannot run on CPU (torch needs an accelerator for "
                f"FullyShardedDataParallel). On CPU, use FSDP2: pass {HOW_FABRIC_FSDP2}.",
            )
        return strategy
    if strategy == "auto" or isinstance(strategy, model_parallel):
        if cpu_problem is not None:
            raise wrong_strategy_error(spec, strategy, f"FSDP2 cannot run on a CPU with this torch: {cpu_problem}.")
        if strategy == "auto":
            return for_namespace(fsdp2_strategy, lightning.__name__)()
        return strategy
    raise wrong_strategy_error(spec, strategy, f"Pass {HOW_FABRIC_FSDP2} for FSDP2, or {HOW_FABRIC_FSDP1}.")


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
