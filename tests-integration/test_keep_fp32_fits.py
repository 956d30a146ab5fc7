"""``keep_fp32=("lm_head", torch.nn.LayerNorm)`` in real 2-process FSDP2 fits on CPU (default sharding, no
``configure_model``), through ``precision_base.Trainer`` and a plugin resolved by name with the option."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

pytestmark = [
    pytest.mark.slow,
    needs_fsdp2_on_cpu(),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("keep_fp32")
    args = {"specs": ["fsdp:bf16-mixed", "fsdp:bf16-true"]}
    result: dict[str, Any] = run_ranks(
        f"{Path(__file__).with_name('_keep_fp32_runs.py')}:fit", args, world=2, threads=1, timeout=240, cwd=root,
        env={"PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    return result


F32, BF16 = "torch.float32", "torch.bfloat16"


def test_bf16_mixed_kept_modules_compute_in_fp32(runs: dict[str, Any]) -> None:
    seen = runs["fsdp:bf16-mixed"]["seen"]
    # (weight dtype while computing, output dtype, autocast on inside)
    assert seen["embed"] == [[BF16, BF16, True]]
    assert seen["hidden"] == [[BF16, BF16, True]]
    assert seen["norm"] == [[F32, F32, False]]
    assert seen["lm_head"] == [[F32, F32, False]]
    assert set(runs["fsdp:bf16-mixed"]["sharded"].values()) == {F32}


def test_bf16_true_kept_modules_store_and_compute_in_fp32(runs: dict[str, Any]) -> None:
    run = runs["fsdp:bf16-true"]
    assert run["sharded"] == {"embed": BF16, "norm": F32, "hidden": BF16, "lm_head": F32}
    assert run["seen"]["embed"] == [[BF16, BF16, False]]
    assert run["seen"]["norm"] == [[F32, F32, False]]
    assert run["seen"]["lm_head"] == [[F32, F32, False]]


def test_trains_and_show_says_it(runs: dict[str, Any]) -> None:
    for run in runs.values():
        assert all(math.isfinite(x) for x in run["losses"])
        assert run["losses"][-1] < run["losses"][0]
    assert runs["fsdp:bf16-mixed"]["show"]["modules"] == "'lm_head', torch.nn.modules.normalization.LayerNorm"
    assert runs["fsdp:bf16-true"]["show"]["outputs"] == "bfloat16"
