"""Each defect of Lightning 2.6's built-in ``FSDPPrecision`` that this plugin fixes, shown by the same assertion
passing for ours and failing (``xfail(strict=True)``) for the built-in."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from lightning.pytorch.plugins.precision import FSDPPrecision as BuiltinFSDPPrecision
from torch.amp import GradScaler

from precision_fsdp import FSDPPrecision
from precision_testsupport.models import mlp


def _classes(reason: str) -> Any:
    return pytest.mark.parametrize(
        "cls",
        [
            pytest.param(FSDPPrecision, id="precision_fsdp"),
            pytest.param(
                BuiltinFSDPPrecision, id="lightning-builtin", marks=pytest.mark.xfail(strict=True, reason=reason)
            ),
        ],
    )


def _on_cpu(plugin: Any) -> Any:
    if hasattr(plugin, "bind_device"):
        plugin.bind_device("cpu")
    return plugin


@_classes("the built-in reads self.precision before setting it, so it rejects every scaler")
def test_user_scaler_is_used_for_16_mixed(cls: type) -> None:
    scaler = GradScaler("cpu", init_scale=256.0)
    plugin = cls("16-mixed", scaler=scaler)
    assert plugin.scaler is scaler
    assert plugin.state_dict()["scale"] == 256.0


@_classes("the built-in takes no scaler options")
def test_scaler_settings_by_name(cls: type) -> None:
    plugin = cls("16-mixed", init_scale=1024.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=7)
    state = plugin.state_dict()
    assert (state["scale"], state["growth_factor"], state["backoff_factor"], state["growth_interval"]) == (
        1024.0,
        4.0,
        0.25,
        7,
    )


@_classes("the built-in hard-codes torch.autocast('cuda'): on CPU mixed precision silently does nothing")
def test_bf16_mixed_computes_matmuls_in_bf16_on_cpu(cls: type) -> None:
    plugin = _on_cpu(cls("bf16-mixed"))
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    with plugin.forward_context():
        product = a @ b
    assert product.dtype == torch.bfloat16


@_classes("the built-in reduces gradients in bf16 under bf16-mixed")
def test_mixed_reduces_gradients_in_fp32_by_default(cls: type) -> None:
    assert cls("bf16-mixed").mixed_precision_config.reduce_dtype == torch.float32
    assert cls("16-mixed").mixed_precision_config.reduce_dtype == torch.float32


@_classes("the built-in has no reduce_dtype choice")
def test_reduce_dtype_is_a_choice(cls: type) -> None:
    assert cls("bf16-mixed", reduce_dtype=torch.bfloat16).mixed_precision_config.reduce_dtype == torch.bfloat16


@_classes("the built-in raises on every clip-by-norm, even where FSDP2's DTensor norm is exact")
def test_clip_grad_by_norm_on_fsdp2_dtensor_gradients(cls: type, cpu_mesh: Any) -> None:
    from precision_fsdp._compat import DTensor, fully_shard

    model = fully_shard(mlp(), mesh=cpu_mesh)
    model(torch.randn(4, 8)).pow(2).sum().mul(100).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(isinstance(g, DTensor) for g in grads)
    before = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.full_tensor()) for g in grads]))
    assert before > 0.5
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cls("32-true").clip_grad_by_norm(optimizer, 0.5)
    after = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.full_tensor()) for g in grads]))
    torch.testing.assert_close(after, torch.tensor(0.5), rtol=1e-4, atol=1e-6)


@_classes("the built-in always builds ShardedGradScaler('cuda'), which FSDP2 does not need and CPU cannot use")
def test_fsdp2_on_cpu_gets_torch_amp_grad_scaler(cls: type, cpu_mesh: Any) -> None:
    from precision_fsdp._compat import fully_shard

    model = fully_shard(mlp(), mesh=cpu_mesh)
    plugin = cls("16-mixed")
    plugin.connect(model, [], [])
    assert type(plugin.scaler) is GradScaler
    assert plugin.scaler._device == "cpu"
    assert plugin.scaler.is_enabled()
