"""The fence of :mod:`precision_fsdp.float8.switch`: the private torch / torchao attributes that switching away from
fp8 touches (``precision_fsdp._compat.float8_switch``). Its ``FENCED`` entries are part of the package's
``_compat.FENCED``, each checked by ``tests/test_compat.py``. Runs in milliseconds."""

from __future__ import annotations

import pytest

from precision_fsdp import _compat
from precision_fsdp._compat import float8_switch as compat_switch


def test_the_switch_entries_are_in_the_package_fence() -> None:
    assert compat_switch.FENCED
    assert set(compat_switch.FENCED) <= set(_compat.FENCED)
    assert len({entry.where for entry in _compat.FENCED}) == len(_compat.FENCED)


def test_wrapped_inner_finds_the_tensor_inside_torchaos_weight_wrapper() -> None:
    import torch

    fsdp_utils = pytest.importorskip("torchao.float8.fsdp_utils")
    from torchao.float8 import Float8LinearConfig
    from torchao.float8.float8_linear import Float8Linear

    plain = torch.randn(4, 4)
    assert _compat.wrapped_inner(plain) is None
    linear = Float8Linear.from_float(
        torch.nn.Linear(16, 16),
        Float8LinearConfig(emulate=True, enable_fsdp_float8_all_gather=True),
    )
    wrapped = linear.weight.data
    assert isinstance(wrapped, fsdp_utils.WeightWithDynamicFloat8CastTensor)
    inner = _compat.wrapped_inner(wrapped)
    assert inner is not None
    assert not isinstance(inner, fsdp_utils.WeightWithDynamicFloat8CastTensor)
    assert inner.shape == (16, 16)
    assert _compat.plain_class(linear, Float8Linear, torch.nn.Linear) is torch.nn.Linear


def test_a_model_without_float8_is_left_as_it_is() -> None:
    import torch

    from precision_fsdp.float8 import switch as float8_switch

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    assert float8_switch.restore_linears(model) == []
    assert [type(m) for m in model] == [torch.nn.Linear, torch.nn.Linear]
