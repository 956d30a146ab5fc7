"""A ``configure_model`` that shards the LightningModule itself (``fully_shard(self)``) trains, validates and predicts
(issue 18): the plugin makes the step methods gather the LightningModule's own FSDP2 unit, which Lightning never
calls. 2 gloo ranks; see ``_fsdp_root_unit_runs.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

pytestmark = [needs_fsdp2_on_cpu(), pytest.mark.slow]

RANKS = Path(__file__).parent / "_fsdp_root_unit_runs.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("root_unit")
    result: dict[str, Any] = run_ranks(
        f"{RANKS}:runs", {"out": str(out)}, world=2, threads=1, timeout=600, cwd=out, env={"PYTHONWARNINGS": "ignore"}
    )
    return result


def test_without_the_plugins_step_gathering_the_embedding_stays_a_dtensor(runs: dict[str, Any]) -> None:
    """What a user saw before: the root unit's parameters were never gathered."""
    error = runs["fsdp:32-true/unpatched"].get("error", "")
    assert "mixed torch.Tensor and DTensor" in error, runs["fsdp:32-true/unpatched"]


@pytest.mark.parametrize("spec", ["fsdp:32-true", "fsdp:bf16-mixed"])
def test_a_self_sharded_lightning_module_trains_validates_and_predicts(runs: dict[str, Any], spec: str) -> None:
    run = runs[f"{spec}/root"]
    assert "error" not in run, run.get("error")
    assert len(run["losses"]) == 4
    assert run["losses"][-1] < run["losses"][0], run["losses"]
    assert run["validate"]["val_loss"] > 0
    assert len(run["predict"]) == 2  # 16 samples, 2 ranks, batch 4: 2 batches on rank 0
    (line,) = run["lines"]
    assert line.startswith("NoForward is itself an FSDP2 unit (fully_shard(self) in configure_model) holding 3 ")
    assert "embed.weight" in line
    assert "training_step, validation_step, predict_step" in line


def test_the_gathered_root_unit_trains_exactly_as_separate_units(runs: dict[str, Any]) -> None:
    """The embedding and head in the root unit (gathered by the step methods) get the same gradients, reduced the
    same way, as with units of their own: equal losses and weights."""
    root, units = runs["fsdp:32-true/root"], runs["fsdp:32-true/units"]
    assert "error" not in units, units.get("error")
    assert units["lines"] == []  # nothing left in the root unit: nothing to do
    assert root["losses"] == units["losses"]
    assert root["params"] == units["params"]
