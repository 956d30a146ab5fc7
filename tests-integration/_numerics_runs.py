"""Real runs for ``test_numerics_strategies.py``: the numerics warnings under each strategy a user can pass.

``run_ranks("_numerics_runs.py:fsdp_runs", {"runs": [[door, strategy], ...]}, world=2)`` fits, for each run, the MLP
of ``precision_testsupport.models.mlp`` for STEPS steps under ``fsdp:16-true`` with Adam(``eps=1e-8``), one after
another in the same two processes (gloo, CPU): ``door`` is ``"trainer"`` (``precision_base.Trainer``) or ``"fabric"``
(``precision_base.Fabric``); ``strategy`` is ``"default"`` (``strategy="auto"``: ``FSDP2Strategy``) or
``"torch_fully_shard"`` (the user's ``ModelParallelStrategy``, sharding with torch's own ``fully_shard`` in
``configure_model`` / the ``parallelize_fn``). Every rank reports the dtypes of the parameters its optimizer held at
each step and the warnings it gave (``simplefilter("always")``); rank 0 returns ``{"<door>:<strategy>": [rank 0's,
rank 1's]}``.

``run_ranks("_numerics_runs.py:deepspeed_runs", {"runs": [[door, precision, stage], ...]}, world=1)`` fits the same
MLP under ``deepspeed:<precision>`` with the door's ``DeepSpeedCPUStrategy(stage=stage)``, Adam with two parameter
groups: ``eps=1e-8`` for the first layer, ``weight_decay=1e-50`` (0 even in float32) for the last. It reports the
dtypes of the parameters the optimizer DeepSpeed steps holds while it steps, per step, and the warnings. (DeepSpeed
needs no second process for this: the check is in the plugin's optimizer step, which every DeepSpeed strategy calls
once per step.)
"""

from __future__ import annotations

import warnings
from typing import Any

import lightning as L
import torch
from lightning.fabric import seed_everything
from torch.utils.data import DataLoader

from precision_base import Fabric, PrecisionPluginWarning, Trainer
from precision_base.kit.cpu_half import CPU_FP16_EMULATED
from precision_testsupport.launch import world_size
from precision_testsupport.models import dtype_name, mlp, regression_data

STEPS = 3
WIDTH = 16
BATCH = 8
LOWER = "FSDP with `16-true` enables computation in lower precision."


def _report(caught: list[warnings.WarningMessage], stepped: list[list[str]]) -> dict[str, Any]:
    return {
        "stepped": stepped,
        "numerics": [  # the CPU's float16 speed is another warning (test_cpu_half_warning.py)
            str(w.message)
            for w in caught
            if issubclass(w.category, PrecisionPluginWarning) and CPU_FP16_EMULATED not in str(w.message)
        ],
        "lower_precision": sum(str(w.message).startswith(LOWER) for w in caught),
    }


def _dtypes(optimizer: Any) -> list[str]:
    return sorted({dtype_name(p.dtype) for group in optimizer.param_groups for p in group["params"]})


def _data(rank: int, world: int) -> DataLoader[Any]:
    x, y = regression_data(WIDTH, samples=BATCH * world * STEPS, seed=5)[:]
    return DataLoader(list(zip(x[rank::world], y[rank::world], strict=True)), batch_size=BATCH)


# -- FSDP: two processes ---------------------------------------------------------------------------------------------
class Regression(L.LightningModule):
    """The MLP; records the dtypes of the parameters its optimizer holds at every step. Its first layer gets inputs
    in its own dtype (as a token embedding does), so a model left float32 trains (silently not 16-true) instead of
    failing on a dtype mismatch."""

    def __init__(self) -> None:
        super().__init__()
        self.net = mlp(features=WIDTH, hidden=WIDTH, out=1, seed=3)
        self.stepped: list[list[str]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.stepped.append(_dtypes(self.trainer.optimizers[0]))
        return torch.nn.functional.mse_loss(self.net(x.to(self.net[0].weight.dtype)).float(), y.float())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3, eps=1e-8)


class TorchSharded(Regression):
    """``configure_model`` shards with torch's ``fully_shard`` (the first layer, then the MLP), not the plugin's."""

    def configure_model(self) -> None:
        from torch.distributed.fsdp import fully_shard

        mesh = self.device_mesh["data_parallel"]
        fully_shard(self.net[0], mesh=mesh)
        fully_shard(self.net, mesh=mesh)


