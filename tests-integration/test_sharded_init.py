"""A model initialised after FSDP2 sharded it over a CPU mesh gets different values on different ranks: the values the
unsharded model gets from the same seed (2 processes, gloo; rank code: ``_sharded_init_runs.py``).

On a CPU mesh torch's DTensor random ops draw every rank's shard from a generator the seed left in the same state, so
Lightning's own materialisation (``init_module(empty_init=True)``, then ``reset_parameters`` on the shards) gives
ranks identical halves of every random parameter; ``FSDP2Strategy`` runs ``reset_parameters`` on full-size tensors
instead. An initialisation the plugin does not run (Lightning's strategy, the loop's own init after setup) is named
in a warning at the first optimizer step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

pytestmark = [pytest.mark.slow, needs_fsdp2_on_cpu()]

RUNS = Path(__file__).with_name("_sharded_init_runs.py")
RANDOM = ["embed.weight", "blocks.0.up.weight", "blocks.0.up.bias", "blocks.1.down.weight", "head.weight"]
CONSTANT = ["blocks.0.norm.weight", "blocks.1.norm.bias"]  # LayerNorm: ones and zeros, the same everywhere


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result: dict[str, Any] = run_ranks(
        f"{RUNS}:runs",
        {"runs": ["fabric-empty-init", "trainer-empty-init", "lightning-empty-init", "loop-init"]},
        world=2, threads=1, timeout=480, cwd=tmp_path_factory.mktemp("init"), env={"PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    return result


@pytest.mark.parametrize("run", ["fabric-empty-init", "trainer-empty-init"])
def test_empty_init_under_fsdp2strategy_gives_each_rank_its_part_of_the_unsharded_values(
    runs: dict[str, Any], run: str
) -> None:
    shards = runs[run]["shards"]
    assert sorted(shards) == sorted(runs["reference"])
    for name in RANDOM:
        assert not shards[name]["same"], f"{name}: both ranks hold the same values"
    for name in CONSTANT:
        assert shards[name]["same"]
    for name, values in runs["reference"].items():
        assert shards[name]["full"] == values, f"{name} differs from the unsharded model's"
    assert runs[run]["warnings"] == []


@pytest.mark.parametrize(
    ("run", "named"),
    [
        # LayerNorm's ones and zeros are alike by design: not named
        ("lightning-empty-init",
         "11 parameter(s) sharded over the CPU device mesh hold the same values on every rank "
         "(embed.weight, blocks.0.up.weight, blocks.0.up.bias, blocks.0.down.weight and 7 more)"),
        # the loop drew every parameter, the norms' too
        ("loop-init",
         "15 parameter(s) sharded over the CPU device mesh hold the same values on every rank "
         "(embed.weight, blocks.0.norm.weight, blocks.0.norm.bias, blocks.0.up.weight and 11 more)"),
    ],
)  # fmt: skip
def test_shards_initialised_alike_elsewhere_are_named_at_the_first_step(
    runs: dict[str, Any], run: str, named: str
) -> None:
    shards = runs[run]["shards"]
    assert all(shards[name]["same"] for name in RANDOM), "torch draws every rank's shard alike on a CPU mesh"
    (warning,) = runs[run]["warnings"]
    assert warning.startswith(f"fsdp:32-true: {named}: they were initialised at random after FSDP2 sharded them")
    assert warning.endswith(
        "Initialise them in the modules' reset_parameters() (FSDP2Strategy runs it on full-size tensors after "
        "init_module(empty_init=True)), or before sharding."
    )
