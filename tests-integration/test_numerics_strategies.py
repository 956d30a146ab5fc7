"""The numerics warnings under every strategy a user can pass, once per run (issue 30, item 5). Nothing is mocked.

FSDP, 2 processes on CPU (gloo), ``fsdp:16-true``, Adam with ``eps=1e-8`` (0 in float16), 3 steps, at both doors:
with the default strategy (``FSDP2Strategy``) and with the user's own ``ModelParallelStrategy`` sharding with
torch's ``fully_shard`` (in ``configure_model`` / the ``parallelize_fn``): the issue's run. Each run's optimizer steps
float16 parameters on both ranks, and the run gives exactly one "eps ... is 0 in float16" warning and one "FSDP with
`16-true` enables computation in lower precision" warning: on rank 0, none on rank 1. Before the fix the issue's run
stayed float32 and said nothing; Fabric gave no numerics warning under any strategy.

DeepSpeed (one process: nothing here needs two), at both doors, ZeRO-2 and ZeRO-3, ``bf16-mixed`` and ``32-true``:
DeepSpeed steps a float32 master copy, so Adam's ``eps=1e-8`` is right there and gets no word, while a
hyperparameter that is 0 even in float32 (``weight_decay=1e-50``) gets exactly one warning. Before the fix DeepSpeed
never ran the check. ``FSDPStrategy`` (FSDP1) needs a GPU: its runs are in
``packages/precision-fsdp/tests/test_numerics_strategies.py``, skipped without CUDA.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _deepspeed_helpers import extensions_dir
from _fsdp_helpers import needs_fsdp2_on_cpu
from _numerics_runs import STEPS

from precision_testsupport.launch import run_ranks

HERE = Path(__file__).parent

pytestmark = pytest.mark.slow

ENV = {"PYTHONWARNINGS": "ignore", "PYTHONPATH": str(HERE)}
FSDP_RUNS = [[door, strategy] for door in ("trainer", "fabric") for strategy in ("default", "torch_fully_shard")]
DEEPSPEED_RUNS = [
    [door, precision, stage] for door in ("trainer", "fabric") for precision, stage in (("bf16-mixed", 2),
                                                                                         ("bf16-mixed", 3),
                                                                                         ("32-true", 2))
]  # fmt: skip
EPS = (
    "fsdp:16-true: Adam parameter group 0 has eps=1e-08, which is 0 in float16 (the dtype of that group's parameters), "
    "so the optimizer computes with eps=0 and its update divides by zero once a second moment is 0 (inf/NaN weights). "
    "Use eps=1e-04 or larger (the smallest normal float16 is 6.1e-05), or a precision that keeps float32 parameters "
    "(e.g. '16-mixed') or bf16."
)


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("numerics_fsdp")
    result: dict[str, Any] = run_ranks(
        f"{HERE / '_numerics_runs.py'}:fsdp_runs", {"runs": FSDP_RUNS}, world=2, threads=1, timeout=500, cwd=out,
        env=ENV,
    )  # fmt: skip
    return result


@pytest.fixture(scope="module")
def deepspeed_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("numerics_deepspeed")
    env = {**ENV, "TORCH_EXTENSIONS_DIR": extensions_dir(), "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"}
    result: dict[str, Any] = run_ranks(
        f"{HERE / '_numerics_runs.py'}:deepspeed_runs", {"runs": DEEPSPEED_RUNS}, world=1, threads=1, timeout=500,
        cwd=out, env=env,
    )  # fmt: skip
    return result


@needs_fsdp2_on_cpu()
@pytest.mark.parametrize(("door", "strategy"), FSDP_RUNS, ids=lambda value: str(value))
def test_fsdp_16_true_warns_once_per_run(fsdp_runs: dict[str, Any], door: str, strategy: str) -> None:
    rank0, rank1 = fsdp_runs[f"{door}:{strategy}"]
    for rank in (rank0, rank1):
        assert rank["stepped"] == [["float16"]] * STEPS, "the optimizer steps float16 parameters: the run is 16-true"
    assert rank0["numerics"] == [EPS]
    assert rank0["lower_precision"] == 1
    assert (rank1["numerics"], rank1["lower_precision"]) == ([], 0), "one warning per run, not per rank"


@pytest.mark.parametrize(
    ("door", "precision", "stage"), DEEPSPEED_RUNS, ids=lambda value: str(value)
)  # fmt: skip
def test_deepspeed_warns_once_about_what_its_float32_step_loses(
    deepspeed_runs: dict[str, Any], door: str, precision: str, stage: int
) -> None:
    run = deepspeed_runs[f"{door}:{precision}:{stage}"]
    assert run["stepped"] == [["float32"]] * STEPS, "DeepSpeed steps float32 (master) parameters"
    assert run["numerics"] == [
        f"deepspeed:{precision}: Adam parameter group 1 has weight_decay=1e-50, which is 0 in float32 (the dtype of "
        "that group's parameters), so the optimizer computes with weight_decay=0. Use weight_decay=1e-37 or larger "
        "(the smallest normal float32 is 1.2e-38)."
    ], "eps=1e-8 is not 0 in float32: no word about it"
