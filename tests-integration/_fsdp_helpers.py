"""Helpers for the fsdp integration tests: run ``_fsdp_train.py`` once per precision and cache its result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).parent
TRAIN_SCRIPT = HERE / "_fsdp_train.py"
INF_STEP = 2
"""The 16-mixed run fills rank 1's gradient shard with inf at this step."""

RUN_TIMEOUT_S = 240


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
        cmd = [sys.executable, str(TRAIN_SCRIPT), precision, str(out)]
        if precision == "16-mixed":
            cmd += ["--inf-step", str(INF_STEP)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        if proc.returncode != 0 or not (out / "result.json").exists():
            raise AssertionError(
                f"training run {' '.join(cmd)} failed with exit code {proc.returncode}:\n{proc.stdout[-4000:]}\n"
                f"{proc.stderr[-8000:]}"
            )
        result: dict[str, Any] = json.loads((out / "result.json").read_text())
        return result


def by_step(mapping: dict[str, Any]) -> dict[int, Any]:
    """JSON turned int step keys into strings; turn them back."""
    return {int(k): v for k, v in mapping.items()}
