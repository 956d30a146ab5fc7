"""DeepSpeedPrecision in one process: construction, dtypes, contexts, and the hooks inside a real Trainer.

The hook tests train for real: ``precision_base.Trainer`` with ``accelerator="cpu", devices=1`` builds a
``DeepSpeedCPUStrategy`` and a real DeepSpeed engine in this process (gloo, world size 1). Nothing is mocked.
"""

from __future__ import annotations

import pickle
import re
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.plugins.precision import DeepSpeedPrecision as LightningDeepSpeedPrecision
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import precision_base
from precision_deepspeed import DeepSpeedCPUStrategy, DeepSpeedPrecision
from precision_deepspeed.errors import (
    LIGHTNING_BACKWARD_WARNING,
    LIGHTNING_SKIPPED_BACKWARD_ERROR,
    DeepSpeedConfigConflictError,
    DeepSpeedPrecisionError,
)
from precision_deepspeed.implementation import deepspeed_has_torch_autocast

needs_autocast = pytest.mark.skipif(
    not deepspeed_has_torch_autocast(), reason="the installed DeepSpeed has no torch_autocast config section"
)


# -- construction -------------------------------------------------------------------------------------------
def test_is_lightnings_class_by_name_and_by_type() -> None:
    plugin = DeepSpeedPrecision("bf16-mixed")
    assert isinstance(plugin, LightningDeepSpeedPrecision)
    assert type(plugin).__name__ == LightningDeepSpeedPrecision.__name__
    assert precision_base.resolve("deepspeed:bf16").precision == "bf16-mixed"


def test_rejects_unknown_precision_with_lightnings_message_first() -> None:
    with pytest.raises(ValueError) as info:
        DeepSpeedPrecision("64-true")
    with pytest.raises(ValueError) as lightnings:
        LightningDeepSpeedPrecision("64-true")  # type: ignore[arg-type]
    assert str(info.value).startswith(str(lightnings.value) + " ")
    assert "it supports 32-true, 16-true, bf16-true, 16-mixed, bf16-mixed" in str(info.value)


@pytest.mark.parametrize(("alias", "canonical"), [("bf16", "bf16-mixed"), ("16", "16-mixed"), (32, "32-true")])
def test_accepts_lightnings_aliases(alias: Any, canonical: str) -> None:
    plugin = DeepSpeedPrecision(alias)
    assert plugin.precision == canonical
    assert plugin.spec == f"deepspeed:{canonical}"


def test_loss_scaling_options_only_under_fp16() -> None:
    plugin = DeepSpeedPrecision("16-mixed", consecutive_hysteresis=True, loss_scale_window=100)
    fp16 = plugin.precision_section()["fp16"]
    assert fp16["consecutive_hysteresis"] is True
    assert fp16["loss_scale_window"] == 100
    assert precision_base.resolve("deepspeed:16-true", hysteresis=4).precision_section()["fp16"]["hysteresis"] == 4
    with pytest.raises(ValueError, match="fp16 loss scaling options apply to DeepSpeed's fp16 mode"):
        DeepSpeedPrecision("bf16-mixed", consecutive_hysteresis=True)


@needs_autocast
def test_torch_autocast_option() -> None:
    plugin = DeepSpeedPrecision("bf16-mixed", torch_autocast=True)
    table = plugin.dtypes()
    assert (table.parameters, table.compute, table.inputs, table.init, table.autocast) == (
        "float32", "bfloat16", "float32", "float32", "bfloat16",
    )  # fmt: skip
    batch = {"x": torch.ones(2)}
    assert plugin.convert_input(batch)["x"].dtype == torch.float32
    assert plugin.convert_module(nn.Linear(2, 2)).weight.dtype == torch.float32
    plugin.bind_device("cpu")
    a = torch.randn(4, 4)
    with plugin.forward_context():
        assert torch.is_autocast_enabled("cpu")
        assert (a @ a).dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")
    with pytest.raises(ValueError, match="torch_autocast=True needs a mixed precision"):
        DeepSpeedPrecision("bf16-true", torch_autocast=True)


