"""The Fabric page's example runs as written on this CPU-only machine (2 processes) and prints what the page says."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_guides import run_example


@pytest.mark.slow
def test_fabric_guide_example(tmp_path: Path) -> None:
    # torch may abort a finished 2-process run at exit (test_guides.TEARDOWN_ABORT); what it printed decides
    out = run_example("fabric_guide.py", tmp_path, teardown_abort_ok=True)
    assert (
        "fsdp:bf16-mixed ModelParallelStrategy parameters torch.float32 loss falls True"
        in out
    ), out
    assert "loaded step 4" in out, out
    assert (tmp_path / "checkpoint").is_dir(), (
        "fabric.save wrote a distributed checkpoint folder"
    )
