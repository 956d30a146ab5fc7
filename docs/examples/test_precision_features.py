"""The examples of the telemetry and per-module precision pages run as written on this CPU and print what the
pages say they print."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_guides import run_example


@pytest.mark.slow
def test_precision_monitor_example(tmp_path: Path) -> None:
    out = run_example("precision_monitor.py", tmp_path)
    assert out.splitlines()[-4:] == [
        "1 1024.0 0.0",
        "2 1024.0 0.0",
        "3 512.0 1.0",
        "4 512.0 1.0",
    ]


@pytest.mark.slow
def test_keep_fp32_example(tmp_path: Path) -> None:
    out = run_example("keep_fp32.py", tmp_path)
    assert out.splitlines()[-3:] == [
        "body.0 torch.bfloat16",
        "body.1 torch.float32",
        "lm_head torch.float32",
    ]


@pytest.mark.slow
def test_keep_fp32_deepspeed_example(tmp_path: Path) -> None:
    out = run_example("keep_fp32_deepspeed.py", tmp_path)
    assert out.splitlines()[-3:] == [
        "body.0 torch.bfloat16",
        "body.1 torch.float32",
        "lm_head torch.float32",
    ]


@pytest.mark.slow
def test_fp8_example(tmp_path: Path) -> None:
    pytest.importorskip(
        "torchao.float8",
        reason='torchao is not installed (pip install "precision-fsdp[fp8]")',
    )
    out = run_example("fp8_training.py", tmp_path)
    assert out.splitlines()[-1] == "converted: ['net.2', 'net.4']"