def test_dtypes_are_honest_per_precision() -> None:
    assert set(dict(DeepSpeedPrecision("32-true").dtypes().rows()).values()) == {"float32", "-"}
    half = DeepSpeedPrecision("16-true").dtypes()
    assert (half.parameters, half.compute, half.reduction, half.buffers, half.inputs, half.init) == (
        "float32", "float16", "float16", "float16", "float16", "float16",
    )  # fmt: skip
    mixed = DeepSpeedPrecision("bf16-mixed").dtypes()
    assert (mixed.parameters, mixed.compute, mixed.reduction, mixed.inputs, mixed.init, mixed.autocast) == (
        "float32", "bfloat16", "bfloat16", "bfloat16", "float32", None,
    )  # fmt: skip


def test_convert_output_returns_the_default_dtype() -> None:
    plugin = DeepSpeedPrecision("bf16-true")
    out = plugin.convert_output((torch.ones(2, dtype=torch.bfloat16), torch.arange(3)))
    assert out[0].dtype == torch.get_default_dtype()
    assert out[1].dtype == torch.int64


def test_describe_shows_the_config_section() -> None:
    assert DeepSpeedPrecision("bf16-mixed").describe() == {
        "DeepSpeed config section": {"fp16": {"enabled": False}, "bf16": {"enabled": True}}
    }


def test_show_command_prints_dtypes_and_section(capsys: pytest.CaptureFixture[str]) -> None:
    from precision_base.cli import main

    assert main(["show", "deepspeed:16-mixed"]) == 0
    out = capsys.readouterr().out
    assert "compute     float16" in out
    assert "DeepSpeed config section:" in out
    assert '"consecutive_hysteresis": false' in out


def test_pickles_with_options() -> None:
    plugin = DeepSpeedPrecision("16-mixed", hysteresis=5)
    clone = pickle.loads(pickle.dumps(plugin))
    assert clone.precision_section() == plugin.precision_section()


# -- choosing the strategy ------------------------------------------------------------------------------------
def test_auto_on_cpu_gives_the_cpu_strategy() -> None:
    plugin = DeepSpeedPrecision("bf16-mixed")
    strategy = plugin.configure_strategy("auto", accelerator="cpu", devices=2)
    assert type(strategy) is DeepSpeedCPUStrategy
    assert strategy.config["zero_optimization"]["stage"] == 2
    # the section is written once, when the strategy formats its config (see test_lightning_strategy.py)
    assert "bf16" not in strategy.config
    stage3 = plugin.configure_strategy("deepspeed_stage_3", accelerator="cpu", devices=2)
    assert stage3.config["zero_optimization"]["stage"] == 3


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "ddp_spawn"])
def test_incompatible_strategies_say_what_to_pass(strategy: str) -> None:
    with pytest.raises(precision_base.TrainerConfigurationError) as info:
        precision_base.Trainer(precision_plugin="deepspeed:bf16-mixed", strategy=strategy, accelerator="cpu")
    text = str(info.value)
    assert f"strategy={strategy!r}" in text
    assert "strategy='auto'" in text
    assert "'deepspeed_stage_3'" in text
    assert "DeepSpeedCPUStrategy" in text


def test_lightnings_strategy_on_cpu_points_to_ours() -> None:
    from lightning.pytorch.strategies import DeepSpeedStrategy

    with pytest.raises(
        precision_base.TrainerConfigurationError, match=r"Pass precision_deepspeed\.DeepSpeedCPUStrategy"
    ):
        DeepSpeedPrecision("32-true").configure_strategy(DeepSpeedStrategy(), accelerator="cpu", devices=1)


def test_user_config_contradiction_is_an_error_at_trainer_construction() -> None:
    strategy = DeepSpeedCPUStrategy(config={"fp16": {"enabled": True}, "zero_optimization": {"stage": 1}})
    with pytest.raises(DeepSpeedConfigConflictError) as info:
        precision_base.Trainer(precision_plugin="deepspeed:bf16-mixed", strategy=strategy, accelerator="cpu")
    assert "deepspeed:bf16-mixed" in str(info.value)
    assert "fp16.enabled=True" in str(info.value)


