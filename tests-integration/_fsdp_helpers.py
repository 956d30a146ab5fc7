"""Helpers for the fsdp integration tests: run ``_fsdp_train.py:train`` in 2 ranks once per precision, cached."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from precision_testsupport.launch import run_ranks

HERE = Path(__file__).parent
TRAIN_SCRIPT = HERE / "_fsdp_train.py"
INF_STEP = 2
"""The 16-mixed run fills rank 1's gradient shard with inf at this step."""

RUN_TIMEOUT_S = 240


def fsdp2_cpu_skip_reason() -> str | None:
    """Why FSDP2 cannot run on this CPU with the installed torch (the skip reason of every such test), or ``None``."""
    from precision_fsdp._compat import fsdp2_cpu_problem

    problem = fsdp2_cpu_problem()
    return None if problem is None else f"FSDP2 on CPU needs a newer torch: {problem}"


def needs_fsdp2_on_cpu() -> pytest.MarkDecorator:
    """``skipif`` for tests that run FSDP2 on a CPU, with :func:`fsdp2_cpu_skip_reason` as the reason."""
    reason = fsdp2_cpu_skip_reason()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def cpu_precisions() -> list[str]:
    """The precisions torch can train with on CPU here (fp16 matmul on CPU exists since torch 2.1)."""
    supported = ["32-true", "bf16-mixed", "bf16-true"]
    try:
        a = torch.ones(2, 2, dtype=torch.float16)
        _ = a @ a
        with torch.autocast("cpu", dtype=torch.float16):
            _ = torch.ones(2, 2) @ torch.ones(2, 2)
        supported += ["16-mixed", "16-true"]
    except RuntimeError:
        pass
    return supported


class TrainingRuns:
    """Runs the training script at most once per precision in this session; later calls return the cached result."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._results: dict[str, dict[str, Any]] = {}

    def result(self, precision: str) -> dict[str, Any]:
        if precision not in self._results:
            self._results[precision] = self._run(precision)
        return self._results[precision]

    def _run(self, precision: str) -> dict[str, Any]:
        out = self.root / precision
        out.mkdir(parents=True, exist_ok=True)
        args = {"precision": precision, "out": str(out), "inf_step": INF_STEP if precision == "16-mixed" else -1}
        result: dict[str, Any] = run_ranks(
            f"{TRAIN_SCRIPT}:train", args, world=2, threads=1, timeout=RUN_TIMEOUT_S, cwd=out,
            env={"PYTHONWARNINGS": "ignore"},
        )  # fmt: skip
        return result


def by_step(mapping: dict[str, Any]) -> dict[int, Any]:
    """JSON turned int step keys into strings; turn them back."""
    return {int(k): v for k, v in mapping.items()}
