"""What ``recommend --measure`` counts as the training state one process holds: parameters, gradients and optimizer
state, each storage once (the sharded case, counted by its local shard: tests-integration/test_tune_precision.py)."""

from __future__ import annotations

import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from torch import nn

from precision_base.tune.tensor_bytes import tensor_bytes


def _trained(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()


def test_parameters_gradients_and_adams_two_moments_and_step_counters() -> None:
    model = nn.Linear(4, 3)  # 15 float32 values: 60 bytes
    optimizer = torch.optim.Adam(model.parameters())
    assert tensor_bytes(model, [optimizer]) == 60  # before a step: the parameters only
    _trained(model, optimizer)
    steps = sum(s["step"].nbytes for s in optimizer.state.values())  # one counter per parameter
    assert steps > 0
    assert tensor_bytes(model, [optimizer]) == 60 + 60 + 2 * 60 + steps


def test_a_wrapped_optimizer_and_a_parameter_it_also_holds_are_counted_once() -> None:
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _trained(model, optimizer)
    expected = 60 + 60 + 60  # parameters, gradients, momentum buffers
    assert tensor_bytes(model, [optimizer]) == expected
    assert tensor_bytes(model, [LightningOptimizer(optimizer)]) == expected
    assert tensor_bytes(None, [LightningOptimizer(optimizer)]) == expected


def test_views_of_one_flat_buffer_are_one_storage() -> None:
    flat = torch.zeros(20)  # 80 bytes, as FSDP1's flat parameter or DeepSpeed's low-precision group
    model = nn.Module()
    model.a = nn.Parameter(flat[:12].view(3, 4))
    model.b = nn.Parameter(flat[12:15])
    assert tensor_bytes(model, []) == 80


def test_a_bfloat16_model_counts_two_bytes_a_value() -> None:
    model = nn.Linear(4, 3).to(torch.bfloat16)
    assert tensor_bytes(model, []) == 30
