"""Norm layers with float running statistics (BatchNorm, SyncBatchNorm, tracked InstanceNorm) and Hugging Face's
``_keep_in_fp32_modules`` are kept in float32 by default under FSDP2: which modules, under which precisions, what the
dtype table says, and a real one-rank FSDP2 forward/backward of a conv + BatchNorm net (2-process fits:
tests-integration/test_fsdp_real_models_units.py)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

from precision_base.kit.keep_fp32 import KeepFP32, has_float_running_stats, hf_keep_in_fp32
from precision_fsdp import FSDPPrecision
from precision_fsdp._compat import FSDPModule, fsdp2_cpu_problem
from precision_testsupport.launch import process_group

needs_fsdp2 = pytest.mark.skipif(
    fsdp2_cpu_problem() is not None, reason=f"FSDP2 on CPU needs a newer torch: {fsdp2_cpu_problem()}"
)


@pytest.mark.parametrize(
    ("module", "kept"),
    [
        (nn.BatchNorm1d(4), True),
        (nn.BatchNorm2d(4), True),
        (nn.BatchNorm3d(4), True),
        (nn.SyncBatchNorm(4), True),
        (nn.LazyBatchNorm2d(), True),
        (nn.InstanceNorm2d(4, track_running_stats=True), True),
        (nn.InstanceNorm2d(4), False),
        (nn.BatchNorm2d(4, track_running_stats=False), False),
        (nn.LayerNorm(4), False),
        (nn.GroupNorm(2, 4), False),
    ],
)
def test_layers_with_float_running_statistics(module: nn.Module, kept: bool) -> None:
    assert has_float_running_stats(module) is kept


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3)))


def _kept(plugin: FSDPPrecision, model: nn.Module) -> list[str]:
    return [name for name, _m, _e in plugin._keep.kept(model)]


@pytest.mark.parametrize(("precision", "kept"), [("bf16-mixed", ["bn"]), ("16-mixed", ["bn"]), ("bf16-true", [])])
def test_batchnorm_is_kept_under_mixed_precisions(precision: str, kept: list[str]) -> None:
    assert _kept(FSDPPrecision(precision), ConvNet()) == kept


def test_defaults_can_be_switched_off_and_do_not_count_as_user_entries() -> None:
    plugin = FSDPPrecision("bf16-mixed", keep_fp32_defaults=False)
    assert _kept(plugin, ConvNet()) == []
    assert not any("running statistics" in note for note in plugin.dtypes().notes)
    default = FSDPPrecision("bf16-mixed")
    assert not default._keep, "no user entry: FSDP1 is not refused, repr shows no keep_fp32"
    assert "keep_fp32" not in repr(default)


def test_fsdp1_is_not_refused_for_the_defaults_and_its_table_says_what_fsdp1_does() -> None:
    from lightning.pytorch.strategies import FSDPStrategy

    plugin = FSDPPrecision("bf16-mixed")
    strategy = FSDPStrategy()
    assert plugin.configure_strategy(strategy, accelerator="cuda", devices=2) is strategy
    notes = plugin.dtypes(1).notes
    assert any(
        n.startswith("FSDP1: BatchNorm layers are FSDP-wrapped separately with mixed precision off") for n in notes
    )


def test_dtype_tables_state_each_rule() -> None:
    bf16 = FSDPPrecision("bf16-mixed").dtypes(2).notes
    assert any(n.startswith("layers whose running statistics are float buffers (BatchNorm1d/2d/3d") for n in bf16)
    assert any(
        "_keep_in_fp32_modules_strict (transformers applies _keep_in_fp32_modules for float16 only)" in n for n in bf16
    )
    fp16 = FSDPPrecision("16-mixed").dtypes(2).notes
    assert any(
        "Hugging Face models' _keep_in_fp32_modules and _keep_in_fp32_modules_strict are kept" in n for n in fp16
    )
    true = FSDPPrecision("bf16-true").dtypes(2).notes
    assert not any("running statistics" in n for n in true)
    assert not any("running statistics" in n or "Hugging Face" in n for n in FSDPPrecision("32-true").dtypes(2).notes)
    assert any(n.startswith("FSDP2Strategy's default units (auto_wrap_policy=None): blocks") for n in bf16)


def test_hugging_face_keep_in_fp32_modules_are_honoured_as_transformers_does() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.T5Config(vocab_size=64, d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4)
    holder = nn.Module()
    holder.net = transformers.T5ForConditionalGeneration(config)
    assert hf_keep_in_fp32(holder.net, torch.float16) == ("wo",)
    assert hf_keep_in_fp32(holder.net, torch.bfloat16) == (), "T5 declares no _keep_in_fp32_modules_strict"
    expected = [
        f"net.{part}.block.{i}.layer.{j}.DenseReluDense.wo"
        for part, j in (("encoder", 1), ("decoder", 2))
        for i in (0, 1)
    ]
    assert _kept(FSDPPrecision("16-mixed"), holder) == expected
    assert _kept(FSDPPrecision("16-true"), holder) == expected
    assert _kept(FSDPPrecision("bf16-mixed"), holder) == []
    assert _kept(FSDPPrecision("16-mixed", keep_fp32_defaults=False), holder) == []
    keep = KeepFP32(None, hf_dtype=torch.float16)
    (_name, _module, entry), *_ = keep.kept(holder)
    assert entry == "T5ForConditionalGeneration._keep_in_fp32_modules 'wo'"
    assert keep.is_default(entry)


def _one_step(plugin: FSDPPrecision, model: nn.Module) -> tuple[torch.Tensor, dict[str, Any]]:
    seen: dict[str, Any] = {}
    model.conv.register_forward_hook(lambda m, a, out: seen.__setitem__("conv", out.dtype))
    model.bn.register_forward_hook(lambda m, a, out: seen.__setitem__("bn", (m.weight.dtype, a[0].dtype)), prepend=True)
    x = torch.randn(2, 3, 8, 8)
    with plugin.forward_context():
        loss = model(x).float().pow(2).mean()
    loss.backward()
    return loss, seen


@needs_fsdp2
@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_one_rank_fsdp2_batchnorm_runs_in_float32(precision: str) -> None:
    low = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}[precision]
    with process_group():
        plugin = FSDPPrecision(precision)
        model = ConvNet()
        plugin.fully_shard(model)
        plugin.convert_module(model)
        assert isinstance(model.bn, FSDPModule), "the BatchNorm is an FSDP2 unit of its own"
        loss, seen = _one_step(plugin, model)
        assert torch.isfinite(loss)
        assert seen == {"conv": low, "bn": (torch.float32, torch.float32)}
        assert model.bn.running_mean.dtype == torch.float32
        assert int(model.bn.num_batches_tracked) == 1


@needs_fsdp2
def test_without_the_defaults_the_batchnorm_fails_as_issue_18_saw() -> None:
    with process_group():
        plugin = FSDPPrecision("bf16-mixed", keep_fp32_defaults=False)
        model = ConvNet()
        plugin.fully_shard(model)
        with pytest.raises(RuntimeError, match="expected scalar type BFloat16 but found Float"):
            _one_step(plugin, model)


@needs_fsdp2
def test_a_batchnorm_sharded_without_the_plugin_is_named_in_a_warning() -> None:
    from precision_base import PrecisionPluginWarning
    from precision_fsdp._compat import MixedPrecisionPolicy, fully_shard

    with process_group():
        plugin = FSDPPrecision("bf16-mixed")
        model = ConvNet()
        fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))  # torch's own, one unit
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plugin.convert_module(model)
    messages = [str(w.message) for w in caught if issubclass(w.category, PrecisionPluginWarning)]
    assert messages == [
        "fsdp:bf16-mixed: module 'bn' (BatchNorm2d (float running-statistics buffers)) would be kept in float32 by "
        "default, but FSDP2 sharded it without the plugin (inside another unit or with another policy), so it "
        "computes as that unit does. If its forward fails with 'expected scalar type BFloat16 but found Float' (or "
        "Half), shard through trainer.precision_plugin.fully_shard(...) after "
        "trainer.precision_plugin.mark_keep_fp32(self), or leave sharding to strategy='auto' (FSDP2Strategy)."
    ]


@needs_fsdp2
def test_one_rank_t5_wo_computes_in_float32_under_16_mixed() -> None:
    """T5 declares ``_keep_in_fp32_modules = ["wo"]``: sharded as ``FSDP2Strategy`` does (whole model marked first,
    then its default units), each ``wo`` computes with a float32 weight on float32 inputs, ``wi`` in float16."""
    transformers = pytest.importorskip("transformers")
    from precision_fsdp.sharding.units import units_for_lightning

    config = transformers.T5Config(
        vocab_size=64, d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0
    )
    holder = nn.Module()
    holder.net = transformers.T5ForConditionalGeneration(config)
    seen: dict[str, set[tuple[torch.dtype, torch.dtype]]] = {"wo": set(), "wi": set()}
    for name, module in holder.net.named_modules():
        kind = name.rpartition(".")[2]
        if kind in seen:

            def record(m: nn.Module, args: Any, out: torch.Tensor, kind: str = kind) -> None:
                seen[kind].add((m.weight.dtype, args[0].dtype))

            module.register_forward_hook(record, prepend=True)
    with process_group():
        plugin = FSDPPrecision("16-mixed")
        plugin.prepare_for_sharding(holder)
        for unit in units_for_lightning(holder):
            plugin.fully_shard(unit)
        plugin.fully_shard(holder)
        ids = torch.randint(1, 64, (2, 6))
        with plugin.forward_context():
            loss = holder.net(input_ids=ids, labels=ids).loss
        loss.backward()
    assert torch.isfinite(loss)
    assert seen == {"wo": {(torch.float32, torch.float32)}, "wi": {(torch.float16, torch.float16)}}
