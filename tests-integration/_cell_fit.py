"""The short real fit every matrix cell runs: called in each of 2 ranks by ``precision_testsupport.launch.run_ranks``.

``fit({"backend": "fsdp" | "deepspeed", "precisions": [...], "root": "<dir>"})`` trains
:class:`precision_testsupport.models.TinyRegressor` once per precision through
``precision_base.Trainer(precision_plugin="<backend>:<precision>")`` on CPU, 2 processes (gloo), and returns what
rank 0 saw, per precision: the losses of every step, the dtype the network computed in, the dtypes of the parameters
as the strategy holds them, and facts about the strategy (FSDP2: whether the parameters are DTensors; DeepSpeed: the
ZeRO stage and the master-weight dtype). Strategies: FSDP2 under Lightning's ``ModelParallelStrategy``
(``data_parallel_size=2``), DeepSpeed ZeRO-2 under ``precision_deepspeed.DeepSpeedCPUStrategy``.
"""

from __future__ import annotations

from typing import Any

EPOCHS = 3
SAMPLES = 128  # 64 per rank
BATCH = 16  # 4 steps per epoch and rank


def _strategy(backend: str) -> Any:
    if backend == "fsdp":
        from lightning.pytorch.strategies import ModelParallelStrategy

        return ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    from precision_deepspeed import DeepSpeedCPUStrategy

    return DeepSpeedCPUStrategy(stage=2)


def _strategy_facts(backend: str, trainer: Any, model: Any) -> dict[str, Any]:
    from precision_testsupport.models import dtype_name

    params = list(model.parameters())
    facts: dict[str, Any] = {"param_dtypes": sorted({dtype_name(p.dtype) for p in params})}
    if backend == "fsdp":
        # FSDP2 turns each sharded parameter into a DTensor (its module moved between torch releases: match the name)
        facts["param_types"] = sorted({type(p).__name__ for p in params})
        return facts
    engine = trainer.model
    optimizer = engine.optimizer
    master = getattr(optimizer, "single_partition_of_fp32_groups", None)
    facts["zero_stage"] = engine.zero_optimization_stage()
    facts["master_dtypes"] = sorted({dtype_name(t.dtype) for t in master}) if master else None
    facts["param_dtypes"] = sorted({dtype_name(p.dtype) for p in engine.module.parameters()})
    return facts


def fit(args: dict[str, Any]) -> dict[str, Any]:
    """Train once per precision in this rank; rank 0's return value is the result (see the module docstring)."""
    import torch

    import precision_base
    from precision_testsupport.launch import world_size
    from precision_testsupport.models import QUIET, TinyRegressor, dtype_name

    backend = args["backend"]
    out: dict[str, Any] = {}
    for precision in args["precisions"]:
        world = world_size()  # restores WORLD_SIZE, which Lightning's teardown of the previous Trainer removes
        torch.manual_seed(0)
        model = TinyRegressor(features=8, hidden=16, lr=0.1, samples=SAMPLES, batch_size=BATCH, shard=backend == "fsdp")
        trainer = precision_base.Trainer(
            precision_plugin=f"{backend}:{precision}",
            strategy=_strategy(backend),
            accelerator="cpu",
            devices=2,
            max_epochs=EPOCHS,
            num_sanity_val_steps=0,
            default_root_dir=f"{args['root']}/{backend}-{precision}",
            **QUIET,
        )
        trainer.fit(model)
        plugin = trainer.precision_plugin
        out[precision] = {
            "world_size": world,
            "plugin": f"{type(plugin).__module__}.{type(plugin).__qualname__}",
            "strategy": type(trainer.strategy).__name__,
            "table": dict(plugin.dtypes().rows()),
            "losses": model.losses,
            "compute_dtypes": sorted({dtype_name(d) for d in model.compute_dtypes}),
            **_strategy_facts(backend, trainer, model),
        }
    return out