@pytest.mark.skipif(
    __import__("precision_deepspeed._compat")._compat.cpu_supports_fp16(), reason="this CPU runs DeepSpeed fp16"
)
def test_fp16_on_a_cpu_without_fp16_fails_up_front() -> None:
    refused = "DeepSpeed's CPU accelerator refuses its fp16 mode"
    with pytest.raises(precision_base.TrainerConfigurationError, match=refused):
        precision_base.Trainer(precision_plugin="deepspeed:16-mixed", accelerator="cpu", devices=2)


# -- the hooks, in a real single-process DeepSpeed run --------------------------------------------------------
class Tiny(pl.LightningModule):
    def __init__(self, optimizer: str = "adamw") -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.optimizer_name = optimizer
        self.backward_calls = 0

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        (x,) = batch
        return self.layer(x).float().pow(2).mean()

    def configure_optimizers(self) -> Any:
        if self.optimizer_name == "lbfgs":
            return torch.optim.LBFGS(self.parameters(), lr=0.1)
        return torch.optim.AdamW(self.parameters(), lr=0.1)


class SkipsBackward(Tiny):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return None


class OverridesBackward(Tiny):
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.backward_calls += 1
        loss.backward()


class ClipsItself(Tiny):
    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None
    ) -> None:
        self.clip_gradients(optimizer, gradient_clip_val=0.25, gradient_clip_algorithm="norm")


def _fit(model: pl.LightningModule, plugin: Any = "deepspeed:32-true", max_steps: int = 2, **kwargs: Any) -> pl.Trainer:
    trainer = precision_base.Trainer(
        precision_plugin=plugin, accelerator="cpu", devices=1, max_steps=max_steps, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **kwargs,
    )  # fmt: skip
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(4 * max_steps, 4)), batch_size=4))
    return trainer


@pytest.mark.slow
def test_trains_and_the_clip_value_reaches_deepspeed() -> None:
    model = Tiny()
    trainer = _fit(model, "deepspeed:bf16-mixed", gradient_clip_val=0.5)
    assert trainer.global_step == 2
    assert trainer.model.gradient_clipping() == 0.5
    assert trainer.strategy.config["bf16"] == {"enabled": True}
    assert model.layer.weight.dtype == torch.bfloat16


@pytest.mark.slow
def test_lbfgs_is_rejected() -> None:
    with pytest.raises(
        DeepSpeedPrecisionError, match=r"^DeepSpeed and the LBFGS optimizer are not compatible\. "
    ) as info:
        _fit_zero0(Tiny("lbfgs"))
    assert isinstance(info.value, MisconfigurationException)


def _fit_zero0(model: pl.LightningModule) -> pl.Trainer:
    # without ZeRO, DeepSpeed hands the user's optimizer back as is, so LBFGS reaches optimizer_step
    return _fit(model, strategy=DeepSpeedCPUStrategy(zero_optimization=False))


@pytest.mark.slow
def test_skipped_backward_is_rejected() -> None:
    with pytest.raises(DeepSpeedPrecisionError, match="^" + re.escape(LIGHTNING_SKIPPED_BACKWARD_ERROR)):
        _fit(SkipsBackward())


@pytest.mark.slow
def test_backward_override_is_ignored_with_a_warning() -> None:
    model = OverridesBackward()
    with pytest.warns(UserWarning, match=re.escape(LIGHTNING_BACKWARD_WARNING + " (OverridesBackward.backward")):
        trainer = _fit(model)
    assert model.backward_calls == 0
    assert trainer.global_step == 2


@pytest.mark.slow
def test_clip_gradients_with_another_value_warns_that_deepspeed_clips() -> None:
    # Lightning itself refuses a clip value different from the Trainer's; without one, DeepSpeed's config has 0.0
    with pytest.warns(
        UserWarning,
        match=r"clip_gradients\(clip_val=0.25\) is not applied: DeepSpeed clips by norm at gradient_clipping=0.0",
    ):
        _fit(ClipsItself())


