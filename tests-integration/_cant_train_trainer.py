"""2-process FSDP2 Trainer fits on CPU (gloo) for ``test_cant_train.py``: LightningModules that cannot train.

``run_ranks("_cant_train_trainer.py:fit_all", {"runs": [[ours, case], ...]})`` fits, for each run, STEPS steps under
``ModelParallelStrategy`` whose ``configure_model`` calls ``fully_shard`` (FSDP2 replaces every parameter), with
Lightning's Trainer (``ours`` false) or ``precision_base.Trainer(precision_plugin="fsdp:32-true")``. Cases:
``"early_optimizer"`` creates the optimizer in ``__init__`` (before sharding) and returns it from
``configure_optimizers``; ``"detached_loss"`` rebuilds the loss from its value; ``"right"`` does neither. Rank 0
returns the losses, the error (type and message) and the warnings.
"""

from __future__ import annotations

import warnings
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed._composable.fsdp import fully_shard
from torch.utils.data import DataLoader

from precision_base import Trainer
from precision_testsupport.launch import world_size
from precision_testsupport.models import mlp, regression_data

STEPS = 5
WIDTH = 16


class Regression(L.LightningModule):
    def __init__(self, case: str) -> None:
        super().__init__()
        self.case = case
        self.net = mlp(features=WIDTH, hidden=WIDTH, out=1, seed=3)
        self.losses: list[float] = []
        if case == "early_optimizer":
            self.early = torch.optim.SGD(self.parameters(), lr=0.1)

    def configure_model(self) -> None:
        fully_shard(self.net, mesh=self.device_mesh["data_parallel"])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(round(self.all_gather(loss.detach()).mean().item(), 6))
        if self.case == "detached_loss":  # a common mistake: a new tensor from the loss's value
            loss = torch.tensor(loss.item(), requires_grad=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.case == "early_optimizer":
            return self.early
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit_all(args: dict[str, Any]) -> dict[str, Any] | None:
    """Every ``[ours, case]`` in ``args["runs"]``, one after another in the same processes; rank 0 returns
    ``{"<lightning|ours>:<case>": result}``."""
    torch.set_num_threads(1)
    results = {
        f"{'ours' if ours else 'lightning'}:{case}": fit({"ours": ours, "case": case}) for ours, case in args["runs"]
    }
    return results if int(torch.distributed.get_rank()) == 0 else None


def fit(args: dict[str, Any]) -> dict[str, Any] | None:
    """One fit (see the module docstring); rank 0 returns its result."""
    world_size()  # the previous fit's teardown may have deleted WORLD_SIZE
    L.seed_everything(7)
    kwargs: dict[str, Any] = {
        "strategy": ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
        "accelerator": "cpu",
        "devices": 2,
        "max_steps": STEPS,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "use_distributed_sampler": False,  # each rank its own fixed half of the batch, the same every step
    }
    trainer = Trainer(precision_plugin="fsdp:32-true", **kwargs) if args["ours"] else L.Trainer(**kwargs)
    model = Regression(args["case"])
    x, y = regression_data(WIDTH, samples=16, seed=5)[:16]
    rank = int(trainer.global_rank)
    data = DataLoader(list(zip(x[rank::2], y[rank::2], strict=True)), batch_size=8)  # the same batch every step
    result: dict[str, Any] = {"error_type": None, "error": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(model, data)
        except Exception as exc:  # the test asserts on the type and message
            result = {"error_type": type(exc).__name__, "error": str(exc)}
    result["losses"] = model.losses
    result["warnings"] = [str(w.message) for w in caught if "gradient" in str(w.message)]
    return result if int(trainer.global_rank) == 0 else None