def _torch_parallelize(module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    fully_shard(module[0], mesh=device_mesh["data_parallel"])
    fully_shard(module, mesh=device_mesh["data_parallel"])
    return module


def fsdp_trainer(strategy: str) -> dict[str, Any]:
    """One ``fsdp:16-true`` Trainer fit in this rank (see the module docstring)."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    world = world_size()  # the previous fit's teardown may have deleted WORLD_SIZE
    L.seed_everything(7)
    chosen: Any = "auto"
    model = Regression()
    if strategy == "torch_fully_shard":
        chosen = ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1)
        model = TorchSharded()
    trainer = Trainer(
        precision_plugin="fsdp:16-true", strategy=chosen, accelerator="cpu", devices=world, max_steps=STEPS,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        use_distributed_sampler=False,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, _data(int(trainer.global_rank), world))
    return _report(caught, model.stepped)


def fsdp_fabric(strategy: str) -> dict[str, Any]:
    """The same under ``precision_base.Fabric``."""
    from lightning.fabric.strategies import ModelParallelStrategy

    world = world_size()
    seed_everything(7)
    chosen: Any = "auto"
    if strategy == "torch_fully_shard":
        chosen = ModelParallelStrategy(_torch_parallelize, data_parallel_size=world, tensor_parallel_size=1)
    fabric = Fabric(precision_plugin="fsdp:16-true", strategy=chosen, accelerator="cpu", devices=world)
    fabric.launch()
    stepped = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = fabric.setup_module(mlp(features=WIDTH, hidden=WIDTH, out=1, seed=3))
        optimizer = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8))
        for x, y in _data(fabric.global_rank, world):
            x, y = fabric.to_device((x, y))
            fabric.backward(torch.nn.functional.mse_loss(model(x).float(), y))
            stepped.append(_dtypes(optimizer))
            optimizer.step()
            optimizer.zero_grad()
    return _report(caught, stepped)


def fsdp_runs(args: dict[str, Any]) -> dict[str, Any] | None:
    """Every ``[door, strategy]`` of ``args["runs"]``; rank 0 returns every rank's report per run."""
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    for door, strategy in args["runs"]:
        report = (fsdp_trainer if door == "trainer" else fsdp_fabric)(strategy)
        reports: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(reports, report)
        results[f"{door}:{strategy}"] = reports
    return results if int(torch.distributed.get_rank()) == 0 else None


# -- DeepSpeed -------------------------------------------------------------------------------------------------------
def _two_groups(model: torch.nn.Module) -> torch.optim.Optimizer:
    """Adam: ``eps=1e-8`` (0 in float16, not in float32) for ``0``; ``weight_decay=1e-50`` (0 in float32) for ``2``."""
    first, last = model[0], model[2]  # type: ignore[index]
    return torch.optim.Adam(
        [{"params": first.parameters()}, {"params": last.parameters(), "weight_decay": 1e-50}], lr=1e-3, eps=1e-8
    )


class StepDtypes:
    """The dtypes of the parameters the optimizer DeepSpeed steps holds while it steps (a step pre-hook: ZeRO-3
    fills its groups only then), per outer step."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.steps: list[list[str]] = []
        self.hooked: Any = None

    def watch(self, engine: Any) -> None:
        from precision_deepspeed.steps import stepped_optimizer

        optimizer = stepped_optimizer(engine)
        if self.hooked is not optimizer:
            self.hooked = optimizer
            optimizer.register_step_pre_hook(lambda stepping, args, kwargs: self.seen.update(_dtypes(stepping)))

    def step_done(self) -> None:
        self.steps.append(sorted(self.seen))
        self.seen = set()


class TwoGroups(Regression):
    def __init__(self) -> None:
        super().__init__()
        self.dtypes = StepDtypes()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.dtypes.watch(self.trainer.strategy.model)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).float(), y.float())

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.dtypes.step_done()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return _two_groups(self.net)


def deepspeed_trainer(precision: str, stage: int) -> dict[str, Any]:
    from precision_deepspeed import DeepSpeedCPUStrategy

    world = world_size()
    L.seed_everything(7)
    trainer = Trainer(
        precision_plugin=f"deepspeed:{precision}", strategy=DeepSpeedCPUStrategy(stage=stage), accelerator="cpu",
        devices=world, max_steps=STEPS, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, use_distributed_sampler=False,
    )  # fmt: skip
    model = TwoGroups()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, _data(int(trainer.global_rank), world))
    return _report(caught, model.dtypes.steps)


def deepspeed_fabric(precision: str, stage: int) -> dict[str, Any]:
    from precision_deepspeed.fabric import DeepSpeedCPUStrategy

    world = world_size()
    seed_everything(7)
    fabric = Fabric(
        precision_plugin=f"deepspeed:{precision}",
        strategy=DeepSpeedCPUStrategy(stage=stage),
        accelerator="cpu",
        devices=world,
    )
    fabric.launch()
    dtypes = StepDtypes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = mlp(features=WIDTH, hidden=WIDTH, out=1, seed=3)
        model, optimizer = fabric.setup(module, _two_groups(module))
        for x, y in _data(fabric.global_rank, world):
            x, y = fabric.to_device((x, y))
            dtypes.watch(fabric.strategy.model)
            fabric.backward(torch.nn.functional.mse_loss(model(x).float(), y), model=model)
            optimizer.step()
            optimizer.zero_grad()
            dtypes.step_done()
    return _report(caught, dtypes.steps)


def deepspeed_runs(args: dict[str, Any]) -> dict[str, Any] | None:
    """Every ``[door, precision, stage]`` of ``args["runs"]``; rank 0 returns its report per run."""
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    for door, precision, stage in args["runs"]:
        run = deepspeed_trainer if door == "trainer" else deepspeed_fabric
        results[f"{door}:{precision}:{stage}"] = run(precision, int(stage))
    return results if int(torch.distributed.get_rank()) == 0 else None