@pytest.mark.slow
def test_config_clip_contradicting_the_trainer_is_an_error() -> None:
    strategy = DeepSpeedCPUStrategy(config={"gradient_clipping": 2.0, "zero_optimization": {"stage": 1}})
    with pytest.raises(
        DeepSpeedConfigConflictError, match=r"gradient_clipping=2\.0 but the Trainer has gradient_clip_val=1\.0"
    ):
        _fit(Tiny(), strategy=strategy, gradient_clip_val=1.0)


class OverflowsAlways(Tiny):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        (x,) = batch
        return self.layer(x).pow(2).mean() * float("inf")  # fp16 gradients are never finite


@pytest.mark.slow
@pytest.mark.skipif(
    not __import__("precision_deepspeed._compat")._compat.cpu_supports_fp16(),
    reason="DeepSpeed refuses fp16 on this CPU (DeepSpeed < 0.16.8, or no oneDNN fp16)",
)
def test_overflow_storm_at_the_lowest_loss_scale_stops_clearly() -> None:
    plugin = DeepSpeedPrecision("16-mixed", initial_scale_power=1, hysteresis=1, min_loss_scale=1)
    with pytest.raises(DeepSpeedPrecisionError) as info:
        _fit(OverflowsAlways(), plugin)
    text = str(info.value)
    assert text.startswith("Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")
    assert "Under deepspeed:16-mixed every step overflowed at DeepSpeed's lowest loss scale (min_loss_scale=1)" in text


class Validates(Tiny):
    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        (x,) = batch
        loss = self.layer(x).float().pow(2).mean()
        self.log("val_loss", loss)
        return loss


@pytest.mark.slow
def test_checkpoint_of_another_precision_resumes_no_training_but_evaluates(tmp_path: Any) -> None:
    from precision_deepspeed.errors import CheckpointPrecisionError

    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    ckpt = str(tmp_path / "bf16.ckpt")
    _fit(Validates(), "deepspeed:bf16-mixed").save_checkpoint(ckpt)
    quiet: dict[str, Any] = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                                 enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer = precision_base.Trainer(precision_plugin="deepspeed:32-true", max_steps=4, **quiet)
    with pytest.raises(
        CheckpointPrecisionError, match=r"under deepspeed:32-true \(DeepSpeed fp32 mode\): it was saved"
    ):
        trainer.fit(Validates(), data, ckpt_path=ckpt)
    metrics = precision_base.Trainer(precision_plugin="deepspeed:32-true", **quiet).validate(
        Validates(), data, ckpt_path=ckpt
    )
    assert metrics[0]["val_loss"] >= 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_max_skipped_steps_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(ValueError) as info:
        DeepSpeedPrecision("bf16-mixed", max_skipped_steps=bad)
    assert str(info.value) == f"max_skipped_steps must be a positive int or None, got {bad!r}"


def test_max_skipped_steps_defaults_to_the_shared_limit() -> None:
    from precision_base.kit.overflow import DEFAULT_MAX_SKIPPED_STEPS

    assert DEFAULT_MAX_SKIPPED_STEPS == 50
    assert DeepSpeedPrecision("bf16-mixed").max_skipped_steps == 50
    assert DeepSpeedPrecision("bf16-mixed", max_skipped_steps=None).max_skipped_steps is None


def test_overflow_storm_error_is_the_shared_type_and_the_old_one() -> None:
    from precision_base import OverflowStormError
    from precision_deepspeed.errors import DeepSpeedOverflowStormError

    assert issubclass(DeepSpeedOverflowStormError, OverflowStormError)
    assert issubclass(DeepSpeedOverflowStormError, DeepSpeedPrecisionError)  # what max_skipped_steps raised before
    assert issubclass(DeepSpeedOverflowStormError, RuntimeError)


class OverflowsAlwaysBf16(Tiny):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        (x,) = batch
        return self.layer(x).float().pow(2).mean() * float("inf")  # inf loss: the gradients are never finite


