"""The Fabric door across packages, in one process: names resolve to each backend's Fabric class, strategies pair
(``strategy="auto"`` -> the backend's Fabric strategy; a strategy that cannot work is refused saying what to pass),
and a plugin built for one door is refused by the other, through our doors and through Lightning's own
``Fabric(plugins=[...])`` at ``fabric.setup``. The messages are asserted verbatim where the closing notes quote them.
"""

from __future__ import annotations

import pickle
import re

import lightning.fabric as lf
import pytest
import torch

import precision_base
from precision_base import Fabric, PrecisionPluginFabricMixin, TrainerConfigurationError, resolve_fabric
from precision_base.errors import FabricNotSupportedError, WrongDoorError

precision_fsdp = pytest.importorskip("precision_fsdp")
precision_deepspeed = pytest.importorskip("precision_deepspeed")

from precision_deepspeed.errors import DeepSpeedConfigConflictError  # noqa: E402
from precision_deepspeed.fabric import DeepSpeedCPUStrategy  # noqa: E402
from precision_fsdp.fabric import FSDP2Strategy  # noqa: E402

TRAINER_IN_FABRIC = (
    "Fabric.setup() got FSDPPrecision(precision='bf16-mixed', reduce_dtype=float32), an instance of "
    "precision_fsdp.plugin.FSDPPrecision: that is the plugin class for a Lightning Trainer (lightning.pytorch), and a "
    "Fabric cannot use it. Use precision_fsdp.fabric.FSDPPrecision('bf16-mixed') instead, or pass the name: "
    "precision_base.Fabric(precision_plugin='fsdp:bf16-mixed')."
)


def test_names_resolve_to_each_backends_fabric_class() -> None:
    fsdp = resolve_fabric("fsdp:bf16-mixed", reduce_dtype="bf16")
    assert type(fsdp) is precision_fsdp.fabric.FSDPPrecision
    assert isinstance(fsdp, lf.plugins.precision.FSDPPrecision), "Fabric's FSDP strategies accept it"
    assert fsdp.reduce_dtype == torch.bfloat16, "options reach the Fabric class like the Trainer class"
    assert fsdp.dtypes() == precision_base.resolve("fsdp:bf16-mixed", reduce_dtype="bf16").dtypes(), "one dtype plan"
    ds = resolve_fabric("deepspeed:16-mixed", initial_scale_power=8)
    assert type(ds) is precision_deepspeed.fabric.DeepSpeedPrecision
    assert isinstance(ds, lf.plugins.precision.DeepSpeedPrecision)
    trainer_ds = precision_base.resolve("deepspeed:16-mixed", initial_scale_power=8)
    assert ds.precision_section() == trainer_ds.precision_section(), "one DeepSpeed config section"


def test_lightning_fabric_namespace_builds_and_pickles() -> None:
    lightning_fabric = pytest.importorskip("lightning_fabric")
    plugin = resolve_fabric("fsdp:16-mixed", namespace="lightning_fabric", init_scale=256.0)
    assert isinstance(plugin, lightning_fabric.plugins.precision.FSDPPrecision)
    assert not isinstance(plugin, lf.plugins.precision.Precision)
    assert type(plugin).__qualname__ == "FSDPPrecision"
    copy = pickle.loads(pickle.dumps(plugin))
    assert type(copy) is type(plugin)
    assert copy.scaler.get_scale() == 256.0


def test_auto_strategy_is_the_backends_fabric_strategy() -> None:
    fabric = Fabric(precision_plugin="fsdp:bf16-mixed", accelerator="cpu", devices=1)
    assert type(fabric.strategy) is FSDP2Strategy
    assert type(fabric.strategy.precision) is precision_fsdp.fabric.FSDPPrecision
    fabric = Fabric(precision_plugin="deepspeed:bf16-mixed", accelerator="cpu", devices=1)
    assert type(fabric.strategy) is DeepSpeedCPUStrategy
    assert fabric.strategy.config["zero_optimization"]["stage"] == 2, "strategy='auto' is Lightning's 'deepspeed'"


def test_a_strategy_that_cannot_work_is_refused_saying_what_to_pass() -> None:
    with pytest.raises(TrainerConfigurationError) as fsdp:
        Fabric(precision_plugin="fsdp:bf16-mixed", strategy="ddp", accelerator="cpu", devices=1)
    assert str(fsdp.value).startswith("precision plugin 'fsdp:bf16-mixed' cannot work with strategy='ddp'. Pass ")
    assert "ModelParallelStrategy(parallelize_fn" in str(fsdp.value)
    with pytest.raises(TrainerConfigurationError, match=r"FSDPStrategy is FSDP1, which cannot run on CPU"):
        Fabric(precision_plugin="fsdp:bf16-mixed", strategy="fsdp", accelerator="cpu", devices=1)
    with pytest.raises(TrainerConfigurationError) as ds:
        Fabric(
            precision_plugin="deepspeed:bf16-mixed",
            strategy=lf.strategies.DeepSpeedStrategy(),
            accelerator="cpu",
            devices=1,
        )
    assert "Pass precision_deepspeed.fabric.DeepSpeedCPUStrategy(...) instead" in str(ds.value)


