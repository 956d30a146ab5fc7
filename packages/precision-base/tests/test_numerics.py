"""precision_base.kit.numerics: optimizer hyperparameters that are 0 in their parameters' dtype (real torch
optimizers)."""

from __future__ import annotations

import pytest
import torch

from precision_base import PrecisionPluginWarning
from precision_base.kit.numerics import (
    underflow_message,
    underflowing_hyperparameters,
    warn_underflowing_hyperparameters,
)


def _adam(dtype: torch.dtype, **kwargs: float) -> torch.optim.Optimizer:
    net = torch.nn.Linear(4, 2).to(dtype)
    head = torch.nn.Linear(2, 1).to(dtype)
    return torch.optim.AdamW([{"params": net.parameters()}, {"params": head.parameters(), "eps": 1e-3}], **kwargs)


def test_adam_default_eps_is_zero_in_fp16() -> None:
    (found,) = underflowing_hyperparameters([_adam(torch.float16)])
    assert (found.optimizer, found.group, found.name, found.value, found.dtype) == ("AdamW", 0, "eps", 1e-8, "float16")
    assert found.suggestion == pytest.approx(1e-4)
    assert torch.tensor(found.suggestion, dtype=torch.float16).item() > 0
    message = underflow_message("fsdp:16-true", found)
    assert message.startswith("fsdp:16-true: AdamW parameter group 0 has eps=1e-08, which is 0 in float16")
    assert "Use eps=1e-04 or larger (the smallest normal float16 is 6.1e-05)" in message


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_no_underflow_in_bf16_or_fp32(dtype: torch.dtype) -> None:
    assert underflowing_hyperparameters([_adam(dtype)]) == []


def test_safe_values_and_other_kinds_are_quiet() -> None:
    assert underflowing_hyperparameters([_adam(torch.float16, eps=1e-4, weight_decay=0.0)]) == []
    sgd = torch.optim.SGD(torch.nn.Linear(2, 2).half().parameters(), lr=0.1, momentum=0.9, nesterov=True)
    assert underflowing_hyperparameters([sgd]) == []


def test_tiny_lr_is_reported_too() -> None:
    sgd = torch.optim.SGD(torch.nn.Linear(2, 2).half().parameters(), lr=1e-9)
    assert [(u.name, u.value) for u in underflowing_hyperparameters([sgd])] == [("lr", 1e-9)]


def test_warn_calls_once_per_finding() -> None:
    with pytest.warns(PrecisionPluginWarning, match="parameter group 0 has eps=1e-08") as record:
        warn_underflowing_hyperparameters([_adam(torch.float16)], "fsdp:16-true", _warn)
    assert len(record) == 1


def _warn(message: str, category: type[Warning]) -> None:
    import warnings

    warnings.warn(message, category, stacklevel=2)
