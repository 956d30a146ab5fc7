"""Real 2-process DeepSpeed (ZeRO-2) training on DeepSpeed's CPU accelerator through
``precision_base.Fabric(precision_plugin="deepspeed:...", strategy="auto", accelerator="cpu", devices=2)``.

bf16-mixed and 32-true train in one pair of processes (``_fabric_deepspeed.py``, started by
``precision_testsupport.launch.run_ranks``); each saves with ``fabric.save`` after SAVE_AT steps and a second Fabric
``fabric.load``s it and finishes. Resume tolerance: exact (``==`` on every loss and every fp32 master weight).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from _deepspeed_helpers import extensions_dir
from _fabric_deepspeed import SAVE_AT, STEPS

import precision_base
from precision_testsupport.launch import run_ranks

HERE = Path(__file__).parent
PRECISIONS = ["bf16-mixed", "32-true"]
EXPECTED = {  # module parameters, fp32 master copy, compute, gradient communication, the plugin's config section
    "bf16-mixed": ("bfloat16", "float32", "bfloat16", "bfloat16", {"enabled": False}, {"enabled": True}),
    "32-true": ("float32", "float32", "float32", "float32", {"enabled": False}, {"enabled": False}),
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("fabric_deepspeed")
    env = {
        "PYTHONWARNINGS": "ignore",
        "PYTHONPATH": str(HERE),
        "TORCH_EXTENSIONS_DIR": extensions_dir(),
        "DS_BUILD_OPS": "0",
        "DS_SKIP_CUDA_CHECK": "1",
    }
    result: dict[str, Any] = run_ranks(
        f"{HERE / '_fabric_deepspeed.py'}:train_all", {"precisions": PRECISIONS, "out": str(out)},
        world=2, threads=1, timeout=500, cwd=out, env=env,
    )  # fmt: skip
    return result


@pytest.fixture(params=PRECISIONS)
def run(request: pytest.FixtureRequest, runs: dict[str, Any]) -> dict[str, Any]:
    return {"precision": request.param, **runs[request.param]}


def test_fabric_classes_and_cpu_strategy_were_used(run: dict[str, Any]) -> None:
    full = run["full"]
    assert full["plugin_type"] == "precision_deepspeed.fabric.DeepSpeedPrecision"
    assert full["strategy_type"] == "precision_deepspeed.fabric.DeepSpeedCPUStrategy", "strategy='auto' on CPU"
    assert full["zero_stage"] == 2
    assert full["table"] == dict(precision_base.resolve_fabric(f"deepspeed:{run['precision']}").dtypes().rows())


def test_parameter_compute_and_reduce_dtypes(run: dict[str, Any]) -> None:
    full = run["full"]
    params, master, compute, communication, fp16, bf16 = EXPECTED[run["precision"]]
    assert full["module_params"] == [params], "the engine's module parameters"
    assert full["master"] == [master], "the ZeRO-2 optimizer's flat fp32 partition"
    assert full["seen"]["compute"] == [compute], "dtype of the first Linear's output in forward"
    assert full["seen"]["input"] == [full["table"]["inputs"]], "convert_input cast the inputs"
    assert full["communication"] == communication, "DeepSpeed's gradient communication dtype"
    assert full["output_dtype"] == "float32", "convert_output returns the default dtype"
    assert full["config_section"]["fp16"] == fp16, "the plugin's section of the DeepSpeed config"
    assert full["config_section"]["bf16"] == bf16, "the plugin's section of the DeepSpeed config"


def test_loss_falls(run: dict[str, Any]) -> None:
    losses = [run["full"]["losses"][str(s)] for s in range(STEPS)]
    assert all(b < a for a, b in itertools.pairwise(losses)), losses


def test_save_load_equals_uninterrupted_run(run: dict[str, Any]) -> None:
    full, resumed = run["full"], run["resumed"]
    assert sorted(int(s) for s in resumed["losses"]) == list(range(SAVE_AT, STEPS)), "resumed after the saved step"
    for step in range(SAVE_AT, STEPS):
        assert resumed["losses"][str(step)] == full["losses"][str(step)], f"loss at step {step}"
    assert resumed["weights"] == full["weights"], "full fp32 master weights after the last step"
