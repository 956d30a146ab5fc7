"""The example of the precision schedules page runs as written on this CPU and prints what the page says."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_guides import run_example


@pytest.mark.slow
def test_precision_schedule_example(tmp_path: Path) -> None:
    out = run_example(
        "precision_schedule.py", tmp_path, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1"
    )
    lines = out.splitlines()[-9:]
    assert [line.split()[:2] for line in lines[:8]] == [
        [str(step), "torch.bfloat16" if step < 4 else "torch.float32"]
        for step in range(8)
    ]
    assert lines[8] == "32-true fsdp:32-true True"
