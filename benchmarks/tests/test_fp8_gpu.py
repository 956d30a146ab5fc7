"""benchmarks/fp8_gpu.py skips with the reason where no GPU with FP8 is present (this CPU-only CI)."""

from __future__ import annotations

import fp8_gpu
import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip on a machine without a GPU")
def test_skips_with_the_reason_without_an_fp8_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert fp8_gpu.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fp8 GPU benchmark skipped: ")
    assert "no CUDA GPU is available" in out or "torchao is not installed" in out
