"""The examples of the telemetry and per-module precision pages run as written on this CPU and print what the
pages say they print."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _run(name: str, cwd: Path, **extra_env: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(HERE), **extra_env}
    done = subprocess.run(
        [sys.executable, str(HERE / name)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.mark.slow
def test_precision_monitor_example(tmp_path: Path) -> None:
    out = _run("precision_monitor.py", tmp_path)
    assert out.splitlines()[-4:] == [
        "1 1024.0 0.0",
        "2 1024.0 0.0",
        "3 512.0 1.0",
        "4 512.0 1.0",
    ]


@pytest.mark.slow
def test_keep_fp32_example(tmp_path: Path) -> None:
    out = _run("keep_fp32.py", tmp_path)
    assert out.splitlines()[-3:] == [
        "body.0 torch.bfloat16",
        "body.1 torch.float32",
        "lm_head torch.float32",
    ]


@pytest.mark.slow
def test_keep_fp32_deepspeed_example(tmp_path: Path) -> None:
    out = _run(
        "keep_fp32_deepspeed.py", tmp_path, DS_BUILD_OPS="0", DS_SKIP_CUDA_CHECK="1"
    )
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
    out = _run("fp8_training.py", tmp_path)
    assert out.splitlines()[-1] == "converted: ['net.2', 'net.4']"
