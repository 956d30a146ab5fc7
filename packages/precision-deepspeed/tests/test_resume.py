"""Recording the precision in checkpoints and refusing a resume under another DeepSpeed precision mode.

The real resumes (2 processes, ZeRO-2, saved and resumed under different precisions) are in
``tests-integration/test_deepspeed_cpu.py``; these check the pieces in one process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch.plugins.precision import DeepSpeedPrecision as LightningDeepSpeedPrecision

from precision_deepspeed import DeepSpeedPrecision
from precision_deepspeed.errors import CheckpointPrecisionError
from precision_deepspeed.implementation import deepspeed_has_torch_autocast
from precision_deepspeed.resume import engine_mode, saved_precision


def test_engine_modes() -> None:
    assert engine_mode(DeepSpeedPrecision("16-true").precision_section()) == "fp16"
    assert engine_mode(DeepSpeedPrecision("16-mixed").precision_section()) == "fp16"
    assert engine_mode(DeepSpeedPrecision("bf16-true").precision_section()) == "bf16"
    assert engine_mode(DeepSpeedPrecision("32-true").precision_section()) == "fp32"
    assert engine_mode({"bfloat16": {"enabled": True}}) == "bf16"
    assert engine_mode({}) == "fp32"
    if deepspeed_has_torch_autocast():
        section = DeepSpeedPrecision("bf16-mixed", torch_autocast=True).precision_section()
        assert engine_mode(section) == "torch_autocast/bfloat16"


def test_state_records_precision_and_section_and_round_trips() -> None:
    plugin = DeepSpeedPrecision("16-mixed", hysteresis=3)
    state = plugin.state_dict()
    assert state == {"precision": "16-mixed", "deepspeed_config_section": plugin.precision_section()}
    DeepSpeedPrecision("16-true").load_state_dict(state)  # same DeepSpeed mode: fine
    # Lightning's built-in class (same qualname, so it receives our state) ignores it: checkpoints stay portable
    LightningDeepSpeedPrecision("32-true").load_state_dict(state)
    assert type(plugin).__qualname__ == LightningDeepSpeedPrecision.__qualname__


def test_load_state_of_another_mode_is_refused_naming_both() -> None:
    with pytest.raises(CheckpointPrecisionError) as info:
        DeepSpeedPrecision("32-true").load_state_dict(DeepSpeedPrecision("bf16-mixed").state_dict())
    text = str(info.value)
    assert "under deepspeed:32-true (DeepSpeed fp32 mode): it was saved under bf16-mixed (DeepSpeed bf16 mode)." in text
    assert "convert_zero_checkpoint_to_fp32_state_dict" in text
    assert isinstance(info.value, ValueError)


def _fake_deepspeed_checkpoint(root: Path, state: dict[str, object], tag: str = "checkpoint") -> Path:
    """The two files of a DeepSpeed checkpoint that the check reads (``latest`` and the rank-0 model states)."""
    (root / tag).mkdir(parents=True)
    (root / "latest").write_text(tag)
    torch.save({"module": {"w": torch.zeros(2)}, **state}, root / tag / "mp_rank_00_model_states.pt")
    return root


def test_saved_precision_prefers_the_plugins_record(tmp_path: Path) -> None:
    ckpt = _fake_deepspeed_checkpoint(
        tmp_path / "a", {"ds_config": {"bf16": {"enabled": True}}, "DeepSpeedPrecision": {
            "precision": "bf16-true", "deepspeed_config_section": {"bf16": {"enabled": True}}}}
    )  # fmt: skip
    saved = saved_precision(ckpt)
    assert saved is not None
    assert (saved.mode, saved.precision, saved.describe()) == ("bf16", "bf16-true", "bf16-true (DeepSpeed bf16 mode)")


def test_saved_precision_of_lightnings_builtin_comes_from_ds_config(tmp_path: Path) -> None:
    ckpt = _fake_deepspeed_checkpoint(tmp_path / "b", {"ds_config": {"fp16": {"enabled": True}}}, tag="global_step4")
    saved = saved_precision(ckpt)
    assert saved is not None
    assert saved.describe() == "16-mixed or 16-true (DeepSpeed fp16 mode)"
    assert saved_precision(tmp_path / "missing") is None
    assert saved_precision(tmp_path) is None  # a directory that is no DeepSpeed checkpoint


@pytest.mark.parametrize("namespace", ["lightning.pytorch", "pytorch_lightning"])
def test_lightnings_own_strategy_refuses_another_mode_before_deepspeeds_loader(tmp_path: Path, namespace: str) -> None:
    """With Lightning's DeepSpeedStrategy, DeepSpeed's loader would fail first (FileNotFoundError about
    bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt); the plugin's guard on that strategy instance refuses earlier."""
    import importlib

    from precision_base.namespaces import for_namespace
    from precision_deepspeed.strategy import guard_resume

    strategies = importlib.import_module(f"{namespace}.strategies")
    saved = {"DeepSpeedPrecision": DeepSpeedPrecision("bf16-mixed").state_dict()}
    ckpt = _fake_deepspeed_checkpoint(tmp_path / "ckpt", saved)
    strategy = strategies.DeepSpeedStrategy()
    plugin = for_namespace(DeepSpeedPrecision, namespace)("32-true")
    plugin._fitting = True
    guard_resume(strategy, plugin)
    guard_resume(strategy, plugin)  # once only: a second connect does not wrap twice
    with pytest.raises(CheckpointPrecisionError, match=r"it was saved under bf16-mixed \(DeepSpeed bf16 mode\)"):
        strategy.load_checkpoint(ckpt)
    plugin._fitting = False  # validate/test/predict from the checkpoint: no check, Lightning's loader runs
    with pytest.raises(Exception) as other:
        strategy.load_checkpoint(ckpt)
    assert not isinstance(other.value, CheckpointPrecisionError)
    assert type(strategies.DeepSpeedStrategy.load_checkpoint) is type(lambda: None), "the class itself is untouched"
