"""``PrecisionSchedule`` on DeepSpeed: refused at ``setup`` with the reason, in a real DeepSpeed Trainer (CPU).

DeepSpeed fixes the precision when ``deepspeed.initialize`` builds the engine (``precision_deepspeed.schedule``), so
the schedule's check at ``setup`` (before the engine is built, before any step) refuses the run, naming why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from precision_testsupport.launch import run_ranks

RUNS = Path(__file__).with_name("_schedule_runs.py")

REASON = (
    "DeepSpeed fixes the precision when deepspeed.initialize builds the engine: it casts the parameters to the "
    "config's fp16/bf16 dtype (DeepSpeedEngine._configure_distributed_model) and wraps the optimizer once for that "
    "dtype (DeepSpeedEngine._configure_optimizer: FP16_Optimizer, BF16_Optimizer or the ZeRO optimizer with its "
    "half-precision parameter groups and float32 master partitions), and the engine cannot change either later. "
    "Train under one DeepSpeed precision per run (a new run under another one can load the weights only: the "
    "optimizer state is saved in its precision mode's layout), or use FSDP2 (fsdp:*), which switches mid-run"
)


def test_a_deepspeed_schedule_is_refused_at_setup_with_the_reason(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    from _deepspeed_helpers import extensions_dir

    env = {"TORCH_EXTENSIONS_DIR": extensions_dir(), "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1",
           "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}  # fmt: skip
    result = run_ranks(
        f"{RUNS}:deepspeed_refusal", {"out": str(tmp_path), "devices": 2}, world=2, threads=1, timeout=900,
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert result["strategy"] == "DeepSpeedCPUStrategy"
    assert result["error"] == (
        "PrecisionScheduleError: precision schedule entry 0.5 (step 4): cannot switch 'deepspeed:bf16-mixed' -> "
        f"'deepspeed:32-true' during a run: {REASON}"
    )
    assert result["steps_run"] == 0
    assert result["precision"] == "bf16-mixed"
    assert result["direct"] == f"DeepSpeedPrecisionError: deepspeed:bf16-mixed -> deepspeed:32-true: {REASON}"
