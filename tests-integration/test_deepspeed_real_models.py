"""Real DeepSpeed engines on the CPU accelerator, 2 processes (gloo), no strategy given: issue 18's DeepSpeed items.

* BatchNorm under ``deepspeed:bf16-mixed``: a ``transformers`` ResNet from a tiny ``ResNetConfig`` trains (ZeRO-2,
  DeepSpeed's native bf16 mode and its torch_autocast mode); BatchNorm computes in float32, its running statistics
  are float32 and updated. With ``keep_fp32_defaults=False`` the same fit fails as it did before the fix.
* Steps that never update: ``max_skipped_steps=4`` on a model whose gradients are never finite stops with
  ``precision_base.OverflowStormError`` after 4 steps and warns at 2, through the Trainer door and the Fabric door.
* DeepSpeed's torch_autocast float16 mode (refused by the plugin): what its ZeRO optimizer does, measured.

The ranks run :mod:`_deepspeed_real_models`.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import pytest
from _deepspeed_helpers import extensions_dir

from precision_base.errors import LaunchError
from precision_deepspeed import _compat
from precision_testsupport.launch import run_ranks

pytestmark = [pytest.mark.slow, pytest.mark.nightly]  # nightly; the zoo slice trains ResNet by name on every change

HERE = Path(__file__).parent
RUNS = HERE / "_deepspeed_real_models.py"
STEPS = 8  # two epochs of 4 steps per rank: the second sees the same batches again
ENV = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"}


def _run(target: str, args: dict[str, Any], cwd: Path) -> Any:
    env = {**ENV, "TORCH_EXTENSIONS_DIR": extensions_dir(), "PYTHONPATH": str(HERE)}
    return run_ranks(f"{RUNS}:{target}", args, world=2, threads=1, timeout=600, cwd=cwd, env=env)


# -- BatchNorm ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    runs: dict[str, Any] = {"native": {"spec": "deepspeed:bf16-mixed"}}
    if _compat.deepspeed_has_torch_autocast():
        runs["autocast"] = {"spec": "deepspeed:bf16-mixed", "options": {"torch_autocast": True}}
    result: dict[str, Any] = _run("fit_resnets", {"runs": runs, "steps": STEPS}, tmp_path_factory.mktemp("resnet"))
    return result


def _check_trains(run: dict[str, Any]) -> None:
    losses = run["losses"]
    assert len(losses) == STEPS
    assert all(math.isfinite(x) for x in losses)
    first, second = sum(losses[: STEPS // 2]), sum(losses[STEPS // 2 :])
    assert second < first, losses  # the second pass over the same batches has the lower loss


def _check_batchnorm_float32(run: dict[str, Any]) -> None:
    assert run["zero_stage"] == 2
    assert run["running_mean_dtypes"] == run["running_var_dtypes"] == ["float32"]
    assert run["running_mean_changed"] is True
    assert run["batches_tracked"] == [STEPS]
    assert len(run["seen"]) == 6  # every BatchNorm2d of the model ran
    assert run["dtypes"]["buffers"] == "float32"
    assert any(note.startswith("default: layers whose running statistics are float buffers") for note in run["notes"])


def test_resnet_trains_under_native_bf16_with_batchnorm_in_float32(resnets: dict[str, Any]) -> None:
    run = resnets["native"]
    _check_trains(run)
    _check_batchnorm_float32(run)
    assert run["conv_weight_dtypes"] == ["bfloat16"]  # DeepSpeed's native mode: the rest computes in bf16
    # each BatchNorm gets float32 inputs and computes in float32 from its bf16 working copy of the weight
    assert {tuple(seen) for runs in run["seen"].values() for seen in runs} == {("float32", "bfloat16", "float32")}
    assert run["dtypes"]["compute"] == "bfloat16"


@pytest.mark.skipif(not _compat.deepspeed_has_torch_autocast(), reason="the installed DeepSpeed has no torch_autocast")
def test_resnet_trains_under_torch_autocast_with_batchnorm_in_float32(resnets: dict[str, Any]) -> None:
    run = resnets["autocast"]
    _check_trains(run)
    _check_batchnorm_float32(run)
    assert run["conv_weight_dtypes"] == ["float32"]
    assert {tuple(seen) for runs in run["seen"].values() for seen in runs} == {("float32", "float32", "float32")}


def test_without_the_default_rule_batchnorm_fails_as_reported(tmp_path: Path) -> None:
    """The failure of issue 18, reproduced with the default float32 rule off."""
    args = {"runs": {"off": {"spec": "deepspeed:bf16-mixed", "options": {"keep_fp32_defaults": False}}}, "steps": 1}
    with pytest.raises(LaunchError) as info:
        _run("fit_resnets", args, tmp_path)
    assert "RuntimeError: expected scalar type BFloat16 but found Float" in str(info.value)


# -- steps that never update ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def storms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not _compat.deepspeed_checks_bf16_overflow():
        pytest.skip("the installed DeepSpeed's bf16 mode has no check_grad_overflow (it never skips a bf16 step)")
    result: dict[str, Any] = _run("overflow_storm", {"limit": 4}, tmp_path_factory.mktemp("storm"))
    return result


@pytest.mark.parametrize("door", ["trainer", "fabric"])
def test_overflow_storm_stops_after_the_limit_and_warns_at_half(storms: dict[str, Any], door: str) -> None:
    run = storms[door]
    assert run["steps"] is None, "training went on although no step updated the weights"
    assert run["error"] == {
        "type": "DeepSpeedOverflowStormError",  # an OverflowStormError (caught as such in the ranks)
        "message": (
            "deepspeed:bf16-mixed: 4 optimizer steps in a row were skipped because the gradients held inf or NaN, "
            "so training stopped: the model no longer learns. Check the loss and the weights for inf/NaN, lower the "
            "learning rate. (max_skipped_steps=4; None never stops.)"
        ),
    }
    assert run["warnings"] == [
        "deepspeed:bf16-mixed: 2 optimizer steps in a row were skipped because the gradients held inf or NaN; "
        "training stops at 4 (max_skipped_steps)."
    ]


def test_both_plugins_share_the_default_and_the_error() -> None:
    import precision_base
    from precision_base.kit.overflow import DEFAULT_MAX_SKIPPED_STEPS
    from precision_deepspeed.errors import DeepSpeedOverflowStormError
    from precision_deepspeed.plugin import DeepSpeedPrecision
    from precision_fsdp import FSDPPrecision

    assert issubclass(DeepSpeedOverflowStormError, precision_base.OverflowStormError)
    assert DeepSpeedPrecision("bf16-mixed").max_skipped_steps == DEFAULT_MAX_SKIPPED_STEPS == 50
    for plugin in (FSDPPrecision, DeepSpeedPrecision):
        assert inspect.signature(plugin).parameters["max_skipped_steps"].default == DEFAULT_MAX_SKIPPED_STEPS
    for make in (lambda: DeepSpeedPrecision("bf16-mixed", max_skipped_steps=0),
                 lambda: FSDPPrecision("16-mixed", max_skipped_steps=0)):  # fmt: skip
        with pytest.raises(ValueError) as info:
            make()
        assert str(info.value) == "max_skipped_steps must be a positive int or None, got 0"


# -- DeepSpeed's torch_autocast float16 mode ----------------------------------------------------------------------
@pytest.mark.skipif(not _compat.deepspeed_has_torch_autocast(), reason="the installed DeepSpeed has no torch_autocast")
def test_deepspeeds_fp16_autocast_skips_without_lowering_its_gradscaler(tmp_path: Path) -> None:
    """Why ``DeepSpeedPrecision("16-mixed", torch_autocast=True)`` is refused, measured on DeepSpeed itself.

    ZeRO-2, targets 16x those of ``regression_data`` (gradients large enough that 65536 times them overflow fp16):
    every step is skipped, the GradScaler stays at 65536 (torch's own GradScaler loop halves it after each skip),
    the optimizer's own loss scale is 1.0, and the plugin's ``precision_stats`` reads the GradScaler's scale. When a
    DeepSpeed release fixes this, this test fails: revisit the refusal (``plugin.autocast_fp16_refusal``).
    """
    result = _run("autocast_fp16_engine", {"steps": 8, "target_scale": 16.0}, tmp_path)
    rows = result["rows"]
    assert result["skipped_steps"] == 8
    assert [row["applied"] for row in rows] == [False] * 8
    assert {row["gradscaler_scale"] for row in rows} == {65536.0}
    assert {row["optimizer_loss_scale"] for row in rows} == {1.0}
    assert {row["plugin_reads"] for row in rows} == {65536.0}
