"""Rendering the plugin's DeepSpeed precision section and merging it into a user's config."""

from __future__ import annotations

from typing import Any

import pytest

from precision_base import PRECISIONS, TrainerConfigurationError
from precision_deepspeed.config import (
    LossScaling,
    apply_gradient_clipping,
    merge_precision_section,
    render_precision_section,
    write_into_config,
)
from precision_deepspeed.errors import DeepSpeedConfigConflictError


def test_fp16_section_carries_every_loss_scaling_knob() -> None:
    scaling = LossScaling(initial_scale_power=12, loss_scale_window=200, hysteresis=3, consecutive_hysteresis=True)
    for precision in ("16-mixed", "16-true"):
        section = render_precision_section(precision, loss_scaling=scaling)
        assert section["bf16"] == {"enabled": False}
        assert section["fp16"] == {
            "enabled": True,
            "loss_scale": 0.0,
            "initial_scale_power": 12,
            "loss_scale_window": 200,
            "hysteresis": 3,
            "consecutive_hysteresis": True,
            "min_loss_scale": 1,
        }


def test_bf16_and_fp32_sections() -> None:
    for precision in ("bf16-mixed", "bf16-true"):
        assert render_precision_section(precision) == {"fp16": {"enabled": False}, "bf16": {"enabled": True}}
    assert render_precision_section("32-true") == {"fp16": {"enabled": False}, "bf16": {"enabled": False}}


def test_torch_autocast_section() -> None:
    section = render_precision_section("bf16-mixed", torch_autocast=True)
    assert section == {
        "fp16": {"enabled": False},
        "bf16": {"enabled": False},
        "torch_autocast": {"enabled": True, "dtype": "bfloat16"},
    }
    section = render_precision_section(
        "16-mixed", torch_autocast=True, autocast_lower_precision_safe_modules=["torch.nn.Linear"]
    )
    assert section["torch_autocast"] == {
        "enabled": True,
        "dtype": "float16",
        "lower_precision_safe_modules": ["torch.nn.Linear"],
    }
    with pytest.raises(ValueError, match="torch_autocast=True needs a mixed precision"):
        render_precision_section("bf16-true", torch_autocast=True)


@pytest.mark.parametrize("kwargs", [{"loss_scale": -1}, {"hysteresis": 0}, {"loss_scale_window": 1.5},
                                    {"consecutive_hysteresis": 1}, {"min_loss_scale": True}])  # fmt: skip
def test_loss_scaling_rejects_bad_knobs(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="invalid fp16 loss scaling: " + next(iter(kwargs))):
        LossScaling(**kwargs)


def test_merge_adds_the_section_and_keeps_everything_else() -> None:
    user = {"zero_optimization": {"stage": 2}, "bf16": {"enabled": True, "immediate_grad_update": True}}
    merged = merge_precision_section(user, render_precision_section("bf16-mixed"), owner="deepspeed:bf16-mixed")
    assert merged == {
        "zero_optimization": {"stage": 2},
        "bf16": {"enabled": True, "immediate_grad_update": True},
        "fp16": {"enabled": False},
    }
    assert "fp16" not in user, "the user's config must not be modified"
    assert merge_precision_section(None, {"bf16": {"enabled": True}}, owner="x") == {"bf16": {"enabled": True}}


def test_merge_is_idempotent() -> None:
    section = render_precision_section("16-mixed", loss_scaling=LossScaling(consecutive_hysteresis=True))
    once = merge_precision_section({"train_micro_batch_size_per_gpu": 4}, section, owner="deepspeed:16-mixed")
    assert merge_precision_section(once, section, owner="deepspeed:16-mixed") == once


def test_contradiction_names_both_sides() -> None:
    user = {"fp16": {"enabled": True}}
    with pytest.raises(DeepSpeedConfigConflictError) as info:
        merge_precision_section(user, render_precision_section("bf16-mixed"), owner="deepspeed:bf16-mixed")
    text = str(info.value)
    assert "contradicts the precision plugin deepspeed:bf16-mixed" in text
    assert "fp16.enabled=True (the plugin needs False)" in text
    assert isinstance(info.value, TrainerConfigurationError)
    assert isinstance(info.value, ValueError)


def test_contradicting_loss_scaling_knob_is_an_error() -> None:
    user = {"fp16": {"enabled": True, "consecutive_hysteresis": True}}
    with pytest.raises(
        DeepSpeedConfigConflictError, match=r"fp16\.consecutive_hysteresis=True \(the plugin needs False\)"
    ):
        merge_precision_section(user, render_precision_section("16-mixed"), owner="deepspeed:16-mixed")


