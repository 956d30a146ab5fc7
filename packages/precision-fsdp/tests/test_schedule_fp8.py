"""Switching away from fp8 (:mod:`precision_fsdp.float8.switch`) in a real single-process FSDP2 fit on CPU (torchao's
emulation), and what is refused. The 2-process fits (continuity, audit, resume) are in
tests-integration/test_precision_schedule_fp8.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import precision_base
from precision_base import PrecisionSchedule
from precision_fsdp import schedule
from precision_fsdp._compat import fsdp2_cpu_problem
from precision_fsdp.float8 import switch as float8_switch
from precision_testsupport.models import QUIET, TinyRegressor

pytest.importorskip("torchao.float8", reason='torchao is not installed (pip install "precision-fsdp[fp8]")')
pytestmark = pytest.mark.skipif(
    fsdp2_cpu_problem() is not None, reason=f"FSDP2 on CPU needs a newer torch: {fsdp2_cpu_problem()}"
)


def _model() -> TinyRegressor:
    model = TinyRegressor(features=16, samples=128, batch_size=32, optimizer="adamw", lr=1e-3)
    model.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 1))
    return model


def test_a_one_process_fit_switches_away_from_fp8_at_the_step() -> None:
    from lightning.pytorch.callbacks import Callback

    seen: dict[int, Any] = {}

    class Layers(Callback):
        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            seen[int(trainer.global_step)] = (
                type(pl_module.net[2]).__name__,
                type(pl_module.net[2].weight.to_local()).__name__,
                id(pl_module.net[2].weight),
            )

    schedule = PrecisionSchedule({0: "fsdp:fp8-tensorwise", 2: "fsdp:bf16-mixed"})
    plugin = precision_base.resolve("fsdp:fp8-tensorwise", fp8_emulate=True)
    model = _model()
    trainer = precision_base.Trainer(
        precision_plugin=plugin, accelerator="cpu", devices=1, max_steps=4, callbacks=[schedule, Layers()], **QUIET
    )
    trainer.fit(model)
    assert schedule.switched_at == {2: "fsdp:bf16-mixed"}
    # net.2 is no FSDP2 unit of its own here (the Sequential's unit holds it): torch.nn.Linear again, not FSDPLinear
    assert [seen[k][:2] for k in range(4)] == [("Float8Linear", "WeightWithDynamicFloat8CastTensor")] * 2 + [
        ("Linear", "Tensor")
    ] * 2
    assert len({seen[k][2] for k in range(4)}) == 1, "the same sharded Parameter object throughout"
    assert trainer.precision_plugin.precision == "bf16-mixed"
    assert len(model.losses) == 4
    assert all(torch.isfinite(torch.tensor(model.losses)))
    assert not [m for m in model.modules() if "Float8" in type(m).__name__]


def test_restoring_an_unsharded_float8_model_is_refused() -> None:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 16))
    config = Float8LinearConfig(emulate=True, enable_fsdp_float8_all_gather=True)
    convert_to_float8_training(model, config=config)
    with pytest.raises(RuntimeError) as caught:
        float8_switch.restore_linears(model)
    assert str(caught.value) == (
        "the float8 weight wrappers of ['0.weight', '1.weight', '2.weight'] are on parameters that FSDP2 does not "
        "shard; switching away from fp8 works on FSDP2-sharded models only (shard the whole model, e.g. "
        "strategy='auto')"
    )


@pytest.mark.parametrize("target", ["bf16-mixed", "16-mixed", "32-true"])
def test_every_float32_storage_target_is_allowed_from_fp8(target: str) -> None:
    plugin = precision_base.resolve("fsdp:fp8-tensorwise", fp8_emulate=True)
    assert schedule.problem(plugin, target) is None
    assert schedule.problem(plugin, target, current="mxfp8-rceil") is None


def test_fp8_to_another_fp8_or_a_true_precision_is_refused() -> None:
    plugin = precision_base.resolve("fsdp:fp8-tensorwise", fp8_emulate=True)
    assert schedule.problem(plugin, "fp8-rowwise") == (
        "switching from 'fp8-tensorwise' to 'fp8-rowwise' during a run is not supported: torchao converts the Linear "
        "layers to float8 before FSDP2 shards them; train a run under it from the start instead"
    )
    assert "stores the sharded parameters and the optimizer state in float32" in str(
        schedule.problem(plugin, "bf16-true")
    )
