"""``PrecisionSchedule`` away from fp8 in real 2-process FSDP2 fits on CPU (gloo, torchao's fp8 emulation).

One launch (``_schedule_fp8_runs.py:fits``) runs, in the same two processes, 8 steps each of: ``fsdp:fp8-tensorwise``
without a schedule (the noise reference); ``{0: fp8-tensorwise, 0.5: bf16-mixed}`` (the switch at step 4) audited at
steps 0 and 4, checkpointed every 2 steps; the same schedule resumed from its step-6 checkpoint;
``{0: fp8-rowwise, 4: 32-true}``; ``{0: mxfp8-rceil, 4: bf16-mixed}`` (the weight-wrapper API, bias-free middle
layers).

Tolerances: before the switch the scheduled run is the unswitched run (``==``); the loss change across the switch is
at most the unswitched run's largest step-to-step change; after it, bf16 matmuls instead of emulated float8 ones keep
each loss within 1% of the unswitched run's (measured: 0.3% at most); the resumed run equals the uninterrupted one
exactly (``==`` on every loss and parameter).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

pytest.importorskip("torchao.float8", reason='torchao is not installed (pip install "precision-fsdp[fp8]")')

RUNS = Path(__file__).with_name("_schedule_fp8_runs.py")
SWITCH = 4
AWAY = [[0, "fsdp:fp8-tensorwise"], [0.5, "fsdp:bf16-mixed"]]
RESUME_FROM = "switched/epoch=2-step=6.ckpt"
MIDDLE = ("net.2.weight", "net.4.weight")

# nightly; test_precision_schedule.py switches precision on every change
pytestmark = [pytest.mark.slow, pytest.mark.nightly, needs_fsdp2_on_cpu()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("schedule_fp8")
    plan = [
        {"label": "plain", "spec": "fsdp:fp8-tensorwise"},
        {
            "label": "switched",
            "spec": "fsdp:fp8-tensorwise",
            "schedule": AWAY,
            "audit_at": [0, SWITCH],
            "checkpoints": 1,
        },
        {"label": "resumed", "spec": "fsdp:fp8-tensorwise", "schedule": AWAY, "resume": RESUME_FROM},
        {
            "label": "to32",
            "spec": "fsdp:fp8-rowwise",
            "schedule": [[0, "fsdp:fp8-rowwise"], [SWITCH, "fsdp:32-true"]],
            "audit_at": [SWITCH],
        },
        {
            "label": "mx",
            "spec": "fsdp:mxfp8-rceil",
            "bias_free": 1,
            "schedule": [[0, "fsdp:mxfp8-rceil"], [SWITCH, "fsdp:bf16-mixed"]],
            "audit_at": [0, SWITCH],
        },
    ]
    # PYTHONPATH: the rank code imports the shared fit of its sibling _schedule_runs.py
    env = {"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(RUNS.parent)}
    result: dict[str, Any] = run_ranks(
        f"{RUNS}:fits", {"runs": plan, "out": str(out)}, world=2, threads=1, timeout=900, cwd=out, env=env
    )
    return result


def _by_step(values: dict[str, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in values.items()}


def test_the_loss_is_continuous_across_the_switch(runs: dict[str, Any]) -> None:
    plain, switched = _by_step(runs["plain"]["losses"]), _by_step(runs["switched"]["losses"])
    assert runs["switched"]["error"] is None
    assert sorted(switched) == list(range(8))
    assert {k: switched[k] for k in range(SWITCH)} == {k: plain[k] for k in range(SWITCH)}, "same run before it"
    noise = max(abs(plain[k + 1] - plain[k]) for k in range(7))
    jump = abs(switched[SWITCH] - switched[SWITCH - 1])
    assert jump <= noise, f"loss jumped by {jump} at the switch; the unswitched run's largest step change is {noise}"
    for k in range(SWITCH, 8):  # bf16 matmuls instead of (emulated) float8 ones: close, not equal
        assert switched[k] != plain[k]
        assert abs(switched[k] - plain[k]) <= 0.01 * abs(plain[k]), (k, switched[k], plain[k])


def test_the_float8_layers_become_plain_linear_in_place(runs: dict[str, Any]) -> None:
    switched = runs["switched"]
    before, after = _by_step(switched["before"])[SWITCH], _by_step(switched["after"])[SWITCH]  # around the switch
    assert before["classes"] == {"0": "FSDPLinear", "2": "FSDPFloat8Linear", "4": "FSDPFloat8Linear", "6": "FSDPLinear"}
    assert after["classes"] == dict.fromkeys("0246", "FSDPLinear")
    assert {n for n, t in before["local_types"].items() if t != "Tensor"} == set(MIDDLE)
    assert set(before["local_types"].values()) == {"Tensor", "WeightWithDynamicFloat8CastTensor"}
    assert set(after["local_types"].values()) == {"Tensor"}
    assert after["param_ids"] == before["param_ids"], "the same sharded DTensor Parameter objects"
    assert before["in_optimizer"]
    assert after["in_optimizer"]
    assert len(before["state"]) == 16, "AdamW's exp_avg and exp_avg_sq of 8 parameters"
    assert after["state"] == before["state"], "the same state tensors (ids, storage, values)"


def test_the_audit_shows_fp8_before_and_bf16_mixed_after(runs: dict[str, Any]) -> None:
    from precision_base import resolve

    switched = runs["switched"]
    fp8, bf16 = switched["audits"]
    assert switched["audit_ok"] == [True, True], f"{fp8}\n{bf16}"
    assert fp8.startswith("precision audit of fsdp:fp8-tensorwise, rank 0, 1 optimizer step(s): ok")
    assert "float8 GEMM (float8_e4m3fn operands)  ok" in fp8
    assert "(not floating: not compared)  -                                     uint8" in fp8  # float8 bytes
    assert bf16.startswith("precision audit of fsdp:bf16-mixed, rank 0, 1 optimizer step(s): ok")
    assert (
        "forward parameters  FSDPLinear x4: net.*                       bfloat16 or float32  bfloat16      ok" in bf16
    )
    assert (
        "gathering           all_gather_single x8, 5.3 KiB              bfloat16 or float32  bfloat16      ok" in bf16
    )
    assert "Float8" not in bf16
    assert "float8" not in bf16
    assert "uint8" not in bf16
    gathered = _by_step(switched["gathered"])
    assert [gathered[k] for k in range(8)] == [["torch.bfloat16", "torch.uint8"]] * SWITCH + [["torch.bfloat16"]] * 4
    assert switched["switched_at"] == {str(SWITCH): "fsdp:bf16-mixed"}
    assert switched["precision"] == "bf16-mixed"
    assert switched["table"] == dict(resolve("fsdp:bf16-mixed").dtypes(2).rows())
    assert switched["policies"]
    assert all(row[1:] == ["bfloat16", "float32"] for row in switched["policies"])


def test_a_run_resumed_after_the_switch_equals_the_uninterrupted_one(runs: dict[str, Any]) -> None:
    switched, resumed = runs["switched"], runs["resumed"]
    assert resumed["error"] is None
    assert "epoch=2-step=6.ckpt" in switched["checkpoints"]
    losses = _by_step(resumed["losses"])
    assert sorted(losses) == [6, 7]
    assert losses == {k: _by_step(switched["losses"])[k] for k in (6, 7)}
    assert resumed["params"] == switched["params"]
    first = _by_step(resumed["before"])[7]  # the end of the first resumed step
    assert first["precision"] == "bf16-mixed", "the schedule restored the switched precision on resume"
    assert first["classes"] == dict.fromkeys("0246", "FSDPLinear")
    assert set(first["local_types"].values()) == {"Tensor"}
    assert _by_step(resumed["gathered"]) == {6: ["torch.bfloat16"], 7: ["torch.bfloat16"]}
    assert all(row[1:] == ["bfloat16", "float32"] for row in resumed["policies"])
    assert not [w for w in resumed["warnings"] if "resuming a checkpoint written under precision" in w]


def test_fp8_rowwise_switches_to_32_true(runs: dict[str, Any]) -> None:
    to32 = runs["to32"]
    assert to32["error"] is None
    assert to32["precision"] == "32-true"
    assert to32["audit_ok"] == [True], to32["audits"][0]
    assert to32["audits"][0].startswith("precision audit of fsdp:32-true, rank 0, 1 optimizer step(s): ok")
    assert "all_gather_single x8, 10.6 KiB             float32      float32       ok" in to32["audits"][0]
    gathered = _by_step(to32["gathered"])
    assert [gathered[k] for k in range(8)] == [["torch.bfloat16"]] * SWITCH + [["torch.float32"]] * 4
    before, after = _by_step(to32["before"])[SWITCH], _by_step(to32["after"])[SWITCH]
    assert [before["classes"][k] for k in "24"] == ["FSDPFloat8Linear"] * 2  # rowwise: no weight wrapper
    assert after["classes"] == dict.fromkeys("0246", "FSDPLinear")
    assert after["param_ids"] == before["param_ids"]
    assert after["state"] == before["state"]


def test_mxfp8_weight_wrappers_come_off_at_the_switch(runs: dict[str, Any]) -> None:
    mx = runs["mx"]
    assert mx["error"] is None
    assert mx["precision"] == "bf16-mixed"
    before, after = _by_step(mx["before"])[SWITCH], _by_step(mx["after"])[SWITCH]
    assert {n for n, t in before["local_types"].items() if t != "Tensor"} == set(MIDDLE)
    assert {before["local_types"][n] for n in MIDDLE} == {"MXFP8TrainingWeightWrapperTensor"}
    assert set(after["local_types"].values()) == {"Tensor"}
    assert after["param_ids"] == before["param_ids"]
    assert after["state"] == before["state"]
    assert mx["audit_ok"] == [True, True], mx["audits"]
    assert mx["audits"][0].startswith("precision audit of fsdp:mxfp8-rceil, rank 0, 1 optimizer step(s): ok")
    assert "float8              FSDPLinear x2: net.*  " in mx["audits"][0]  # the MX GEMMs ran float8 operands
    assert "float8 GEMM (float8_e4m3fn operands)" in mx["audits"][0]
    assert mx["audits"][1].startswith("precision audit of fsdp:bf16-mixed, rank 0, 1 optimizer step(s): ok")
    assert "\nfloat8 " not in mx["audits"][1]  # no float8 row after the switch
