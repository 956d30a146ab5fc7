"""``keep_fp32=("lm_head", torch.nn.LayerNorm)`` with ``torch_autocast=True`` in a real 2-process DeepSpeed ZeRO-2
fit on DeepSpeed's CPU accelerator (gloo), through ``precision_base.Trainer`` and a plugin resolved by name."""

from __future__ import annotations

import math
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from precision_deepspeed.implementation import deepspeed_has_torch_autocast
from precision_testsupport.launch import run_ranks

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not deepspeed_has_torch_autocast(), reason="the installed DeepSpeed has no torch_autocast config section"
    ),
]

F32, BF16 = "torch.float32", "torch.bfloat16"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    here = Path(__file__).parent
    extensions = Path.home() / ".cache" / "torch_extensions" / f"deepspeed-{metadata.version('deepspeed')}"
    env = {
        "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(here), "OMP_NUM_THREADS": "1",
        "TORCH_EXTENSIONS_DIR": str(extensions), "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1",
    }  # fmt: skip
    result: dict[str, Any] = run_ranks(
        f"{here / '_deepspeed_keep_fp32_runs.py'}:fit", {"spec": "deepspeed:bf16-mixed"}, world=2, threads=1,
        timeout=300, cwd=tmp_path_factory.mktemp("ds_keep_fp32"), env=env,
    )  # fmt: skip
    return result


def test_kept_modules_compute_in_fp32_the_rest_in_bf16(run: dict[str, Any]) -> None:
    seen = run["seen"]  # (weight dtype while computing, output dtype, autocast on inside)
    assert seen["embed"] == [[F32, BF16, True]]
    assert seen["hidden"] == [[F32, BF16, True]]
    assert seen["norm"] == [[F32, F32, False]]
    assert seen["lm_head"] == [[F32, F32, False]]
    assert set(run["stored"].values()) == {F32}
    assert run["zero_stage"] == 2


def test_gradient_reduction_dtype_follows_deepspeeds_class_list(run: dict[str, Any]) -> None:
    # lm_head is a Linear, on DeepSpeed's default lower-precision-safe list: reduced in bf16, as `show` says
    assert run["comm"] == {"embed": BF16, "norm": F32, "hidden": BF16, "lm_head": BF16}
    assert "bfloat16 for parameters of kept modules whose exact class is on" in run["show"]["reduction"]


def test_trains_and_show_says_it(run: dict[str, Any]) -> None:
    assert all(math.isfinite(x) for x in run["losses"])
    assert run["losses"][-1] < run["losses"][0]
    assert run["show"]["modules"] == "'lm_head', torch.nn.modules.normalization.LayerNorm"
