"""Resuming a Fabric loop restores everything in its state, from either checkpoint layout of ``FSDP2Strategy``
(2 processes, gloo, CPU; ``_fabric_resume.py``): stateful objects get ``load_state_dict`` called, plain values are
replaced, and the remaining steps' losses equal the uninterrupted run's exactly (the same CPU kernels on the same
batches in the same order). Lightning's own sharded load replaces a stateful entry by its saved dict, so a
stateful dataloader would silently start again at its first batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _fabric_resume import SAVE_AT, STEPS
from _fsdp_helpers import needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

HERE = Path(__file__).parent
LAYOUTS = ["folder", "file"]

pytestmark = [pytest.mark.slow, needs_fsdp2_on_cpu()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("fabric_resume")
    result: dict[str, Any] = run_ranks(
        f"{HERE / '_fabric_resume.py'}:runs", {"out": str(out), "layouts": LAYOUTS},
        world=2, threads=1, timeout=400, cwd=out, env={"PYTHONWARNINGS": "ignore", "PYTHONPATH": str(HERE)},
    )  # fmt: skip
    return result


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_resumed_loop_continues_where_it_stopped(runs: dict[str, Any], layout: str) -> None:
    run = runs[layout]
    assert run["first"]["saved_as"] == layout
    assert run["resumed"]["loaded"] == {"cursor_position": SAVE_AT, "state_cursor_is_the_loop_cursor": True}
    whole = {int(k): v for k, v in run["whole"]["losses"].items()}
    resumed = {int(k): v for k, v in run["resumed"]["losses"].items()}
    assert sorted(resumed) == list(range(SAVE_AT, STEPS))
    assert resumed == {step: whole[step] for step in range(SAVE_AT, STEPS)}


@pytest.mark.parametrize("door", ["Trainer", "Fabric"])
def test_a_refused_fsdp1_strategy_that_saves_full_state_dicts_is_told_how_fsdp2_keeps_that(door: str) -> None:
    import lightning.fabric.strategies.fsdp as fabric_fsdp
    import lightning.pytorch.strategies as trainer_strategies

    import precision_base

    make = precision_base.Trainer if door == "Trainer" else precision_base.Fabric
    fsdp1 = trainer_strategies.FSDPStrategy if door == "Trainer" else fabric_fsdp.FSDPStrategy
    keep = "FSDP2Strategy keeps that with FSDP2Strategy(save_distributed_checkpoint=False)"
    for state_dict_type, told in (("full", True), ("sharded", False)):
        with pytest.raises(precision_base.TrainerConfigurationError) as refused:
            make(precision_plugin="fsdp:bf16-mixed", strategy=fsdp1(state_dict_type=state_dict_type), accelerator="cpu")
        assert (keep in str(refused.value)) is told, str(refused.value)
