from __future__ import annotations

from collections import OrderedDict, namedtuple

import pytest

torch = pytest.importorskip("torch")

from precision_base.kit.casting import cast_floating, default_dtype  # noqa: E402

Pair = namedtuple("Pair", ["a", "b"])


def test_cast_floating_reaches_every_depth_and_keeps_types() -> None:
    data = {
        "x": torch.ones(2),
        "nested": [torch.ones(1, dtype=torch.float64), (torch.arange(3), "text")],
        "pair": Pair(torch.ones(1), 7),
        "ordered": OrderedDict(y=torch.zeros(1)),
        "flag": torch.tensor([True]),
    }
    out = cast_floating(data, torch.bfloat16)
    assert out["x"].dtype == torch.bfloat16
    assert out["nested"][0].dtype == torch.bfloat16
    assert out["nested"][1][0].dtype == torch.int64
    assert out["nested"][1][1] == "text"
    assert isinstance(out["nested"][1], tuple)
    assert isinstance(out["pair"], Pair)
    assert out["pair"].a.dtype == torch.bfloat16
    assert out["pair"].b == 7
    assert isinstance(out["ordered"], OrderedDict)
    assert out["ordered"]["y"].dtype == torch.bfloat16
    assert out["flag"].dtype == torch.bool
    assert data["x"].dtype == torch.float32, "the input is not modified"


def test_default_dtype_restores_even_on_error() -> None:
    before = torch.get_default_dtype()
    seen = []

    def fail_inside() -> None:
        with default_dtype(torch.float16):
            seen.append(torch.empty(1).dtype)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert seen == [torch.float16]
    assert torch.get_default_dtype() == before


def test_cast_floating_returns_a_tensor_already_in_the_dtype_itself() -> None:
    x, ids = torch.ones(2), torch.arange(2)
    out = cast_floating((x, ids), torch.float32)
    assert out[0] is x
    assert out[1] is ids
    assert cast_floating(x, torch.bfloat16) is not x


def test_default_dtype_restores_what_was_before_when_the_block_set_another() -> None:
    before = torch.get_default_dtype()
    with default_dtype(before):  # already in effect: still restored after the block changed it
        torch.set_default_dtype(torch.float64)
    assert torch.get_default_dtype() == before
    with default_dtype(torch.float16):
        torch.set_default_dtype(before)
        assert torch.empty(1).dtype == before
    assert torch.get_default_dtype() == before
