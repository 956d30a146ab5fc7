"""FSDP2 units at both doors for a 2-block decoder, and what its blocks are handed (2 processes, gloo, CPU; rank code:
``_rotary_runs.py``).

A block set (``auto_wrap_policy={Block}``) makes exactly those units plus the root, as FSDP1's wrap policy does: 3
units. Before, ``FSDP2Strategy`` made each of the root's other children a unit too (6 under Fabric: the embedding,
the final norm and the head each their own), which cost 12-26 % a step.

Under ``*-mixed``, FSDP2 units inside another unit take their forward inputs as given, as FSDP1 and Lightning's
autocast path do: a decoder's float32 rotary tables, passed by the root into each block, arrive float32, while the
block's parameters are still all-gathered in the low dtype.

Before, every unit cast its floating inputs to ``param_dtype`` (FSDP2's default ``cast_forward_inputs=True``), so the
tables arrived in bfloat16 / float16 and the same model rotated its queries in another dtype under FSDP2 than under
FSDP1; the ``torch-policy`` run (torch's default policy, same dtypes) shows that behaviour in the same test.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import cpu_precisions, needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

pytestmark = [pytest.mark.slow, needs_fsdp2_on_cpu()]

RUNS = Path(__file__).with_name("_rotary_runs.py")
DOORS = ["fabric-auto", "fabric-blocks", "fabric-loop", "trainer-auto", "trainer-blocks"]
LOW = {"bf16-mixed": "bfloat16", "16-mixed": "float16"}


@pytest.fixture(scope="module", params=[p for p in LOW if p in cpu_precisions()])
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result: dict[str, Any] = run_ranks(
        f"{RUNS}:runs", {"precision": request.param, "runs": [*DOORS, "torch-policy"]}, world=2, threads=1,
        timeout=480, cwd=tmp_path_factory.mktemp("rotary"), env={"PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    result["precision"] = request.param
    return result


@pytest.mark.parametrize("door", DOORS)
def test_blocks_get_float32_rotary_tables_and_gather_their_weights_in_the_low_dtype(
    runs: dict[str, Any], door: str
) -> None:
    low = LOW[runs["precision"]]
    run = runs[door]
    assert run["calls"] >= 2 * 3, "both blocks ran in every step"
    assert run["seen"] == [{"cos": "float32", "rotation": "float32", "sin": "float32", "weight": low}]
    assert all(math.isfinite(loss) for loss in run["losses"]), run["losses"]


def test_torchs_default_policy_casts_the_tables_which_the_plugin_no_longer_does(runs: dict[str, Any]) -> None:
    low = LOW[runs["precision"]]
    assert runs["torch-policy"]["seen"] == [{"cos": low, "rotation": low, "sin": low, "weight": low}]


@pytest.mark.parametrize(
    ("run", "units"),
    [("fabric-blocks", 3), ("fabric-loop", 3), ("fabric-auto", 3), ("trainer-blocks", 3), ("trainer-auto", 4)],
)
def test_a_block_set_makes_those_units_plus_the_root(runs: dict[str, Any], run: str, units: int) -> None:
    """Fabric: 2 blocks + the model. Trainer with a block set: 2 blocks + the LightningModule (it defines no
    forward: its steps gather the root unit). Trainer's default: 2 blocks, the decoder held as ``self.net`` (the
    FSDP2 root of its part) and the LightningModule."""
    assert runs[run]["units"] == units


def test_the_strategys_block_set_trains_as_the_loops_own_sharding(runs: dict[str, Any]) -> None:
    assert runs["fabric-blocks"]["losses"] == runs["fabric-loop"]["losses"]
    assert runs["fabric-auto"]["losses"] == runs["fabric-loop"]["losses"], "the default units are the blocks too"
