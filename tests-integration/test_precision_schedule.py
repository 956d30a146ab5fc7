"""``PrecisionSchedule`` in real 2-process FSDP2 fits on CPU (gloo): the switch, its dtypes, its resume.

One launch (``_schedule_runs.py:fits``) runs, in the same two processes, 8 steps each of: ``fsdp:bf16-mixed``
without a schedule (the noise reference); ``{0: bf16-mixed, 0.5: 32-true}`` (the switch at step 4) audited at steps
0 and 4, checkpointed every 2 steps; the same schedule resumed from its step-6 checkpoint; the reverse direction
``{0: 32-true, 4: bf16-mixed}``; ``{0: bf16-mixed, 2: 16-mixed}`` (a loss scaler appears); and the step-6 checkpoint
resumed with another schedule (an error).

Tolerances: before the switch the scheduled run is the unswitched run (``==``); the loss change across the switch is
at most the unswitched run's largest step-to-step change; the resumed run equals the uninterrupted one exactly
(``==`` on every loss and every parameter: the same operations in the same order).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

RUNS = Path(__file__).with_name("_schedule_runs.py")
SWITCH = 4
TAIL = [[0, "fsdp:bf16-mixed"], [0.5, "fsdp:32-true"]]
RESUME_FROM = "switched/epoch=2-step=6.ckpt"

pytestmark = needs_fsdp2_on_cpu()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("schedule")
    plan = [
        {"label": "plain", "spec": "fsdp:bf16-mixed"},
        {"label": "switched", "spec": "fsdp:bf16-mixed", "schedule": TAIL, "audit_at": [0, SWITCH], "checkpoints": 1},
        {"label": "resumed", "spec": "fsdp:bf16-mixed", "schedule": TAIL, "resume": RESUME_FROM},
        {
            "label": "reverse",
            "spec": "fsdp:32-true",
            "schedule": [[0, "fsdp:32-true"], [SWITCH, "fsdp:bf16-mixed"]],
            "audit_at": [SWITCH],
        },
        {"label": "to16", "spec": "fsdp:bf16-mixed", "schedule": [[0, "fsdp:bf16-mixed"], [2, "fsdp:16-mixed"]]},
        {
            "label": "other",
            "spec": "fsdp:bf16-mixed",
            "schedule": [[0, "fsdp:bf16-mixed"], [0.25, "fsdp:32-true"]],
            "resume": RESUME_FROM,
        },
    ]
    env = {"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    result: dict[str, Any] = run_ranks(
        f"{RUNS}:fits", {"runs": plan, "out": str(out)}, world=2, threads=1, timeout=900, cwd=out, env=env
    )
    return result


def _by_step(values: dict[str, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in values.items()}


def test_the_loss_is_continuous_across_the_switch(runs: dict[str, Any]) -> None:
    plain, switched = _by_step(runs["plain"]["losses"]), _by_step(runs["switched"]["losses"])
    assert sorted(switched) == list(range(8))
    assert {k: switched[k] for k in range(SWITCH)} == {k: plain[k] for k in range(SWITCH)}, "same run before it"
    noise = max(abs(plain[k + 1] - plain[k]) for k in range(7))
    jump = abs(switched[SWITCH] - switched[SWITCH - 1])
    assert jump <= noise, f"loss jumped by {jump} at the switch; the unswitched run's largest step change is {noise}"
    for k in range(SWITCH, 8):  # float32 instead of bfloat16 compute: close to the unswitched run, not equal
        assert switched[k] != plain[k]
        assert abs(switched[k] - plain[k]) <= 0.01 * abs(plain[k]), (k, switched[k], plain[k])


def test_after_the_switch_every_dtype_is_the_targets(runs: dict[str, Any]) -> None:
    from precision_base import resolve

    switched = runs["switched"]
    compute = _by_step(switched["compute"])
    assert {compute[k] for k in range(SWITCH)} == {"bfloat16"}
    assert {compute[k] for k in range(SWITCH, 8)} == {"float32"}
    assert switched["switched_at"] == {str(SWITCH): "fsdp:32-true"}
    assert switched["precision"] == "32-true"
    assert switched["table"] == dict(resolve("fsdp:32-true").dtypes(2).rows())
    assert switched["policies"]
    assert all(row[1:] == ["float32", "float32"] for row in switched["policies"])
    assert runs["plain"]["policies"]
    assert all(row[1:] == ["bfloat16", "float32"] for row in runs["plain"]["policies"])
    before, after = switched["audits"]
    assert switched["audit_ok"] == [True, True], f"{before}\n{after}"
    assert before.startswith("precision audit of fsdp:bf16-mixed, rank 0, 1 optimizer step(s): ok")
    assert after.startswith("precision audit of fsdp:32-true, rank 0, 1 optimizer step(s): ok")
    assert "autocast            FSDPLinear x2: net.*                       off" in after
    assert "all_gather_single x4, 4.4 KiB              float32" in after  # bf16 before: half the bytes
    # the first step's audit also lists the plugin's integer all_gather (its check of shards drawn alike): the
    # columns are wider there
    assert re.search(r"all_gather_single x4, 2\.2 KiB +bfloat16 or float32  bfloat16", before), before
    assert all("loss_scale" not in step["stats"] for step in switched["per_step"].values())


def test_a_run_resumed_after_the_switch_equals_the_uninterrupted_one(runs: dict[str, Any]) -> None:
    switched, resumed = runs["switched"], runs["resumed"]
    assert resumed["error"] is None
    assert "epoch=2-step=6.ckpt" in switched["checkpoints"]
    losses = _by_step(resumed["losses"])
    assert sorted(losses) == [6, 7]
    assert losses == {k: _by_step(switched["losses"])[k] for k in (6, 7)}
    assert resumed["params"] == switched["params"]
    assert resumed["at_start"]["precision"] == "32-true", "the schedule restored the switched precision on resume"
    assert all(row[1:] == ["float32", "float32"] for row in resumed["at_start"]["policies"])
    assert not [w for w in resumed["warnings"] if "resuming a checkpoint written under precision" in w]


def test_resuming_with_another_schedule_is_an_error(runs: dict[str, Any]) -> None:
    assert runs["other"]["error"] == (
        "PrecisionScheduleError: the checkpoint was written under precision schedule [[0, 'fsdp:bf16-mixed'], "
        "[0.5, 'fsdp:32-true']] (steps [0, 4]), but this run has [[0, 'fsdp:bf16-mixed'], [0.25, 'fsdp:32-true']] "
        "(steps [0, 2]): resume with the checkpoint's schedule, or start a new run (load only the weights) for "
        "another one"
    )


def test_the_reverse_direction_switches_to_bf16_autocast(runs: dict[str, Any]) -> None:
    reverse = runs["reverse"]
    compute = _by_step(reverse["compute"])
    assert [compute[k] for k in range(8)] == ["float32"] * SWITCH + ["bfloat16"] * (8 - SWITCH)
    assert reverse["audit_ok"] == [True], reverse["audits"][0]
    assert reverse["audits"][0].startswith("precision audit of fsdp:bf16-mixed, rank 0, 1 optimizer step(s): ok")
    assert all(row[1:] == ["bfloat16", "float32"] for row in reverse["policies"])


def test_a_switch_to_16_mixed_creates_the_loss_scaler(runs: dict[str, Any]) -> None:
    to16 = runs["to16"]
    steps = _by_step(to16["per_step"])
    assert [steps[k]["scaler"] for k in range(8)] == [None, None] + ["GradScaler"] * 6
    assert [steps[k]["precision"] for k in range(8)] == ["bf16-mixed"] * 2 + ["16-mixed"] * 6
    assert "loss_scale" not in steps[0]["stats"]
    assert steps[7]["stats"]["loss_scale"] > 0
    compute = _by_step(to16["compute"])
    assert [compute[k] for k in range(8)] == ["bfloat16"] * 2 + ["float16"] * 6