def test_deepspeed_config_section_is_the_plugins_and_conflicts_fail_at_construction() -> None:
    with pytest.raises(DeepSpeedConfigConflictError, match=r"deepspeed:bf16-mixed"):
        Fabric(
            precision_plugin="deepspeed:bf16-mixed",
            strategy=DeepSpeedCPUStrategy(config={"fp16": {"enabled": True}, "train_micro_batch_size_per_gpu": 1}),
            accelerator="cpu",
            devices=1,
        )


def test_precision_and_precision_plugin_together_agree_or_are_refused_with_lightnings_words() -> None:
    fabric = Fabric(precision_plugin="fsdp:bf16-mixed", precision="bf16-mixed", accelerator="cpu", devices=1)
    assert fabric._precision.precision == "bf16-mixed"  # the same precision twice is one answer (issue 21)
    expected = "Received both `precision=16-mixed` and `precision_plugin='fsdp:bf16-mixed'`. Choose one. (They disagree"
    with pytest.raises(TrainerConfigurationError, match=re.escape(expected)):
        Fabric(precision_plugin="fsdp:bf16-mixed", precision="16-mixed", accelerator="cpu", devices=1)


def test_trainer_class_through_our_fabric_door_names_the_fabric_class() -> None:
    trainer_plugin = precision_fsdp.FSDPPrecision("bf16-mixed")
    with pytest.raises(WrongDoorError) as info:
        Fabric(precision_plugin=trainer_plugin, accelerator="cpu", devices=1)
    assert str(info.value) == TRAINER_IN_FABRIC.replace("Fabric.setup()", "precision_plugin=")
    with pytest.raises(WrongDoorError, match=r"^plugins= got DeepSpeedPrecision\('bf16-mixed'\)"):
        Fabric(plugins=[precision_deepspeed.DeepSpeedPrecision("bf16-mixed")], accelerator="cpu", devices=1)


def test_fabric_class_through_our_trainer_door_names_the_trainer_class() -> None:
    with pytest.raises(WrongDoorError) as info:
        precision_base.Trainer(precision_plugin=resolve_fabric("deepspeed:bf16-mixed"), accelerator="cpu", devices=1)
    assert str(info.value) == (
        "precision_plugin= got DeepSpeedPrecision('bf16-mixed'), an instance of "
        "precision_deepspeed.fabric.DeepSpeedPrecision: that is the plugin class for Lightning Fabric "
        "(lightning.fabric), and a Trainer cannot use it. Use precision_deepspeed.plugin.DeepSpeedPrecision("
        "'bf16-mixed') instead, or pass the name: precision_base.Trainer(precision_plugin='deepspeed:bf16-mixed')."
    )


@pytest.mark.parametrize("backend", ["fsdp", "deepspeed"])
def test_lightnings_own_fabric_refuses_a_trainer_class_at_setup(backend: str) -> None:
    """Lightning's Fabric accepts any Precision in plugins=; before this check the run died in backward."""
    trainer_plugin = precision_base.resolve(f"{backend}:bf16-mixed")
    fabric = lf.Fabric(plugins=[trainer_plugin], accelerator="cpu", devices=1)
    with pytest.raises(WrongDoorError) as info:
        fabric.setup(torch.nn.Linear(4, 4))
    message = str(info.value)
    if backend == "fsdp":
        assert message == TRAINER_IN_FABRIC
    assert message.startswith(f"Fabric.setup() got {trainer_plugin!r}")
    assert f"Use precision_{backend}.fabric." in message


def test_lightnings_own_trainer_refuses_a_fabric_class_at_construction() -> None:
    import lightning.pytorch as pl

    with pytest.raises(Exception, match=r"Found invalid type for plugin FSDPPrecision"):
        pl.Trainer(plugins=[resolve_fabric("fsdp:bf16-mixed")], accelerator="cpu", devices=1)


def test_backend_without_a_fabric_class_says_so() -> None:
    from precision_testsupport.dummy import INFO
    from precision_testsupport.dummy_plugin import DummyPrecision

    registration = precision_base.registered(
        INFO, plugin_class=DummyPrecision, distribution="precision-dummy", version="0.3"
    )
    with registration, pytest.raises(FabricNotSupportedError) as info:
        Fabric(precision_plugin="dummy:bf16-mixed", accelerator="cpu", devices=1)
    assert str(info.value) == (
        "precision backend 'dummy' (precision-dummy 0.3) offers no plugin class for Lightning Fabric "
        "(its PluginInfo has no fabric_class); it works with the Trainer only: "
        "precision_base.Trainer(precision_plugin='dummy:<precision>'), class "
        "precision_testsupport.dummy_plugin.DummyPrecision."
    )


