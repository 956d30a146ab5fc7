"""precision_base.kit.keep_fp32: which modules ``keep_fp32`` names, and the float32 forward the plugins install."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torch import nn

from precision_base.kit.keep_fp32 import KeepFP32, install_fp32_forward, is_kept, iter_kept


def _model() -> nn.Module:
    block = nn.Sequential(OrderedDict(norm=nn.LayerNorm(4), proj=nn.Linear(4, 4)))
    return nn.Sequential(OrderedDict(layers=nn.Sequential(block, block), head=nn.Linear(4, 2), lm_head=nn.Linear(4, 1)))


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ("lm_head", ["lm_head"]),
        (("layers.*.norm",), ["layers.0.norm"]),  # the shared block is one module: found once, under its first name
        ((nn.LayerNorm, "head"), ["layers.0.norm", "head"]),  # "head" does not match "lm_head"
        ((), []),
    ],
)
def test_kept_names(entries: object, expected: list[str]) -> None:
    keep = KeepFP32(entries)  # type: ignore[arg-type]
    assert sorted(name for name, _m, _e in keep.kept(_model())) == sorted(expected)
    assert bool(keep) == bool(expected)


def test_bad_entries_are_type_errors() -> None:
    for bad in ("  ", 3, int):
        with pytest.raises(TypeError, match="keep_fp32 entries must be"):
            KeepFP32((bad,))  # type: ignore[arg-type]


def test_fp32_forward_under_autocast_and_facts() -> None:
    model = _model()
    keep = KeepFP32(("lm_head",))
    for _name, module, entry in keep.kept(model):
        install_fp32_forward(module, entry, lambda: "cpu", None)
    x, lm_head, head = torch.randn(2, 4), model.get_submodule("lm_head"), model.get_submodule("head")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert lm_head(x).dtype == torch.float32
        assert head(x).dtype == torch.bfloat16
        assert torch.is_autocast_enabled("cpu")  # restored after the kept module's forward
    assert [name for name, _m in iter_kept(model)] == ["lm_head"]
    assert is_kept(lm_head)
    assert not is_kept(head)
    assert keep.facts(reduction="float32", outputs="float32")["modules"] == "'lm_head'"
