"""Clip-by-norm under FSDP2 across 2 real ranks computes the global gradient norm: the norm and the clipped
gradients of a 2-process ``fsdp:32-true`` fit step equal those of the same step on the unsharded model in one
process (same seed and data; the full batch's gradient is the mean of the ranks' gradients). One 2-process launch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from _fsdp_helpers import needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

RUNS = Path(__file__).with_name("_clip_runs.py")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result: dict[str, Any] = run_ranks(
        f"{RUNS}:fit",
        {},
        world=2,
        threads=1,
        timeout=600,
        cwd=tmp_path_factory.mktemp("clip"),
        env={"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"},
    )
    return result


def _tensors(grads: list[list[float]]) -> list[torch.Tensor]:
    return [torch.tensor(g) for g in grads]


@needs_fsdp2_on_cpu()
def test_clip_by_norm_across_2_ranks_uses_the_unsharded_models_global_norm(run: dict[str, Any]) -> None:
    plugin, reference = run["plugin"], run["reference"]
    assert run["world"] == 2
    assert plugin["dtensor_grads"], "every gradient is a sharded DTensor"
    # the gradients really are the full batch's: the sharded run and the one-process run agree before clipping
    for sharded, plain in zip(_tensors(plugin["before"]), _tensors(reference["before"]), strict=True):
        torch.testing.assert_close(sharded, plain, rtol=1e-5, atol=1e-7)
    assert reference["norm"] > 10 * 0.05, "the norm is well above the clip value, so the step clips"
    torch.testing.assert_close(torch.tensor(plugin["norm"]), torch.tensor(reference["norm"]), rtol=1e-5, atol=0.0)
    for sharded, plain in zip(_tensors(plugin["after"]), _tensors(reference["after"]), strict=True):
        torch.testing.assert_close(sharded, plain, rtol=1e-5, atol=1e-7)
    after = torch.linalg.vector_norm(torch.cat(_tensors(plugin["after"])))
    torch.testing.assert_close(after, torch.tensor(0.05), rtol=1e-4, atol=0.0)


@needs_fsdp2_on_cpu()
def test_one_rank_norm_would_differ(run: dict[str, Any]) -> None:
    """The claim is not vacuous: a rank's own half-batch gradient has a different norm than the global one."""
    half = run["plugin"]["rank_local_norm"]
    assert abs(half - run["reference"]["norm"]) > 1e-3 * run["reference"]["norm"]
