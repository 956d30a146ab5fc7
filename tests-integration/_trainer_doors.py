"""2-process fits through precision-base's Trainer doors, run in 2 ranks by ``test_trainer_doors.py``.

``run_ranks("_trainer_doors.py:train", {"spec": "fsdp:bf16-mixed", "doors": [...]})`` fits :class:`TinyRegressor`
(for the door's namespace) once per door, in order, on ``accelerator="cpu", devices=2`` with no strategy given (the
plugin's ``configure_strategy`` chooses), and rank 0 returns one record per door. Doors:

* ``pytorch_lightning``: ``precision_base.pytorch_lightning.Trainer(precision_plugin=spec)``;
* ``subclass``: a user's ``class MyTrainer(PrecisionPluginTrainerMixin, lightning.Trainer)`` with an argument of
  its own;
* ``function``: a user's ``lightning.Trainer`` subclass whose ``__init__`` calls ``prepare_trainer_kwargs``;
* ``plugins``: ``precision_base.Trainer(plugins=[spec])``;
* ``environment``: ``precision_base.Trainer()`` with ``PL_TRAINER_PRECISION_PLUGIN`` and ``PL_TRAINER_MAX_STEPS``
  set in the environment of the ranks.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as L
import torch

from precision_base import PrecisionPluginTrainerMixin, prepare_trainer_kwargs
from precision_base.namespaces import for_namespace, namespace_of
from precision_testsupport.models import QUIET, TinyRegressor, dtype_name

STEPS = 4


class MyTrainer(PrecisionPluginTrainerMixin, L.Trainer):
    """A user's Trainer with an argument of its own, given ``precision_plugin=`` by the mixin."""

    def __init__(self, *, run_name: str = "", **kwargs: Any) -> None:
        self.run_name = run_name
        super().__init__(**kwargs)


class FunctionTrainer(L.Trainer):
    """A user's Trainer that writes its own ``__init__`` with the function form."""

    def __init__(self, *, precision_plugin: Any = None, **kwargs: Any) -> None:
        super().__init__(**prepare_trainer_kwargs(precision_plugin, kwargs))


def _door(door: str, spec: str) -> tuple[Any, type, dict[str, Any]]:
    """The Trainer class, the LightningModule class and the arguments of one door."""
    limit = {"max_steps": STEPS}
    if door == "pytorch_lightning":
        from precision_base.pytorch_lightning import Trainer as PLTrainer

        return PLTrainer, for_namespace(TinyRegressor, "pytorch_lightning"), {"precision_plugin": spec, **limit}
    if door == "subclass":
        return MyTrainer, TinyRegressor, {"precision_plugin": spec, "run_name": "mine", **limit}
    if door == "function":
        return FunctionTrainer, TinyRegressor, {"precision_plugin": spec, **limit}
    from precision_base import Trainer

    if door == "plugins":
        return Trainer, TinyRegressor, {"plugins": [spec], **limit}
    if door == "environment":
        return Trainer, TinyRegressor, {}
    raise ValueError(f"unknown door {door!r}")


def _fit(door: str, spec: str) -> dict[str, Any]:
    trainer_cls, module_cls, kwargs = _door(door, spec)
    torch.manual_seed(0)
    model = module_cls(hidden=16)
    trainer = trainer_cls(accelerator="cpu", devices=2, **QUIET, **kwargs)
    trainer.fit(model)
    plugin = trainer.precision_plugin
    lightning = plugin.lightning
    return {
        "door": door,
        "trainer_namespace": namespace_of(trainer),
        "plugin": f"{type(plugin).__module__}.{type(plugin).__qualname__}",
        "plugin_namespace": namespace_of(plugin),
        "is_namespace_precision": isinstance(plugin, lightning.plugins.precision.Precision),
        "spec": plugin.spec,
        "strategy": type(trainer.strategy).__name__,
        "strategy_namespace": namespace_of(trainer.strategy),
        "world_size": trainer.world_size,
        "global_step": trainer.global_step,
        "compute": sorted({dtype_name(d) for d in model.compute_dtypes}),
        "sharded": all(type(p).__name__ == "DTensor" for p in model.parameters()),
        "loss_fell": model.losses[-1] < model.losses[0],
        "run_name": getattr(trainer, "run_name", None),
    }


def train(args: dict[str, Any]) -> list[dict[str, Any]]:
    return [_fit(door, args["spec"]) for door in args["doors"]]
