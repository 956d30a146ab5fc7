"""DeepSpeed under Fabric with ``fabric.setup(model)`` and the optimizer set up later: a clear refusal at
``setup(model)`` naming ``fabric.setup(model, optimizer)``, where DeepSpeed itself stopped with "AssertionError: zero
stage 2 requires an optimizer" (``_deepspeed_setup_alone.py``, one process on CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _deepspeed_helpers import extensions_dir

from precision_deepspeed.errors import setup_alone_error
from precision_testsupport.launch import run_ranks

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("deepspeed_setup_alone")
    env = {"PYTHONWARNINGS": "ignore", "PYTHONPATH": str(HERE), "TORCH_EXTENSIONS_DIR": extensions_dir(),
           "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"}  # fmt: skip
    result: dict[str, Any] = run_ranks(
        f"{HERE / '_deepspeed_setup_alone.py'}:runs", {}, world=1, threads=1, timeout=300, cwd=out, env=env
    )
    return result


@pytest.mark.parametrize("door", ["precision_base", "lightning"])
def test_stage_2_refuses_a_model_set_up_alone_naming_the_joint_setup(runs: dict[str, Any], door: str) -> None:
    said = runs[f"{door}:2"]
    assert said == f"DeepSpeedPrecisionError: {setup_alone_error(2)}"
    assert "fabric.setup(model, optimizer)" in said


@pytest.mark.parametrize("door", ["precision_base", "lightning"])
def test_stage_3_sets_up_a_model_alone_for_inference(runs: dict[str, Any], door: str) -> None:
    assert runs[f"{door}:3"] == "set up"
