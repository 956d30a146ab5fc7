"""The real fit of a version-matrix cell: 2 processes on CPU through ``precision_base.Trainer(precision_plugin=...)``.

Every cell of the matrix runs this file for the backends installed in it (a precision-fsdp cell: FSDP2 on gloo under
``ModelParallelStrategy``; a precision-deepspeed cell: DeepSpeed ZeRO-2 on its CPU accelerator), at ``bf16-mixed``
and ``32-true``, so that "passed" in the compatibility table means "trains with these versions", not only "the unit
tests pass". One launch per backend trains both precisions (``_cell_fit.py``): 40 s (FSDP2) and 70 s (DeepSpeed) on
the shared 2 cores at load 14.

What is asserted, per precision: both ranks trained through our plugin class; the network computed in the
precision's compute dtype (bfloat16 under bf16-mixed, float32 under 32-true); the parameters are held as the
plugin's dtype table says (FSDP2: sharded DTensors; DeepSpeed: ZeRO stage 2 with float32 master weights); and the
loss falls (mean of the last 4 steps below 80% of the mean of the first 4; measured on torch 2.13: about 30%).
"""

from __future__ import annotations

import math
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from precision_testsupport.launch import run_ranks

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PRECISIONS = ("bf16-mixed", "32-true")
COMPUTE = {"bf16-mixed": "bfloat16", "32-true": "float32"}
BACKEND_DIST = {"fsdp": "precision-fsdp", "deepspeed": "precision-deepspeed"}
PLUGIN_CLASS = {
    "fsdp": "precision_fsdp.plugin.FSDPPrecision",
    "deepspeed": "precision_deepspeed.plugin.DeepSpeedPrecision",
}


def _installed(dist: str) -> bool:
    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def _cannot_run_here(backend: str) -> str | None:
    """Why this backend cannot train on this CPU with the installed versions, or ``None``."""
    if backend == "fsdp":
        from _fsdp_helpers import fsdp2_cpu_skip_reason

        return fsdp2_cpu_skip_reason()
    return None


def _env(backend: str) -> dict[str, str]:
    if backend != "deepspeed":
        return {}
    from _deepspeed_helpers import extensions_dir

    return {"DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1", "TORCH_EXTENSIONS_DIR": extensions_dir()}


_RUNS: dict[str, dict[str, Any]] = {}
_FAILED: dict[str, BaseException] = {}  # a launch that failed is not repeated for each of the backend's tests


# A cell installs one plugin package: only its backend is collected (a precision-base cell collects nothing here).
@pytest.fixture(params=[b for b in sorted(BACKEND_DIST) if _installed(BACKEND_DIST[b])])
def backend(request: pytest.FixtureRequest) -> str:
    reason = _cannot_run_here(request.param)
    if reason:
        pytest.skip(reason)
    return str(request.param)


@pytest.fixture
def runs(backend: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both precisions of ``backend``, trained once per test session."""
    if backend in _FAILED:
        raise _FAILED[backend]
    if backend not in _RUNS:
        root = tmp_path_factory.mktemp(f"cell-fit-{backend}")
        args = {"backend": backend, "precisions": list(PRECISIONS), "root": str(root)}
        # generous: the first DeepSpeed fit of a cell compiles DeepSpeed's CPU communication op (seen: 9+ minutes on
        # 2 shared cores at load 14); the fit itself takes 40-70 s there
        try:
            _RUNS[backend] = run_ranks(
                f"{HERE / '_cell_fit.py'}:fit", args, world=2, env=_env(backend), log_dir=root, timeout=1800
            )
        except Exception as exc:
            _FAILED[backend] = exc
            raise
    return _RUNS[backend]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_trains_in_two_processes_through_our_plugin(backend: str, runs: dict[str, Any], precision: str) -> None:
    run = runs[precision]
    assert run["world_size"] == 2
    assert run["plugin"] == PLUGIN_CLASS[backend]
    assert run["table"]["compute"] == COMPUTE[precision], run["table"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_computes_in_the_precisions_dtype(backend: str, runs: dict[str, Any], precision: str) -> None:
    assert runs[precision]["compute_dtypes"] == [COMPUTE[precision]]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_parameters_held_as_the_strategy_should(backend: str, runs: dict[str, Any], precision: str) -> None:
    run = runs[precision]
    if backend == "fsdp":
        assert run["strategy"] == "ModelParallelStrategy"
        assert run["param_types"] == ["DTensor"], "every parameter sharded by fully_shard"
        assert run["param_dtypes"] == [run["table"]["parameters"]]
        assert run["param_dtypes"] == ["float32"], "bf16-mixed and 32-true keep float32 parameters"
    else:
        assert run["strategy"] == "DeepSpeedCPUStrategy"
        assert run["zero_stage"] == 2
        assert run["master_dtypes"] == ["float32"], "ZeRO-2 keeps float32 master weights"
        assert run["param_dtypes"] == [COMPUTE[precision]], "DeepSpeed casts the module to the compute dtype"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_loss_falls(backend: str, runs: dict[str, Any], precision: str) -> None:
    losses = runs[precision]["losses"]
    assert len(losses) == 12, "3 epochs x 4 steps per rank"
    assert all(math.isfinite(x) for x in losses), losses
    first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
    assert last < 0.8 * first, f"loss did not fall: {losses}"
