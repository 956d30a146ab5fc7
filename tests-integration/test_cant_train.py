"""Runs that cannot train are refused or warned about: real 2-process FSDP2 runs on CPU (gloo).

Each case runs first with Lightning's own classes, to show the flat loss with no error or warning (the loss of
every step is the first step's, to the printed digit), then through ``precision_base.Fabric`` /
``precision_base.Trainer`` with a precision plugin, to show our error or warning:

* Fabric's first-page pattern ``fabric.setup(model, optimizer)`` under ``ModelParallelStrategy`` (FSDP2's
  ``fully_shard`` replaces every parameter; the optimizer keeps the old ones): ``StaleOptimizerError``;
  ``setup_module`` then ``setup_optimizers`` with an optimizer created before: the same error; the order the
  message gives trains;
* a LightningModule whose optimizer was created in ``__init__``, before ``configure_model`` sharded it: the same
  error after ``configure_optimizers``;
* a loss rebuilt from its value (``torch.tensor(loss.item(), requires_grad=True)``), which leaves every gradient
  ``None``: ``NoGradientWarning`` naming the model's modules, once.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

HERE = Path(__file__).parent

pytestmark = [pytest.mark.slow, needs_fsdp2_on_cpu()]

ENV = {"PYTHONWARNINGS": "ignore", "PYTHONPATH": str(HERE)}


def _flat(losses: list[float]) -> bool:
    return len(losses) == 5 and len(set(losses)) == 1


@pytest.fixture(scope="module")
def fabric_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("cant_train_fabric")
    runs = ["lightning_joint", "ours_joint", "ours_late_optimizer_setup", "ours_separate"]
    runs += ["detached_loss:lightning", "detached_loss:ours"]
    result: dict[str, Any] = run_ranks(
        f"{HERE / '_cant_train_fabric.py'}:all_cases", {"runs": runs}, world=2, threads=1, timeout=400, cwd=out, env=ENV
    )
    return result


@pytest.fixture(scope="module")
def trainer_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("cant_train_trainer")
    runs = [[False, "early_optimizer"], [True, "early_optimizer"], [False, "detached_loss"], [True, "detached_loss"]]
    result: dict[str, Any] = run_ranks(
        f"{HERE / '_cant_train_trainer.py'}:fit_all", {"runs": runs}, world=2, threads=1, timeout=500, cwd=out, env=ENV
    )
    return result


def test_lightning_fabric_joint_setup_trains_nothing(fabric_runs: dict[str, Any]) -> None:
    run = fabric_runs["lightning_joint"]
    assert run["optimizer_holds_model_params"] is False
    assert _flat(run["losses"]), run["losses"]


def test_our_fabric_refuses_joint_setup_with_the_fix(fabric_runs: dict[str, Any]) -> None:
    run = fabric_runs["ours_joint"]
    assert run["error_type"] == "StaleOptimizerError"
    message = run["error"]
    assert message.startswith("fabric.setup(model, optimizer): the optimizer holds 4 of the model's parameters")
    assert "(0.weight, 0.bias, 2.weight, 2.bias)" in message
    assert "model = fabric.setup_module(model); optimizer = fabric.setup_optimizers(" in message


def test_our_fabric_refuses_an_optimizer_created_before_setup_module(fabric_runs: dict[str, Any]) -> None:
    run = fabric_runs["ours_late_optimizer_setup"]
    assert run["error_type"] == "StaleOptimizerError"
    assert "created before fabric.setup_module" in run["error"]
    assert "fabric.setup_optimizers(" in run["error"]


def test_the_order_in_the_message_trains_without_warnings(fabric_runs: dict[str, Any]) -> None:
    run = fabric_runs["ours_separate"]
    assert run["warnings"] == []
    losses = run["losses"]
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses[0] == fabric_runs["lightning_joint"]["losses"][0], "the same model, data and first loss"


def test_fabric_detached_loss_warns_once_with_the_module_names(fabric_runs: dict[str, Any]) -> None:
    lightning, ours = fabric_runs["detached_loss:lightning"], fabric_runs["detached_loss:ours"]
    assert _flat(lightning["losses"])
    assert not [w for w in lightning["warnings"] if "gradient" in w]
    assert _flat(ours["losses"])
    ours_warnings = [w for w in ours["warnings"] if "has a gradient" in w]
    assert len(ours_warnings) == 1, ours["warnings"]
    assert ours_warnings[0].startswith("After fabric.backward(loss) at optimizer step 1, none of the optimizer's 4")
    assert "The model's modules without gradients: 0, 2." in ours_warnings[0]


def test_lightning_trainer_with_an_early_optimizer_trains_nothing(trainer_runs: dict[str, Any]) -> None:
    run = trainer_runs["lightning:early_optimizer"]
    assert run["error"] is None
    assert _flat(run["losses"]), run["losses"]


def test_our_trainer_refuses_an_optimizer_from_before_configure_model(trainer_runs: dict[str, Any]) -> None:
    run = trainer_runs["ours:early_optimizer"]
    assert run["error_type"] == "StaleOptimizerError"
    assert run["losses"] == [], "refused before the first step"
    message = run["error"]
    assert message.startswith("the optimizer from configure_optimizers: the optimizer holds 4 of the model's")
    assert "(net.0.weight, net.0.bias, net.2.weight, net.2.bias)" in message
    assert "Create the optimizer inside configure_optimizers from self.parameters()" in message


def test_trainer_detached_loss_warns_once_with_the_module_names(trainer_runs: dict[str, Any]) -> None:
    lightning, ours = trainer_runs["lightning:detached_loss"], trainer_runs["ours:detached_loss"]
    assert _flat(lightning["losses"])
    assert lightning["warnings"] == []
    assert _flat(ours["losses"])
    assert ours["error"] is None
    assert len(ours["warnings"]) == 1, ours["warnings"]
    assert ours["warnings"][0].startswith("Before optimizer step 1 (after the backward of training_step), none")
    assert "The model's modules without gradients: net.0, net.2." in ours["warnings"][0]
