"""A user's loss scaler, passed to ``scaler=`` or assigned to ``plugin.scaler`` (as Lightning's plugins allow), is
the user's: used as given, with only the calls Lightning's classes make on it (``scale``, ``unscale_``, ``step``,
``update``); the plugin's own default is a ``ShardedGradScaler`` from construction on, as Lightning's is."""

from __future__ import annotations

from typing import Any
from unittest.mock import Mock

import pytest
import torch
from torch.amp import GradScaler
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

import precision_base
from precision_fsdp import FSDPPrecision
from precision_fsdp.fabric import FSDPPrecision as FabricFSDPPrecision
from precision_testsupport.models import QUIET, TinyRegressor, mlp

CLASSES = [pytest.param(FSDPPrecision, id="trainer"), pytest.param(FabricFSDPPrecision, id="fabric")]


class RecordingScaler:
    """A user's own scaler class (not a ``GradScaler``): it records each call and hands it to a real CPU
    ``GradScaler``. No ``get_scale``, ``state_dict`` or device: what the plugin reads beyond the four methods must
    degrade to "unknown"."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self._real = GradScaler("cpu", init_scale=2.0**10)

    def _record(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((name, args, kwargs))
        return getattr(self._real, name)(*args, **kwargs)

    def scale(self, outputs: Any) -> Any:
        return self._record("scale", outputs)

    def unscale_(self, optimizer: Any) -> Any:
        return self._record("unscale_", optimizer)

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        return self._record("step", optimizer, *args, **kwargs)

    def update(self, new_scale: Any = None) -> Any:
        return self._record("update", new_scale)

    def names(self) -> list[str]:
        return [name for name, _args, _kwargs in self.calls]


@pytest.mark.parametrize("cls", CLASSES)
def test_the_default_scaler_is_a_sharded_grad_scaler_from_construction(cls: type) -> None:
    plugin = cls("16-mixed", init_scale=128.0)
    assert isinstance(plugin.scaler, ShardedGradScaler)
    assert plugin.state_dict()["scale"] == 128.0
    assert cls("bf16-mixed").scaler is None


def test_the_default_scaler_ends_up_a_cpu_grad_scaler_with_its_state_at_connect(cpu_mesh: Any) -> None:
    from precision_fsdp._compat import fully_shard

    plugin = FSDPPrecision("16-mixed", init_scale=64.0, growth_interval=3)
    assert isinstance(plugin.scaler, ShardedGradScaler)
    plugin.connect(fully_shard(mlp(), mesh=cpu_mesh), [], [])
    assert type(plugin.scaler) is GradScaler  # FSDP2's gradients are DTensors: torch.amp's scaler reduces found-inf
    assert plugin.scaler._device == "cpu"
    assert plugin.scaler.is_enabled()
    assert (plugin.state_dict()["scale"], plugin.state_dict()["growth_interval"]) == (64.0, 3)


def _settle(plugin: Any, cpu_mesh: Any) -> None:
    """Where each door's plugin learns its device and readies the scaler: the Trainer's connect, Fabric's backward."""
    from precision_fsdp._compat import fully_shard

    if isinstance(plugin, FabricFSDPPrecision):
        plugin.backward(mlp()(torch.randn(2, 8)).sum(), mlp())
    else:
        plugin.connect(fully_shard(mlp(), mesh=cpu_mesh), [], [])


@pytest.mark.parametrize("cls", CLASSES)
def test_a_scaler_assigned_after_construction_is_the_users(cls: type, cpu_mesh: Any) -> None:
    plugin = cls("16-mixed")
    mine = GradScaler("cpu", init_scale=8.0)
    plugin.scaler = mine
    _settle(plugin, cpu_mesh)
    assert plugin.scaler is mine  # used as given, never rebuilt
    wrong = cls("16-mixed")
    wrong.scaler = GradScaler("cuda", enabled=False)
    with pytest.raises(ValueError, match="made for device 'cuda', but the model runs on 'cpu'"):
        _settle(wrong, cpu_mesh)


@pytest.mark.parametrize("cls", CLASSES)
def test_a_scaler_that_cannot_work_is_refused_at_assignment(cls: type) -> None:
    plugin = cls("16-mixed")
    kept = plugin.scaler
    with pytest.raises(TypeError, match=r"object has no scale, unscale_, step, update$"):
        plugin.scaler = object()
    assert plugin.scaler is kept  # nothing changed
    with pytest.raises(ValueError, match=r"^`precision='bf16-mixed'` does not use a scaler, found "):
        cls("bf16-mixed").scaler = GradScaler("cpu")
    plugin.scaler = None  # as with Lightning's plugins: no loss scaling
    assert plugin.scaler is None


def test_fabric_backward_clip_and_step_make_lightnings_calls_on_a_users_scaler() -> None:
    plugin = FabricFSDPPrecision("16-mixed")
    scaler = plugin.scaler = RecordingScaler()
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(4, 8)).pow(2).mean()
    plugin.backward(loss, model)
    plugin.unscale_gradients(optimizer)
    plugin.optimizer_step(optimizer)
    assert scaler.names() == ["scale", "unscale_", "step", "update"]
    assert scaler.calls[0][1][0] is loss
    assert scaler.calls[2][1] == (optimizer,)
    assert "loss_scale" not in plugin.precision_stats()  # unknown: the scaler has no get_scale
    assert plugin.state_dict() == {}  # nor any state to save
    assert plugin.describe()["scaler"] == {"kind": "RecordingScaler", "device": "unknown"}


def test_a_trainer_fit_makes_lightnings_calls_on_a_users_scaler(fsdp2_on_cpu: None) -> None:
    """A real single-process FSDP2 fit with gradient clipping, the scaler assigned after construction."""
    plugin = FSDPPrecision("16-mixed")
    scaler = plugin.scaler = RecordingScaler()
    trainer = precision_base.Trainer(
        precision_plugin=plugin, accelerator="cpu", devices=1, max_steps=3, gradient_clip_val=1.0, **QUIET
    )
    trainer.fit(TinyRegressor(hidden=8, samples=64, batch_size=16))
    assert trainer.precision_plugin is plugin
    assert plugin.scaler is scaler  # used as given through connect and every step
    assert scaler.names() == ["scale", "unscale_", "step", "update"] * 3
    steps = [args for name, args, _kwargs in scaler.calls if name == "step"]
    assert all(args[0] is trainer.optimizers[0] for args in steps)


# Lightning's own tests of its Fabric FSDPPrecision (tests/tests_fabric/plugins/precision/test_fsdp.py) with test
# doubles for the scaler, the tensor and the optimizer: ours passes them as Lightning's class does.
def test_lightnings_backward_with_a_mock_scaler() -> None:
    precision = FabricFSDPPrecision(precision="16-mixed")
    precision.scaler = Mock()
    precision.scaler.scale = Mock(side_effect=(lambda x: x))
    tensor = Mock()
    model = Mock()
    precision.backward(tensor, model, "positional-arg", keyword="arg")
    precision.scaler.scale.assert_called_once_with(tensor)
    tensor.backward.assert_called_once_with("positional-arg", keyword="arg")


def test_lightnings_optimizer_step_with_a_mock_scaler() -> None:
    precision = FabricFSDPPrecision(precision="16-mixed")
    precision.scaler = Mock()
    optimizer = Mock()
    precision.optimizer_step(optimizer, keyword="arg")
    precision.scaler.step.assert_called_once_with(optimizer, keyword="arg")
    precision.scaler.update.assert_called_once()
