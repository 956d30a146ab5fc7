"""The other Trainer doors: pytorch_lightning's Trainer, users' own Trainer subclasses (mixin and function form)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

L = pytest.importorskip("lightning.pytorch")
PL = pytest.importorskip("pytorch_lightning")
import torch  # noqa: E402

import precision_base.pytorch_lightning  # noqa: E402
from precision_base import (  # noqa: E402
    PrecisionPluginTrainerMixin,
    Trainer,
    TrainerConfigurationError,
    prepare_trainer_kwargs,
)
from precision_base.namespaces import for_namespace  # noqa: E402
from precision_testsupport.models import QUIET, TinyRegressor  # noqa: E402

PLTrainer = precision_base.pytorch_lightning.Trainer


class MyTrainer(PrecisionPluginTrainerMixin, L.Trainer):
    """A user's Trainer with an argument of its own."""

    def __init__(self, *, run_name: str = "", **kwargs: Any) -> None:
        self.run_name = run_name
        super().__init__(**kwargs)


class MyPLTrainer(PrecisionPluginTrainerMixin, PL.Trainer):
    """The same for pytorch_lightning, with nothing of its own."""


class FunctionTrainer(L.Trainer):
    """A user's Trainer that uses the function form."""

    def __init__(self, *, precision_plugin: Any = None, **kwargs: Any) -> None:
        super().__init__(**prepare_trainer_kwargs(precision_plugin, kwargs))


# -- pytorch_lightning -------------------------------------------------------------------------------------------
def test_pytorch_lightning_trainer_resolves_names_for_its_namespace(dummy_registered: type) -> None:
    trainer = PLTrainer(precision_plugin="dummy:bf16", accelerator="cpu", devices=1, **QUIET)
    plugin = trainer.precision_plugin
    assert isinstance(plugin, PL.plugins.precision.Precision)
    assert type(plugin) is for_namespace(dummy_registered, "pytorch_lightning")
    assert isinstance(plugin, dummy_registered.__mro__[1])  # the implementation mixin: the same code
    assert plugin.precision == "bf16-mixed"
    assert issubclass(PLTrainer, PL.Trainer)


def test_pytorch_lightning_trainer_fits(dummy_registered: type) -> None:
    model = for_namespace(TinyRegressor, "pytorch_lightning")()
    trainer = PLTrainer(precision_plugin="dummy:bf16-mixed", accelerator="cpu", devices=1, max_steps=5, **QUIET)
    trainer.fit(model)
    assert trainer.global_step == 5
    assert set(model.compute_dtypes) == {torch.bfloat16}
    assert model.losses[-1] < model.losses[0]


def test_an_instance_of_the_other_namespace_is_refused_with_the_way_out(dummy_registered: type) -> None:
    with pytest.raises(TrainerConfigurationError) as info:
        PLTrainer(precision_plugin=dummy_registered("32-true"), accelerator="cpu", **QUIET)
    assert str(info.value) == (
        "precision_plugin=DummyPrecision(...) was built for lightning.pytorch, but this Trainer is "
        "pytorch_lightning's. Pass the plugin's name instead (e.g. precision_plugin='dummy:32-true'), or build the "
        "instance for pytorch_lightning with precision_base.namespaces.for_namespace(DummyPrecision, "
        "'pytorch_lightning')(...)."
    )
    rebuilt = for_namespace(dummy_registered, "pytorch_lightning")("32-true")
    assert PLTrainer(precision_plugin=rebuilt, accelerator="cpu", **QUIET).precision_plugin is rebuilt


def test_a_lightning_builtin_of_the_other_namespace_is_refused() -> None:
    with pytest.raises(TrainerConfigurationError) as info:
        PLTrainer(precision_plugin=L.plugins.precision.MixedPrecision("bf16-mixed", "cpu"), accelerator="cpu")
    assert str(info.value) == (
        "precision_plugin=MixedPrecision(...) is lightning.pytorch's class, but this Trainer is pytorch_lightning's. "
        "Pass pytorch_lightning.plugins.precision.MixedPrecision instead."
    )


def test_pytorch_lightning_trainer_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, dummy_registered: type
) -> None:
    monkeypatch.setenv("PL_TRAINER_MAX_EPOCHS", "3")
    monkeypatch.setenv("PL_TRAINER_PRECISION_PLUGIN", "dummy:bf16-true")
    trainer = PLTrainer(accelerator="cpu", devices=1, **QUIET)
    assert trainer.max_epochs == 3
    assert isinstance(trainer.precision_plugin, PL.plugins.precision.Precision)
    assert trainer.precision_plugin.precision == "bf16-true"


