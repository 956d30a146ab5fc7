"""16-mixed on a CPU that emulates float16: one warning at setup naming the precision to use instead, at both doors
(real single-process FSDP2 fits on CPU)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

import precision_base
from precision_base._compat import cpu_native_half
from precision_base.kit.cpu_half import CPU_FP16_EMULATED
from precision_testsupport.models import QUIET, TinyRegressor, mlp

pytestmark = pytest.mark.skipif(
    cpu_native_half()[1], reason="this CPU computes float16 natively (AMX-FP16): there is nothing to warn about"
)
INSTEAD = "bf16-mixed" if cpu_native_half()[0] else "32-true"


def _said(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if CPU_FP16_EMULATED in str(w.message)]


def test_a_trainer_fit_warns_once(fsdp2_on_cpu: None) -> None:
    trainer = precision_base.Trainer(
        precision_plugin="fsdp:16-mixed", accelerator="cpu", devices=1, max_steps=3, **QUIET
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(TinyRegressor(hidden=8, samples=64, batch_size=16))
    said = _said(caught)
    assert len(said) == 1, said
    assert said[0].startswith("fsdp:16-mixed: 16-mixed computes in float16, and ")
    assert f"Use '{INSTEAD}' here" in said[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        precision_base.Trainer(
            precision_plugin="fsdp:bf16-mixed", accelerator="cpu", devices=1, max_steps=2, **QUIET
        ).fit(TinyRegressor(hidden=8, samples=64, batch_size=16))
    assert _said(caught) == []


def test_fabric_warns_once_at_its_first_inputs(fsdp2_on_cpu: None) -> None:
    fabric: Any = precision_base.Fabric(precision_plugin="fsdp:16-mixed", accelerator="cpu", devices=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fabric.launch()
        model = fabric.setup_module(mlp())
        optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
        for _ in range(3):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    said = _said(caught)
    assert len(said) == 1, said
    assert f"Use '{INSTEAD}' here" in said[0]
