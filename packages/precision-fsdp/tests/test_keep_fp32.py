"""``keep_fp32``: the option's checks, FSDP1 refused, a kept module sharded inside another unit refused, and the
dtypes on a real one-rank FSDP2 module (2-process Trainer fits: tests-integration/test_keep_fp32.py)."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torch import nn

import precision_base
from precision_base.kit.keep_fp32 import KeepFP32
from precision_fsdp import FSDPPrecision
from precision_fsdp._compat import fsdp2_cpu_problem
from precision_fsdp.errors import KeepFP32Error
from precision_testsupport.launch import process_group


def _model() -> nn.Sequential:
    return nn.Sequential(OrderedDict(embed=nn.Linear(4, 8), norm=nn.LayerNorm(8), lm_head=nn.Linear(8, 2)))


@pytest.mark.parametrize("bad", ["", 3, nn.Linear(2, 2), int])
def test_bad_entries_are_refused(bad: object) -> None:
    with pytest.raises(TypeError, match="keep_fp32 entries must be module name patterns"):
        FSDPPrecision("bf16-mixed", keep_fp32=(bad,))  # type: ignore[arg-type]


def test_patterns_match_name_suffixes_and_classes() -> None:
    keep = KeepFP32(("lm_head", "blocks.*.norm", nn.LayerNorm))
    root = nn.Module()
    root.model = nn.Module()
    root.model.lm_head = nn.Linear(2, 2)
    root.model.blocks = nn.ModuleList([nn.Sequential(OrderedDict(norm=nn.Identity(), mlp=nn.Linear(2, 2)))])
    root.ln = nn.LayerNorm(2)
    names = sorted(name for name, _m, _e in keep.kept(root))
    assert names == ["ln", "model.blocks.0.norm", "model.lm_head"]
    assert KeepFP32("head").kept(root) == [], "a pattern matches whole name parts, not a substring"


def test_reachable_by_name_and_shown() -> None:
    plugin = precision_base.resolve("fsdp:bf16-mixed", keep_fp32=("lm_head", nn.LayerNorm))
    assert repr(plugin).endswith("keep_fp32=('lm_head', torch.nn.modules.normalization.LayerNorm))")
    compute = plugin.describe()["keep_fp32 (FSDP2 only)"]["compute"]
    assert compute == "float32 (autocast off inside, floating inputs cast to float32)"
    assert "keep_fp32" in plugin.dtypes().notes[-1]
    assert "keep_fp32 (FSDP2 only)" not in precision_base.resolve("fsdp:bf16-mixed").describe()


def test_fsdp1_is_refused() -> None:
    from lightning.pytorch.strategies import FSDPStrategy

    plugin = FSDPPrecision("bf16-mixed", keep_fp32="lm_head")
    with pytest.raises(KeepFP32Error, match=r"keep_fp32 needs FSDP2 \(fully_shard\): FSDP1"):
        plugin.configure_strategy(FSDPStrategy(), accelerator="cuda", devices=2)


@pytest.mark.skipif(fsdp2_cpu_problem() is not None, reason=f"FSDP2 on CPU needs a newer torch: {fsdp2_cpu_problem()}")
def test_kept_module_sharded_inside_another_unit_is_refused(tmp_path: object) -> None:
    from precision_fsdp._compat import fully_shard

    with process_group():
        model = _model()
        fully_shard(model)  # torch's own: lm_head is inside the root unit, bf16 policy or not
        plugin = FSDPPrecision("bf16-mixed", keep_fp32="lm_head")
        with pytest.raises(KeepFP32Error, match=r"matches module 'lm_head', but FSDP2 sharded it without the plugin's"):
            plugin.convert_module(model)


@pytest.mark.skipif(fsdp2_cpu_problem() is not None, reason=f"FSDP2 on CPU needs a newer torch: {fsdp2_cpu_problem()}")
def test_one_rank_fully_shard_dtypes() -> None:
    with process_group():
        plugin = FSDPPrecision("16-true", keep_fp32=(nn.LayerNorm, "lm_head"))
        model = plugin.convert_module(plugin.fully_shard(_model()))
        assert {n: str(p.dtype) for n, p in model.named_parameters()} == {
            "embed.weight": "torch.float16",
            "embed.bias": "torch.float16",
            "norm.weight": "torch.float32",
            "norm.bias": "torch.float32",
            "lm_head.weight": "torch.float32",
            "lm_head.bias": "torch.float32",
        }
        out = model(torch.randn(3, 4, dtype=torch.float16))
        assert out.dtype == torch.float16, "under *-true a kept module's output goes back to the precision's dtype"
