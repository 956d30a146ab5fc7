"""The fence of :mod:`precision_fsdp.float8_switch`: each private torch / torchao attribute that switching away from
fp8 touches (``precision_fsdp._compat_float8_switch.FENCED``) is still as expected. Runs in milliseconds."""

from __future__ import annotations

import pytest

from precision_base.fence import Fenced
from precision_fsdp import _compat_float8_switch


@pytest.mark.parametrize("entry", _compat_float8_switch.FENCED, ids=lambda e: e.where)
def test_fenced_symbol_is_as_expected(entry: Fenced) -> None:
    problem = entry.problem()
    if problem is not None:
        pytest.fail(problem, pytrace=False)


def test_wrapped_inner_finds_the_tensor_inside_torchaos_weight_wrapper() -> None:
    import torch

    fsdp_utils = pytest.importorskip("torchao.float8.fsdp_utils")
    from torchao.float8 import Float8LinearConfig
    from torchao.float8.float8_linear import Float8Linear

    plain = torch.randn(4, 4)
    assert _compat_float8_switch.wrapped_inner(plain) is None
    linear = Float8Linear.from_float(
        torch.nn.Linear(16, 16),
        Float8LinearConfig(emulate=True, enable_fsdp_float8_all_gather=True),
    )
    wrapped = linear.weight.data
    assert isinstance(wrapped, fsdp_utils.WeightWithDynamicFloat8CastTensor)
    inner = _compat_float8_switch.wrapped_inner(wrapped)
    assert inner is not None
    assert not isinstance(inner, fsdp_utils.WeightWithDynamicFloat8CastTensor)
    assert inner.shape == (16, 16)
    assert _compat_float8_switch.plain_class(linear, Float8Linear, torch.nn.Linear) is torch.nn.Linear


def test_a_model_without_float8_is_left_as_it_is() -> None:
    import torch

    from precision_fsdp import float8_switch

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    assert float8_switch.restore_linears(model) == []
    assert [type(m) for m in model] == [torch.nn.Linear, torch.nn.Linear]
