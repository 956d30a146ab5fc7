"""Real 2-process FSDP2 training on CPU (gloo) through ``precision_base.Fabric(precision_plugin="fsdp:...")``.

All precisions torch runs on CPU train in one pair of processes (``_fabric_fsdp.py``, started by
``precision_testsupport.launch.run_ranks``), under Fabric's own ``ModelParallelStrategy`` with a user
``parallelize_fn`` that calls the plugin's ``fully_shard``. Each precision trains STEPS steps with clip-by-norm and
``fabric.save`` after SAVE_AT steps, then a second Fabric ``fabric.load``s that checkpoint and finishes.

Resume tolerance: exact (``==`` on Python floats of every loss and every parameter): the resumed run executes the
same CPU kernels on the same batches, so any difference would mean some state (weights, momentum, scaler) was lost.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from _fabric_fsdp import INF_STEP, SAVE_AT, STEPS
from _fsdp_helpers import cpu_precisions, needs_fsdp2_on_cpu

import precision_base
from precision_testsupport.launch import run_ranks

HERE = Path(__file__).parent


pytestmark = [
    pytest.mark.slow,
    needs_fsdp2_on_cpu(),
]

PRECISIONS = cpu_precisions()
AUTO = {"fsdp:bf16-mixed": {}, "fsdp:fp8-tensorwise": {"fp8_emulate": True}}
"""Specs trained under ``strategy="auto"`` (``precision_fsdp.fabric.FSDP2Strategy``) in the same launch."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("fabric_fsdp")
    result: dict[str, Any] = run_ranks(
        f"{HERE / '_fabric_fsdp.py'}:train_all",
        {"precisions": PRECISIONS, "out": str(out), "auto": AUTO},
        world=2, threads=1, timeout=400, cwd=out, env={"PYTHONWARNINGS": "ignore", "PYTHONPATH": str(HERE)},
    )  # fmt: skip
    return result


@pytest.fixture(params=PRECISIONS)
def run(request: pytest.FixtureRequest, runs: dict[str, Any]) -> dict[str, Any]:
    return {"precision": request.param, **runs[request.param]}


def test_fabric_classes_were_used(run: dict[str, Any]) -> None:
    full = run["full"]
    assert full["plugin_type"] == "precision_fsdp.fabric.FSDPPrecision"
    assert full["strategy_type"] == "ModelParallelStrategy"
    assert full["device_type"] == "cpu"
    assert full["table"] == dict(precision_base.resolve_fabric(f"fsdp:{run['precision']}").dtypes(2).rows())


def test_parameter_compute_and_reduce_dtypes(run: dict[str, Any]) -> None:
    full, precision = run["full"], run["precision"]
    expected = {  # (sharded parameters, compute, gradient reduction)
        "32-true": ("float32", "float32", "float32"),
        "16-true": ("float16", "float16", "float16"),
        "bf16-true": ("bfloat16", "bfloat16", "bfloat16"),
        "16-mixed": ("float32", "float16", "float32"),
        "bf16-mixed": ("float32", "bfloat16", "float32"),
    }[precision]
    assert {dtype for dtype, _ in full["sharded"].values()} == {expected[0]}
    assert all(is_dtensor for _, is_dtensor in full["sharded"].values()), "every parameter sharded by fully_shard"
    assert full["compute"] == [expected[1]], "dtype of the first Linear's output in forward"
    assert full["weight_fwd"] == [expected[1]], "dtype of the weight FSDP2 gathered for forward"
    assert full["reduce"] == [expected[2]], "dtype recorded inside FSDP2's reduce-scatter"
    for step, entry in full["steps"].items():
        assert entry["grad_dtypes"] == [expected[0]], f"sharded gradient dtype at step {step}"


def test_loss_falls(run: dict[str, Any]) -> None:
    losses = [run["full"]["steps"][str(s)]["loss"] for s in range(STEPS)]
    assert losses[-1] < 0.6 * losses[0], losses


def test_clip_by_norm_on_fsdp2(run: dict[str, Any]) -> None:
    for step, entry in run["full"]["steps"].items():
        if run["precision"] == "16-mixed" and int(step) == INF_STEP:
            continue
        assert 0 < entry["norm"] < float("inf"), f"global gradient norm at step {step}"


def test_16_mixed_skips_the_overflow_step_on_every_rank(runs: dict[str, Any]) -> None:
    if "16-mixed" not in runs:
        pytest.skip("this CPU runs no fp16 matmul (see _fsdp_helpers.cpu_precisions)")
    full = runs["16-mixed"]["full"]
    assert full["scaler"] == "GradScaler(cpu)", "FSDP2 on CPU gets torch.amp.GradScaler('cpu')"
    steps = {int(k): v for k, v in full["steps"].items()}
    assert steps[0]["scale_before"] == 1024.0, "init_scale=1024.0 given to resolve_fabric reached the scaler"
    for step, entry in steps.items():
        if step == INF_STEP:  # inf only in rank 1's shard; rank 0 reports the full parameters unchanged
            assert not entry["changed"], "the step with inf gradients on rank 1 was skipped on every rank"
            assert entry["scale_after"] == entry["scale_before"] / 2
        else:
            assert entry["changed"], f"step {step} was applied"
            assert entry["scale_after"] == entry["scale_before"]


def test_save_load_equals_uninterrupted_run(run: dict[str, Any]) -> None:
    full, resumed = run["full"], run["resumed"]
    assert sorted(int(s) for s in resumed["steps"]) == list(range(SAVE_AT, STEPS)), "resumed after the saved step"
    for step in range(SAVE_AT, STEPS):
        assert resumed["steps"][str(step)]["loss"] == full["steps"][str(step)]["loss"], f"loss at step {step}"
        assert resumed["steps"][str(step)]["scale_before"] == full["steps"][str(step)]["scale_before"]
    assert resumed["final"] == full["final"], "final parameters of the resumed run"


@pytest.mark.parametrize("spec", AUTO)
def test_strategy_auto_picks_fsdp2_strategy_and_trains(runs: dict[str, Any], spec: str) -> None:
    """strategy="auto" (every other test passes Fabric's own ModelParallelStrategy): setup_environment once asked
    for the Trainer's ``lightning_module`` here ('FSDP2Strategy' object has no attribute 'lightning_module')."""
    auto = runs["auto"][spec]
    assert auto["strategy_type"] == "precision_fsdp.fabric.FSDP2Strategy"
    assert auto["all_dtensor"], "every parameter sharded by the default policy"
    assert all(math.isfinite(loss) for loss in auto["losses"]), auto["losses"]
    expected = [False, True, True, False] if "fp8" in spec else [False] * 4  # fp8: first and last Linear kept
    assert auto["float8"] == expected, "Linear layers converted to torchao's Float8Linear"
