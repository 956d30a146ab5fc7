"""Runs ``gpu_fsdp_check.py`` (FSDP1 and FSDP2 on CUDA GPUs); skipped here, where torch sees no CUDA GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="FSDP1 needs a CUDA GPU and none is visible to torch")
def test_gpu_fsdp_check_script() -> None:
    script = Path(__file__).with_name("gpu_fsdp_check.py")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert '"precision": "16-mixed"' in proc.stdout
