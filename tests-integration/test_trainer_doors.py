"""Real 2-process fits on CPU (gloo) through every Trainer door precision-base opens (FSDP2; DeepSpeed for one).

``_trainer_doors.py:train`` runs in 2 ranks (``precision_testsupport.launch.run_ranks``, started the way torchrun
starts them, so Lightning launches nothing): ``pytorch_lightning``, a user's subclass with the mixin, a user's
subclass with the function form and a name in ``plugins=`` in one run, the ``PL_TRAINER_*`` environment door in a
second run with the variables set in the ranks' environment. No door is given a strategy: the FSDP plugin's
``configure_strategy`` picks FSDP2 for the Trainer's namespace and shards the module by its default policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from precision_testsupport.launch import run_ranks

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
SPEC = "fsdp:bf16-mixed"
DOORS = ["pytorch_lightning", "subclass", "function", "plugins"]


@pytest.fixture(scope="module")
def fits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    pytest.importorskip("precision_fsdp")
    pytest.importorskip("pytorch_lightning")
    logs = tmp_path_factory.mktemp("doors")
    target = f"{HERE / '_trainer_doors.py'}:train"
    records = run_ranks(target, {"spec": SPEC, "doors": DOORS}, world=2, cwd=HERE, log_dir=logs)
    env = {"PL_TRAINER_PRECISION_PLUGIN": SPEC, "PL_TRAINER_MAX_STEPS": "3"}
    records += run_ranks(target, {"spec": SPEC, "doors": ["environment"]}, world=2, cwd=HERE, log_dir=logs, env=env)
    return {record["door"]: record for record in records}


@pytest.mark.parametrize("door", [*DOORS, "environment"])
def test_each_door_trains_sharded_in_two_processes(fits: dict[str, dict[str, Any]], door: str) -> None:
    fit = fits[door]
    assert fit["world_size"] == 2
    assert fit["spec"] == SPEC
    assert fit["is_namespace_precision"]
    assert fit["strategy"] == "FSDP2Strategy"
    assert fit["plugin_namespace"] == fit["strategy_namespace"] == fit["trainer_namespace"]
    assert fit["sharded"], "every parameter is a DTensor: FSDP2 sharded the module"
    assert fit["compute"] == ["bfloat16"]
    assert fit["loss_fell"]
    assert fit["global_step"] == (3 if door == "environment" else 4)


def test_pytorch_lightning_door_builds_the_same_plugin_for_its_namespace(fits: dict[str, dict[str, Any]]) -> None:
    fit = fits["pytorch_lightning"]
    assert fit["trainer_namespace"] == "pytorch_lightning"
    assert fit["plugin"] == "precision_base.namespaces.pytorch_lightning.precision_fsdp.plugin.FSDPPrecision"
    assert fits["subclass"]["plugin"] == "precision_fsdp.plugin.FSDPPrecision"


def test_the_subclass_keeps_its_own_argument(fits: dict[str, dict[str, Any]]) -> None:
    assert fits["subclass"]["run_name"] == "mine"
    assert fits["subclass"]["trainer_namespace"] == "lightning.pytorch"


def test_pytorch_lightning_door_with_deepspeed(tmp_path: Path) -> None:
    """The DeepSpeed plugin through the same door: the same names, its own CPU strategy built for pytorch_lightning."""
    pytest.importorskip("precision_deepspeed")
    pytest.importorskip("pytorch_lightning")
    env = {"DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"}
    target = f"{HERE / '_trainer_doors.py'}:train"
    args = {"spec": "deepspeed:bf16-mixed", "doors": ["pytorch_lightning"]}
    (fit,) = run_ranks(target, args, world=2, cwd=HERE, log_dir=tmp_path, env=env)
    assert fit["plugin"] == "precision_base.namespaces.pytorch_lightning.precision_deepspeed.plugin.DeepSpeedPrecision"
    assert fit["is_namespace_precision"]
    assert fit["plugin_namespace"] == fit["strategy_namespace"] == fit["trainer_namespace"] == "pytorch_lightning"
    assert fit["strategy"] == "DeepSpeedCPUStrategy"
    assert fit["world_size"] == 2
    assert fit["global_step"] == 4
    assert fit["compute"] == ["bfloat16"]
    assert fit["loss_fell"]