def test_a_bad_name_in_plugins_is_pytorch_lightnings_misconfiguration(dummy_registered: type) -> None:
    with pytest.raises(PL.utilities.exceptions.MisconfigurationException, match=r"^Found invalid type for plugin x"):
        PLTrainer(plugins="x", accelerator="cpu", **QUIET)


# -- users' own Trainer classes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("trainer_cls", [MyTrainer, FunctionTrainer])
def test_a_user_subclass_fits_with_a_plugin_name(dummy_registered: type, trainer_cls: type) -> None:
    model = TinyRegressor()
    trainer = trainer_cls(precision_plugin="dummy:bf16-mixed", accelerator="cpu", devices=1, max_steps=4, **QUIET)
    assert isinstance(trainer, L.Trainer)
    assert isinstance(trainer.precision_plugin, dummy_registered)
    trainer.fit(model)
    assert trainer.global_step == 4
    assert set(model.compute_dtypes) == {torch.bfloat16}


def test_the_subclass_keeps_its_own_arguments_and_lightnings_checks(dummy_registered: type) -> None:
    trainer = MyTrainer(run_name="a", precision_plugin="dummy:32", plugins=[], accelerator="cpu", **QUIET)
    assert trainer.run_name == "a"
    with pytest.raises(TrainerConfigurationError, match="strategy='fsdp'"):
        MyTrainer(precision_plugin="dummy:32", strategy="fsdp", accelerator="cpu", **QUIET)


def test_a_pytorch_lightning_subclass_builds_for_pytorch_lightning(dummy_registered: type) -> None:
    trainer = MyPLTrainer(precision_plugin="dummy:32", accelerator="cpu", devices=1, **QUIET)
    assert type(trainer.precision_plugin) is for_namespace(dummy_registered, "pytorch_lightning")


def test_environment_variables_follow_the_class_name_as_in_lightning(
    monkeypatch: pytest.MonkeyPatch, dummy_registered: type
) -> None:
    class LightningOnly(L.Trainer):
        pass

    monkeypatch.setenv("PL_MYTRAINER_MAX_EPOCHS", "4")
    monkeypatch.setenv("PL_LIGHTNINGONLY_MAX_EPOCHS", "4")
    monkeypatch.setenv("PL_MYTRAINER_PRECISION_PLUGIN", "dummy:bf16-true")
    assert LightningOnly(accelerator="cpu", logger=False).max_epochs == 4  # Lightning: PL_<CLASS NAME>_<ARGUMENT>
    trainer = MyTrainer(accelerator="cpu", devices=1, **QUIET)
    assert trainer.max_epochs == 4
    assert trainer.precision_plugin.precision == "bf16-true"
    assert Trainer(accelerator="cpu", devices=1, **QUIET).max_epochs is None  # PL_TRAINER_* is not set


def test_signature_seen_by_lightnings_environment_reader() -> None:
    lightning = list(inspect.signature(L.Trainer).parameters)
    assert list(inspect.signature(MyTrainer).parameters) == ["run_name", *lightning]
    assert list(inspect.signature(MyPLTrainer).parameters) == list(inspect.signature(PL.Trainer).parameters)


def test_the_mixin_must_come_before_the_trainer() -> None:
    with pytest.raises(TypeError, match=r"lists lightning.pytorch.trainer.trainer.Trainer before"):

        class Wrong(L.Trainer, PrecisionPluginTrainerMixin):
            pass


def test_the_mixin_needs_a_lightning_trainer() -> None:
    class Alone(PrecisionPluginTrainerMixin):
        pass

    with pytest.raises(TypeError, match="uses PrecisionPluginTrainerMixin without a Lightning Trainer base"):
        Alone()


def test_function_form_leaves_plain_kwargs_alone() -> None:
    kwargs = {"max_steps": 3, "plugins": None}
    assert prepare_trainer_kwargs(None, kwargs) == kwargs
    assert prepare_trainer_kwargs(None, kwargs) is not kwargs
    with pytest.raises(ValueError, match="namespace must be one of"):
        prepare_trainer_kwargs(None, kwargs, namespace="lightning")
