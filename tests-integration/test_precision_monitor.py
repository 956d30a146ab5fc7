"""``precision_base.PrecisionMonitor`` in real 2-process fits, writing through Lightning's ``CSVLogger``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

RUNS = Path(__file__).with_name("_monitor_runs.py")


def _deepspeed_env() -> dict[str, str]:
    from _deepspeed_helpers import extensions_dir

    return {
        "OMP_NUM_THREADS": "1",
        "TORCH_EXTENSIONS_DIR": extensions_dir(),
        "DS_BUILD_OPS": "0",
        "DS_SKIP_CUDA_CHECK": "1",
    }


def _run(function: str, tmp_path: Path, **args: Any) -> dict[str, Any]:
    env = {"PYTHONWARNINGS": "ignore", **(_deepspeed_env() if function == "deepspeed" else {})}
    result: dict[str, Any] = run_ranks(
        f"{RUNS}:{function}", {"out": str(tmp_path), **args}, world=2, threads=1, timeout=240, cwd=tmp_path, env=env
    )
    return result


@pytest.mark.slow
@needs_fsdp2_on_cpu()
def test_fsdp2_16_mixed_logs_scale_and_skipped_steps(tmp_path: Path) -> None:
    """Inf gradients on rank 1 only at step 2: every rank skips it, the skipped counter moves, the scale halves."""
    result = _run("fsdp", tmp_path, inf_step=2, steps=5)
    assert result["header"] == [
        "precision/grad_norm",
        "precision/loss_scale",
        "precision/nonfinite_grad_steps",
        "precision/skipped_steps",
        "step",
    ]
    rows = {int(r["step"]): r for r in result["rows"]}
    assert sorted(rows) == [1, 2, 3, 4, 5], "one row per optimizer step"
    scale = {s: float(r["precision/loss_scale"]) for s, r in rows.items()}
    skipped = {s: float(r["precision/skipped_steps"]) for s, r in rows.items()}
    assert skipped == {1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0, 5: 1.0}, "the third step (global_step 2 -> 3) was skipped"
    assert scale[3] == scale[2] / 2, "the scale halves on the skipped step"
    assert scale[1] == scale[2] == 65536.0
    assert scale[5] == scale[3]
    assert [float(rows[s]["precision/nonfinite_grad_steps"]) for s in (2, 3)] == [0.0, 1.0]
    norms = [float(rows[s]["precision/grad_norm"]) for s in (1, 2, 4, 5)]
    assert all(0 < n < 1e3 for n in norms), f"unscaled gradient norms, not scaled by 65536: {norms}"
    assert float(rows[3]["precision/grad_norm"]) == float("inf")
    assert result["stats"]["skipped_steps"] == 1.0


@pytest.mark.slow
@needs_fsdp2_on_cpu()
def test_plugin_reporting_nothing_logs_nothing(tmp_path: Path) -> None:
    """``fsdp:bf16-mixed`` (no scaler, no finite check) reports only the clipping norm; ``fsdp:32-true`` likewise."""
    result = _run("fsdp", tmp_path, inf_step=-1, steps=4, interval=2, spec="fsdp:bf16-mixed")
    assert result["header"] == ["precision/grad_norm", "step"]
    assert [int(r["step"]) for r in result["rows"]] == [2, 4], "logged every 2 optimizer steps"


def _cpu_fp16() -> bool:
    from precision_deepspeed import _compat

    return _compat.cpu_supports_fp16()


@pytest.mark.slow
def test_deepspeed_bf16_mixed_logs_skipped_steps_and_norm(tmp_path: Path) -> None:
    result = _run("deepspeed", tmp_path, spec="deepspeed:bf16-mixed", inf_step=-1, steps=3)
    assert result["header"] == [
        "precision/grad_norm",
        "precision/nonfinite_grad_steps",
        "precision/skipped_steps",
        "step",
    ], "bf16 does not scale the loss: no loss_scale column"
    rows = result["rows"]
    assert [int(r["step"]) for r in rows] == [1, 2, 3]
    assert {r["precision/skipped_steps"] for r in rows} == {"0.0"}
    assert all(0 < float(r["precision/grad_norm"]) < 1e3 for r in rows)


@pytest.mark.slow
@pytest.mark.skipif(not _cpu_fp16(), reason="this CPU has no fp16 kernels for DeepSpeed (no AVX512-FP16/AMX)")
def test_deepspeed_16_mixed_overflow_on_one_rank(tmp_path: Path) -> None:
    """hysteresis=1: DeepSpeed lowers the scale at the first overflow (its default 2 waits for a second one)."""
    result = _run("deepspeed", tmp_path, spec="deepspeed:16-mixed", inf_step=2, steps=4, options={"hysteresis": 1})
    assert result["header"] == [
        "precision/grad_norm",
        "precision/loss_scale",
        "precision/nonfinite_grad_steps",
        "precision/skipped_steps",
        "step",
    ]
    rows = {int(r["step"]): r for r in result["rows"]}
    skipped = [float(rows[s]["precision/skipped_steps"]) for s in (1, 2, 3, 4)]
    scale = [float(rows[s]["precision/loss_scale"]) for s in (1, 2, 3, 4)]
    assert skipped == [0.0, 0.0, 1.0, 1.0]
    assert scale[2] == scale[1] / 2, "the scale halves on the skipped step"
    assert scale[3] == scale[2]