def test_users_fabric_subclass_with_the_mixin() -> None:
    class MyFabric(PrecisionPluginFabricMixin, lf.Fabric):
        pass

    fabric = MyFabric(precision_plugin="fsdp:32-true", accelerator="cpu", devices=1)
    assert type(fabric.strategy.precision) is precision_fsdp.fabric.FSDPPrecision
    with pytest.raises(TypeError, match=r"list the mixin first"):

        class Wrong(lf.Fabric, PrecisionPluginFabricMixin):
            pass


def test_autocast_runs_on_the_device_of_the_inputs() -> None:
    plugin = resolve_fabric("fsdp:bf16-mixed")
    plugin.bind_device("cuda")  # as if told otherwise before: the inputs' device wins
    args = plugin.convert_input(((torch.ones(2, 2),), {}))
    assert plugin.device_type == "cpu"
    with plugin.forward_context():
        assert torch.is_autocast_enabled("cpu")
        assert (args[0][0] @ torch.ones(2, 2)).dtype == torch.bfloat16
    assert plugin.device_type == "cpu"


def test_show_lists_the_trainer_and_the_fabric_class(capsys: pytest.CaptureFixture[str]) -> None:
    from precision_base import cli
    from precision_testsupport.dummy import INFO
    from precision_testsupport.dummy_plugin import DummyPrecision

    assert cli.main(["show", "fsdp:bf16-mixed"]) == 0
    out = capsys.readouterr().out
    both = "plugin:       precision_fsdp.plugin.FSDPPrecision\nfabric:       precision_fsdp.fabric.FSDPPrecision\n"
    assert both in out
    with precision_base.registered(INFO, plugin_class=DummyPrecision, distribution="precision-dummy", version="0.3"):
        assert cli.main(["show", "dummy:bf16-mixed"]) == 0
    assert "fabric:       none (this backend has no Lightning Fabric class)" in capsys.readouterr().out


def test_user_scaler_is_kept_and_steps_under_fabrics_hooks() -> None:
    """Fabric's hooks on the FSDP Fabric class with a user scaler (plain tensors stand in for FSDP2's here)."""
    scaler = torch.amp.GradScaler("cpu", init_scale=512.0)
    plugin = resolve_fabric("fsdp:16-mixed", scaler=scaler)
    model = plugin.convert_module(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = plugin.convert_input(torch.ones(2, 4))
    with plugin.forward_context():
        loss = model(x).float().sum()
    plugin.backward(loss, None)
    assert plugin.scaler is scaler, "the user's scaler is used, not replaced"
    assert model.weight.grad is not None
    assert torch.allclose(model.weight.grad, torch.full((1, 4), 2.0 * 512.0)), "the loss was scaled by 512"
    before = model.weight.detach().clone()
    plugin.optimizer_step(optimizer)
    assert torch.allclose(model.weight, before - 0.1 * 2.0), "the step used the unscaled gradients"
    model.weight.grad.fill_(float("inf"))
    stepped = model.weight.detach().clone()
    plugin.optimizer_step(optimizer)
    assert torch.equal(model.weight, stepped), "a step with inf gradients is skipped"
    assert scaler.get_scale() == 256.0, "and the scale halves"


def test_user_scaler_for_another_device_is_refused() -> None:
    plugin = resolve_fabric("fsdp:16-mixed", scaler=torch.amp.GradScaler("cuda", enabled=False))
    with pytest.raises(ValueError, match=r"made for device 'cuda', but the model runs on 'cpu'"):
        plugin.backward(torch.ones((), requires_grad=True), None)


def test_fabrics_throughput_utilities_see_the_compute_dtype() -> None:
    """Fabric's ThroughputMonitor asks _plugin_to_compute_dtype; Lightning's answer for FSDP is the reduce dtype."""
    import lightning.fabric.utilities.throughput as throughput

    plugin = resolve_fabric("fsdp:bf16-mixed")
    assert throughput._plugin_to_compute_dtype(plugin) == torch.bfloat16
    assert throughput._plugin_to_compute_dtype.__wrapped__(plugin) == torch.float32, "Lightning's own answer"


@pytest.mark.parametrize("backend", ["fsdp", "deepspeed"])
def test_standalone_lightning_fabric_gets_classes_built_for_it(backend: str) -> None:
    lightning_fabric = pytest.importorskip("lightning_fabric")

    class MyFabric(PrecisionPluginFabricMixin, lightning_fabric.Fabric):
        pass

    fabric = MyFabric(precision_plugin=f"{backend}:bf16-mixed", accelerator="cpu", devices=1)
    assert isinstance(fabric.strategy, lightning_fabric.strategies.Strategy)
    assert isinstance(fabric.strategy.precision, lightning_fabric.plugins.precision.Precision)
    assert not isinstance(fabric.strategy.precision, lf.plugins.precision.Precision)
    assert (
        type(fabric.strategy.precision).__qualname__
        == {"fsdp": "FSDPPrecision", "deepspeed": "DeepSpeedPrecision"}[backend]
    )