@pytest.mark.slow
@pytest.mark.skipif(
    not __import__("precision_deepspeed._compat")._compat.deepspeed_checks_bf16_overflow(),
    reason="the installed DeepSpeed's bf16 mode has no check_grad_overflow (it never skips a bf16 step)",
)
def test_max_skipped_steps_stops_a_bf16_run_whose_gradients_are_never_finite() -> None:
    """A real engine skips every step (bf16 ``check_grad_overflow``); the shared watch warns at 2 and stops at 4."""
    from precision_base import OverflowStormError

    with pytest.warns(RuntimeWarning) as warned, pytest.raises(OverflowStormError) as info:
        _fit(OverflowsAlwaysBf16(), DeepSpeedPrecision("bf16-mixed", max_skipped_steps=4), max_steps=8)
    assert isinstance(info.value, DeepSpeedPrecisionError)
    assert str(info.value) == (
        "deepspeed:bf16-mixed: 4 optimizer steps in a row were skipped because the gradients held inf or NaN, so "
        "training stopped: the model no longer learns. Check the loss and the weights for inf/NaN, lower the "
        "learning rate. (max_skipped_steps=4; None never stops.)"
    )
    storm = [str(w.message) for w in warned if "optimizer steps in a row" in str(w.message)]
    assert storm == [
        "deepspeed:bf16-mixed: 2 optimizer steps in a row were skipped because the gradients held inf or NaN; "
        "training stops at 4 (max_skipped_steps)."
    ]


@pytest.mark.slow
@pytest.mark.skipif(
    not __import__("precision_deepspeed._compat")._compat.deepspeed_checks_bf16_overflow(),
    reason="the installed DeepSpeed's bf16 mode has no check_grad_overflow (it never skips a bf16 step)",
)
def test_max_skipped_steps_none_never_stops() -> None:
    trainer = _fit(OverflowsAlwaysBf16(), DeepSpeedPrecision("bf16-mixed", max_skipped_steps=None), max_steps=3)
    assert trainer.model.skipped_steps == 3
    assert trainer.precision_plugin.precision_stats(trainer.strategy)["skipped_steps"] == 3.0


def test_max_skipped_steps_turns_on_deepspeeds_bf16_overflow_check_where_it_is_off_by_default() -> None:
    from precision_deepspeed import _compat

    assert DeepSpeedPrecision("bf16-mixed", max_skipped_steps=None).precision_section()["bf16"] == {"enabled": True}
    assert DeepSpeedPrecision("16-mixed").precision_section()["bf16"] == {"enabled": False}
    section = DeepSpeedPrecision("bf16-mixed").precision_section()
    if _compat.deepspeed_checks_bf16_overflow() and not _compat.deepspeed_bf16_overflow_check_default():
        assert section["bf16"] == {"enabled": True, "check_grad_overflow": True}  # DeepSpeed 0.17 to 0.19.0
    else:  # on by default (0.19.8), or absent (before 0.17: bf16 never skips a step, nothing to count)
        assert section["bf16"] == {"enabled": True}


@needs_autocast
def test_fp16_autocast_is_refused_with_the_reason() -> None:
    from precision_deepspeed import _compat

    with pytest.raises(ValueError) as info:
        DeepSpeedPrecision("16-mixed", torch_autocast=True)
    assert str(info.value) == (
        "deepspeed:16-mixed with torch_autocast=True (DeepSpeed's torch_autocast mode in float16) is refused: "
        f"DeepSpeed {_compat.deepspeed_version()} does not train it correctly. Its ZeRO optimizer scales the loss "
        "with a torch.amp.GradScaler (65536 at the start) but checks the gradients for overflow, clips them and "
        "reports their norm with its own loss scale, which is 1.0 because the parameters stay float32: a step whose "
        "scaled gradients overflow is skipped ('OVERFLOW! Skipping step') before the GradScaler sees it, so the "
        "GradScaler never lowers its scale and the following steps overflow and are skipped the same way; gradient "
        "clipping and the reported gradient norm see the gradients still multiplied by 65536. (Without ZeRO, "
        "DeepSpeed records no step its GradScaler skips.) Use 'deepspeed:bf16-mixed' (also with "
        "torch_autocast=True), which needs no loss scaling, or 'deepspeed:16-mixed' without torch_autocast on a "
        "device where DeepSpeed's native fp16 mode runs (CUDA)."
    )
    with pytest.raises(ValueError, match="is refused: DeepSpeed"):
        precision_base.resolve("deepspeed:16-mixed", torch_autocast=True)
