"""2-process FSDP2 runs on CPU (gloo) for ``test_cant_train.py``: Fabric set up the way that cannot train.

``run_ranks("_cant_train_fabric.py:<fn>", {...})`` runs one function per pair of processes; rank 0 returns. Each
run trains the MLP of ``precision_testsupport.models.mlp`` on a fixed regression batch for STEPS steps, under
Fabric's ``ModelParallelStrategy`` whose ``parallelize_fn`` calls ``fully_shard`` (FSDP2 replaces every parameter
with a sharded one). ``lightning_joint`` is Lightning's own classes with Fabric's first-page pattern
``fabric.setup(model, optimizer)``; ``ours_joint`` is the same through ``precision_base.Fabric`` and records the
error; ``ours_separate`` is the documented order (``setup_module``, optimizer from the sharded parameters,
``setup_optimizers``); ``ours_detached_loss`` rewraps the loss in a new tensor, so that no gradient reaches the
model, and records the warnings.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from lightning.fabric import Fabric as LightningFabric
from lightning.fabric import seed_everything
from lightning.fabric.strategies import ModelParallelStrategy
from torch.distributed._composable.fsdp import fully_shard

from precision_base import Fabric
from precision_testsupport.launch import world_size
from precision_testsupport.models import mlp, regression_data

STEPS = 5
WIDTH = 16


def _parallelize(module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
    fully_shard(module, mesh=device_mesh["data_parallel"])
    return module


def _fabric(ours: bool) -> Any:
    world_size()  # Fabric's teardown may have deleted WORLD_SIZE
    seed_everything(7)
    strategy = ModelParallelStrategy(_parallelize, data_parallel_size=2, tensor_parallel_size=1)
    kwargs: dict[str, Any] = {"strategy": strategy, "accelerator": "cpu", "devices": 2}
    fabric = Fabric(precision_plugin="fsdp:32-true", **kwargs) if ours else LightningFabric(**kwargs)
    fabric.launch()
    return fabric


def _train(fabric: Any, model: Any, optimizer: Any, *, detach: bool = False) -> list[float]:
    x, y = regression_data(WIDTH, samples=16, seed=5)[:16]
    rank = fabric.global_rank
    x, y = fabric.to_device((x[rank::2], y[rank::2]))
    losses = []
    for _ in range(STEPS):
        loss = torch.nn.functional.mse_loss(model(x), y)
        if detach:  # a common mistake: a new tensor from the loss's value, cut off from the model's graph
            loss = torch.tensor(loss.item(), requires_grad=True)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(round(fabric.all_reduce(loss.detach(), reduce_op="mean").item(), 6))
    return losses


def _rank0(result: dict[str, Any]) -> dict[str, Any] | None:
    return result if int(torch.distributed.get_rank()) == 0 else None


def lightning_joint(args: dict[str, Any]) -> dict[str, Any] | None:
    """Lightning's Fabric, ``fabric.setup(model, optimizer)``: the optimizer keeps the pre-sharding parameters."""
    torch.set_num_threads(1)
    fabric = _fabric(ours=False)
    model = mlp(features=WIDTH, hidden=WIDTH, out=1, seed=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    current = {id(p) for p in model.parameters()}
    return _rank0({"losses": _train(fabric, model, optimizer), "optimizer_holds_model_params": held <= current})


def ours_joint(args: dict[str, Any]) -> dict[str, Any] | None:
    """``precision_base.Fabric``, the same joint setup: refused with the fix."""
    torch.set_num_threads(1)
    fabric = _fabric(ours=True)
    model = mlp(features=WIDTH, hidden=WIDTH, out=1, seed=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        fabric.setup(model, optimizer)
    except Exception as exc:  # the test asserts on the type and message
        return _rank0({"error_type": type(exc).__name__, "error": str(exc)})
    return _rank0({"error_type": None, "error": None})


def ours_late_optimizer_setup(args: dict[str, Any]) -> dict[str, Any] | None:
    """``precision_base.Fabric``: the optimizer is created before ``setup_module`` and set up after it."""
    torch.set_num_threads(1)
    fabric = _fabric(ours=True)
    model = mlp(features=WIDTH, hidden=WIDTH, out=1, seed=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = fabric.setup_module(model)
    try:
        fabric.setup_optimizers(optimizer)
    except Exception as exc:  # the test asserts on the type and message
        return _rank0({"error_type": type(exc).__name__, "error": str(exc)})
    return _rank0({"error_type": None, "error": None})


def ours_separate(args: dict[str, Any]) -> dict[str, Any] | None:
    """``precision_base.Fabric``, the order the error message gives: trains, with no warning."""
    torch.set_num_threads(1)
    fabric = _fabric(ours=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = fabric.setup_module(mlp(features=WIDTH, hidden=WIDTH, out=1, seed=3))
        optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
        losses = _train(fabric, model, optimizer)
    ours = [str(w.message) for w in caught if "gradient" in str(w.message)]
    return _rank0({"losses": losses, "warnings": ours})


def detached_loss(args: dict[str, Any]) -> dict[str, Any] | None:
    """A loss cut off from the model: Lightning's Fabric (``args["ours"]`` false) or ours; records warnings."""
    torch.set_num_threads(1)
    fabric = _fabric(ours=bool(args["ours"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = fabric.setup_module(mlp(features=WIDTH, hidden=WIDTH, out=1, seed=3))
        optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
        losses = _train(fabric, model, optimizer, detach=True)
    return _rank0({"losses": losses, "warnings": [str(w.message) for w in caught]})


def all_cases(args: dict[str, Any]) -> dict[str, Any] | None:
    """Every function named in ``args["runs"]`` (``"detached_loss:lightning"``/``":ours"`` for that one), one
    after another in the same processes; rank 0 returns ``{name: result}``."""
    torch.set_num_threads(1)
    cases = {
        "lightning_joint": lambda: lightning_joint({}),
        "ours_joint": lambda: ours_joint({}),
        "ours_late_optimizer_setup": lambda: ours_late_optimizer_setup({}),
        "ours_separate": lambda: ours_separate({}),
        "detached_loss:lightning": lambda: detached_loss({"ours": False}),
        "detached_loss:ours": lambda: detached_loss({"ours": True}),
    }
    results = {name: cases[name]() for name in args["runs"]}
    return results if int(torch.distributed.get_rank()) == 0 else None