def test_old_bfloat16_spelling_and_autocast_are_checked() -> None:
    with pytest.raises(
        DeepSpeedConfigConflictError, match=r"bfloat16\.enabled=True \(the plugin needs bf16 enabled=False\)"
    ):
        merge_precision_section({"bfloat16": {"enabled": True}}, render_precision_section("32-true"), owner="o")
    with pytest.raises(DeepSpeedConfigConflictError, match=r"torch_autocast\.enabled=True \(the plugin does not use"):
        merge_precision_section(
            {"torch_autocast": {"enabled": True}}, render_precision_section("bf16-mixed"), owner="deepspeed:bf16-mixed"
        )
    with pytest.raises(
        DeepSpeedConfigConflictError, match=r"torch_autocast\.dtype='float16' \(the plugin needs 'bfloat16'\)"
    ):
        merge_precision_section(
            {"torch_autocast": {"enabled": True, "dtype": "float16"}},
            render_precision_section("bf16-mixed", torch_autocast=True),
            owner="o",
        )


def test_gradient_clipping_reaches_the_config_and_conflicts_are_errors() -> None:
    config: dict[str, Any] = {}
    apply_gradient_clipping(config, None, owner="o")
    assert config == {}
    apply_gradient_clipping(config, 0.5, owner="o")
    assert config == {"gradient_clipping": 0.5}
    apply_gradient_clipping(config, 0.5, owner="o")  # same value: fine
    with pytest.raises(DeepSpeedConfigConflictError) as info:
        apply_gradient_clipping({"gradient_clipping": 2.0}, 1.0, owner="deepspeed:bf16-mixed")
    assert "gradient_clipping=2.0" in str(info.value)
    assert "gradient_clip_val=1.0" in str(info.value)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_deepspeed_accepts_the_rendered_section(precision: str) -> None:
    """DeepSpeed's own config parser reads the section as intended (no process group needed for this)."""
    from deepspeed.runtime.config import DeepSpeedConfig

    scaling = LossScaling(consecutive_hysteresis=True, hysteresis=3) if precision.startswith("16") else None
    section = render_precision_section(precision, loss_scaling=scaling)
    parsed = DeepSpeedConfig(merge_precision_section({"train_batch_size": 2}, section, owner="o"))
    # the attribute names moved between DeepSpeed releases
    fp16 = getattr(parsed, "float16_config", None)
    fp16_enabled = fp16.enabled if fp16 is not None else parsed.fp16_enabled
    bf16 = getattr(parsed, "bfloat16_config", None)
    bf16_enabled = bf16.enabled if bf16 is not None else parsed.bfloat16_enabled
    assert fp16_enabled is precision.startswith("16")
    assert bf16_enabled is precision.startswith("bf16")
    if precision.startswith("16"):
        args = fp16.dynamic_loss_scale_args() if fp16 is not None else parsed.dynamic_loss_scale_args
        assert args["consecutive_hysteresis"] is True
        assert args["delayed_shift"] == 3


def test_write_into_config_lets_lightnings_keys_give_way_and_keeps_the_users() -> None:
    # as after Lightning's _format_config: the user's keys first, then what Lightning added
    config: dict[str, Any] = {
        "zero_optimization": {"stage": 2},
        "gradient_accumulation_steps": 1,
        "train_micro_batch_size_per_gpu": 4,
        "gradient_clipping": 0.0,
        "bf16": {"enabled": True},
    }
    lightning = {"gradient_accumulation_steps", "train_micro_batch_size_per_gpu", "gradient_clipping", "bf16"}
    section = render_precision_section("bf16-mixed", torch_autocast=True)
    write_into_config(config, section, owner="deepspeed:bf16-mixed", lightning_keys=lightning, gradient_clip_val=0.5)
    assert config == {
        "zero_optimization": {"stage": 2},
        "fp16": {"enabled": False},
        "bf16": {"enabled": False},
        "torch_autocast": {"enabled": True, "dtype": "bfloat16"},
        "gradient_clipping": 0.5,
        "gradient_accumulation_steps": 1,
        "train_micro_batch_size_per_gpu": 4,
    }


def test_write_into_config_checks_what_the_user_wrote() -> None:
    section = render_precision_section("16-mixed", loss_scaling=LossScaling(loss_scale_window=500))
    with pytest.raises(DeepSpeedConfigConflictError, match=r"DeepSpeedStrategy\(loss_scale_window=200\) contradicts"):
        write_into_config({}, section, owner="deepspeed:16-mixed", strategy_loss_scaling={"loss_scale_window": 200})
    # a user fp16 section wins over the strategy's arguments (as in Lightning), and is what gets checked
    with pytest.raises(DeepSpeedConfigConflictError, match=r"fp16\.loss_scale_window=100 \(the plugin needs 500\)"):
        write_into_config(
            {"fp16": {"enabled": True, "loss_scale_window": 100}}, section, owner="deepspeed:16-mixed",
            strategy_loss_scaling={"loss_scale_window": 500},
        )  # fmt: skip
    user: dict[str, Any] = {"gradient_clipping": 2.0}
    with pytest.raises(DeepSpeedConfigConflictError, match=r"gradient_clipping=2\.0 but the Trainer has"):
        write_into_config(user, section, owner="deepspeed:16-mixed", gradient_clip_val=1.0)
    assert user == {"gradient_clipping": 2.0}, "nothing is written when the user's config contradicts"
