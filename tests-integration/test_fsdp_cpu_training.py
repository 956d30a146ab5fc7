"""Real 2-process FSDP2 training on CPU (gloo) through ``precision_base.Trainer(precision_plugin="fsdp:...")``.

Each precision trains once (``_fsdp_train.py`` in a subprocess: Lightning's launcher re-runs a script for rank 1),
then resumes from its step-4 checkpoint in the same processes; the tests below read that run's JSON.

Resume tolerance: exact (``==`` on Python floats of every loss and every parameter). The resumed run executes the
same CPU kernels on the same batches in the same order, and a 2-rank gloo reduction adds the same two numbers in the
same order, so any difference at all would mean some state (weights, momentum, scaler, step counter) was not
restored.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import INF_STEP, TrainingRuns, by_step, cpu_precisions

import precision_base

pytestmark = pytest.mark.slow

PRECISIONS = cpu_precisions()


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> TrainingRuns:
    return TrainingRuns(Path(tmp_path_factory.mktemp("fsdp_runs")))


@pytest.fixture(params=PRECISIONS)
def run(request: pytest.FixtureRequest, runs: TrainingRuns) -> dict[str, Any]:
    return runs.result(request.param)


def test_trained_through_our_plugin_in_two_processes(run: dict[str, Any]) -> None:
    assert run["world_size"] == 2
    assert run["plugin_type"] == "precision_fsdp.plugin.FSDPPrecision"
    table = precision_base.resolve(f"fsdp:{run['precision']}").dtypes(2)
    assert run["table"] == dict(table.rows()), "the plugin used in training reports the FSDP2 table"


def test_sharded_parameter_dtype(run: dict[str, Any]) -> None:
    expected = run["table"]["parameters"]
    assert run["sharded"], "no parameters recorded"
    for name, info in run["sharded"].items():
        assert info["dtensor"], f"{name} was not sharded by fully_shard"
        assert info["dtype"] == expected, f"{name}: sharded dtype {info['dtype']}, table says {expected}"


def test_forward_compute_dtype(run: dict[str, Any]) -> None:
    compute = run["table"]["compute"]
    assert run["compute_dtypes"] == [compute], "dtype of the first Linear's output in forward"
    assert run["param_dtypes_fwd"] == [compute], "dtype of the unsharded weight FSDP2 gathered for forward"


def test_reduced_gradient_dtype(run: dict[str, Any]) -> None:
    # recorded inside FSDP2's reduce-scatter (set_custom_reduce_scatter) on rank 0
    assert run["reduce_dtypes"] == [run["table"]["reduction"]]
    if run["precision"].endswith("-mixed"):
        assert run["reduce_dtypes"] == ["float32"], "*-mixed reduces in fp32 by default"
    for step, entry in by_step(run["steps"]).items():
        assert entry["grad_dtypes"] == [run["table"]["parameters"]], f"sharded gradient dtype at step {step}"


def test_loss_falls(run: dict[str, Any]) -> None:
    losses = [loss for _, loss in sorted(by_step(run["losses"]).items())]
    assert len(losses) == 8
    assert all(math.isfinite(x) for x in losses), losses
    assert sum(losses[-2:]) < 0.8 * sum(losses[:2]), f"loss did not fall: {losses}"


def test_resume_matches_uninterrupted_run_step_for_step(run: dict[str, Any]) -> None:
    full = by_step(run["losses"])
    resumed = by_step(run["resumed_losses"])
    k = run["resume_step"]
    assert sorted(resumed) == [s for s in sorted(full) if s >= k], "the resumed run starts at the checkpoint's step"
    for step in sorted(resumed):
        assert resumed[step] == full[step], f"step {step}: resumed loss {resumed[step]} != {full[step]}"
    for step, entry in by_step(run["resumed_steps"]).items():
        assert entry["after"] == by_step(run["steps"])[step]["after"], f"weights after step {step} differ"
    assert run["resumed_final_params"] == run["final_params"]


@pytest.mark.skipif("16-mixed" not in PRECISIONS, reason="torch on this machine cannot compute fp16 on CPU")
def test_16_mixed_inf_gradients_skip_the_step_and_back_off(runs: TrainingRuns) -> None:
    run = runs.result("16-mixed")
    assert run["scaler_type"] == "GradScaler", "FSDP2 uses torch.amp.GradScaler"
    steps = by_step(run["steps"])
    scale_before = steps[INF_STEP - 1]["scale_after"]
    inf_step = steps[INF_STEP]
    # the inf was put into rank 1's shard only; rank 0's weights (recorded here) are unchanged all the same
    assert inf_step["before"] == inf_step["after"], "weights changed on a step with inf gradients"
    assert inf_step["scale_after"] == scale_before * 0.5, "the scale did not back off by backoff_factor"
    later = steps[INF_STEP + 1]
    assert later["before"] != later["after"], "training did not continue after the skipped step"
    losses = by_step(run["losses"])
    assert all(math.isfinite(losses[s]) for s in losses if s > INF_STEP)
    # scaler state through the checkpoint: written at step 4, after the back-off, and read back on resume
    saved = run["saved_plugin_state"]
    assert saved is not None, "the checkpoint holds no FSDPPrecision state"
    assert saved["scale"] == steps[run["resume_step"] - 1]["scale_after"]
    assert saved["scale"] < run["start_scale"], "the saved scale should reflect the back-off"
    assert run["resumed_start_scale"] == saved["scale"], "the resumed run did not restore the scaler's scale"
