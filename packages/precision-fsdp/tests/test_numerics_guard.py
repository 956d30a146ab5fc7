"""The setup-time numerics guard in real single-process FSDP2 fits on CPU (``precision_base.Trainer``)."""

from __future__ import annotations

import warnings

import pytest
import torch

import precision_base
from precision_base import PrecisionPluginWarning
from precision_base.kit.cpu_half import CPU_FP16_EMULATED
from precision_fsdp._compat import fsdp2_cpu_problem
from precision_testsupport.models import QUIET, TinyRegressor

pytestmark = pytest.mark.skipif(
    fsdp2_cpu_problem() is not None, reason=f"FSDP2 on CPU needs a newer torch: {fsdp2_cpu_problem()}"
)


class _Adam(TinyRegressor):
    def __init__(self, eps: float) -> None:
        super().__init__(hidden=8, samples=64, batch_size=32)
        self.eps = eps

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3, eps=self.eps)


def _fit(spec: str, eps: float) -> list[str]:
    trainer = precision_base.Trainer(precision_plugin=spec, accelerator="cpu", devices=1, max_steps=2, **QUIET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(_Adam(eps))
    said = [str(w.message) for w in caught if issubclass(w.category, PrecisionPluginWarning)]
    return [m for m in said if CPU_FP16_EMULATED not in m]  # the CPU's float16 speed: test_cpu_half_warning.py


def test_fp16_true_warns_about_adam_eps() -> None:
    (message,) = _fit("fsdp:16-true", 1e-8)
    assert message == (
        "fsdp:16-true: Adam parameter group 0 has eps=1e-08, which is 0 in float16 (the dtype of that group's "
        "parameters), so the optimizer computes with eps=0 and its update divides by zero once a second moment is 0 "
        "(inf/NaN weights). Use eps=1e-04 or larger (the smallest normal float16 is 6.1e-05), or a precision that "
        "keeps float32 parameters (e.g. '16-mixed') or bf16."
    )


@pytest.mark.parametrize(("spec", "eps"), [("fsdp:bf16-true", 1e-8), ("fsdp:16-true", 1e-4), ("fsdp:16-mixed", 1e-8)])
def test_no_warning_for_bf16_safe_values_or_fp32_params(spec: str, eps: float) -> None:
    assert _fit(spec, eps) == []
