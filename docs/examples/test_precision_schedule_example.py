"""The example of the precision schedules page runs as written on this CPU and prints what the page says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_precision_schedule_example(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(HERE),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, str(HERE / "precision_schedule.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"precision_schedule.py failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    lines = done.stdout.splitlines()[-9:]
    assert [line.split()[:2] for line in lines[:8]] == [
        [str(step), "torch.bfloat16" if step < 4 else "torch.float32"]
        for step in range(8)
    ]
    assert lines[8] == "32-true fsdp:32-true True"
