"""Real DeepSpeed training on CPU: 2 processes, gloo, ZeRO stages 1, 2 and 3, through ``precision_base.Trainer``.

Each stage is one launch of ``_deepspeed_helpers.py`` (Lightning's launcher re-executes that script for rank 1)
that trains every CPU-capable precision three times: uninterrupted for 3 epochs, 1 epoch then save, and resume to
3 epochs. Nothing is mocked. What runs where:

* ``32-true``, ``bf16-true``, ``bf16-mixed``: DeepSpeed's native modes, ZeRO 1, 2, 3.
* ``16-mixed``/``16-true`` in DeepSpeed's native fp16 mode need native fp16 in DeepSpeed's CPU accelerator
  (oneDNN fp16: AVX512-FP16/AMX-FP16); without it DeepSpeed refuses fp16 and the front door says so up front
  (checked in the unit tests). ``16-mixed`` and ``bf16-mixed`` with ``torch_autocast=True`` run on any CPU.

Resume tolerance: the resumed run's fp32 master weights and per-step losses must match the uninterrupted run to
1e-6 absolute (on this CPU they are bitwise equal: same ops, same order, same data).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from _deepspeed_helpers import BATCHES_PER_RANK, CPU_PRECISIONS, EPOCHS, SAVE_AFTER, run_script

pytestmark = pytest.mark.slow

STAGES = (1, 2, 3)
AUTOCAST_PRECISIONS = ("16-mixed", "bf16-mixed")
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def native_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    results = {}
    for stage in STAGES:
        out = tmp_path_factory.mktemp(f"zero{stage}") / "result.json"
        results[stage] = run_script(["--stage", str(stage), "--precisions", ",".join(CPU_PRECISIONS)], out)
    return results


@pytest.fixture(scope="module")
def autocast_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("autocast") / "result.json"
    options = json.dumps({"torch_autocast": True})
    return run_script(["--stage", "2", "--precisions", ",".join(AUTOCAST_PRECISIONS), "--options", options], out)


def _flat(weights: list[list[float]]) -> list[float]:
    return list(itertools.chain.from_iterable(weights))


def _check_loss_falls(run: dict[str, Any]) -> None:
    losses = run["full"]["losses"]
    assert len(losses) == EPOCHS * BATCHES_PER_RANK
    first, last = losses[:BATCHES_PER_RANK], losses[-BATCHES_PER_RANK:]
    assert sum(last) < 0.5 * sum(first), f"loss did not fall: {losses}"


def _check_resume(run: dict[str, Any]) -> None:
    full, first, resumed = run["full"], run["first"], run["resumed"]
    assert first["global_step"] == SAVE_AFTER * BATCHES_PER_RANK
    assert resumed["global_step"] == full["global_step"] == EPOCHS * BATCHES_PER_RANK
    # the resumed run trains only the remaining steps, and they match the uninterrupted run's
    expected = full["losses"][SAVE_AFTER * BATCHES_PER_RANK :]
    assert resumed["losses"] == pytest.approx(expected, abs=TOLERANCE)
    a, b = _flat(full["weights"]), _flat(resumed["weights"])
    assert len(a) == len(b) > 0
    assert max(abs(x - y) for x, y in zip(a, b, strict=False)) <= TOLERANCE
    # and training after the checkpoint did move the weights
    assert max(abs(x - y) for x, y in zip(_flat(first["weights"]), b, strict=False)) > 1e-4


@pytest.mark.parametrize("precision", CPU_PRECISIONS)
@pytest.mark.parametrize("stage", STAGES)
def test_engine_dtypes_match_the_plugin(native_runs: dict[int, Any], stage: int, precision: str) -> None:
    run = native_runs[stage][precision]["full"]
    table = run["plugin"]["dtypes"]
    assert run["zero_stage"] == stage
    assert run["module_params"] == [table["compute"]]
    assert run["master"] == [table["parameters"]] == ["float32"]
    assert run["communication"] == table["reduction"]
    assert run["module_buffers"] == [table["buffers"]]
    assert run["seen"] == {"input": table["inputs"], "compute": table["compute"]}
    assert run["fp16_enabled"] is False
    assert run["bf16_enabled"] is precision.startswith("bf16")
    # the plugin's section reached the engine, and so did the Trainer's gradient_clip_val
    assert run["config_section"]["bf16"] == {"enabled": precision.startswith("bf16")}
    assert run["gradient_clipping"] == 1.0


@pytest.mark.parametrize("precision", CPU_PRECISIONS)
@pytest.mark.parametrize("stage", STAGES)
def test_loss_falls(native_runs: dict[int, Any], stage: int, precision: str) -> None:
    _check_loss_falls(native_runs[stage][precision])


@pytest.mark.parametrize("precision", CPU_PRECISIONS)
@pytest.mark.parametrize("stage", STAGES)
def test_resume_matches_uninterrupted_run(native_runs: dict[int, Any], stage: int, precision: str) -> None:
    _check_resume(native_runs[stage][precision])


@pytest.mark.parametrize("precision", AUTOCAST_PRECISIONS)
def test_torch_autocast_inside_the_engine(autocast_runs: dict[str, Any], precision: str) -> None:
    run = autocast_runs[precision]
    full = run["full"]
    table = full["plugin"]["dtypes"]
    half = table["compute"]
    assert half == ("float16" if precision == "16-mixed" else "bfloat16")
    assert full["module_params"] == [table["parameters"]] == ["float32"]
    assert full["seen"] == {"input": "float32", "compute": half}
    assert full["config_section"]["torch_autocast"] == {"enabled": True, "dtype": half}
    assert full["fp16_enabled"] is False
    assert full["bf16_enabled"] is False
    # Linear parameters are reduced in the autocast dtype (ZeRO buckets gradients by communication dtype)
    assert full["param_comm_dtypes"] == [half]
    assert full["reduction_buckets"] == [table["reduction"]]
    _check_loss_falls(run)
    _check_resume(run)
