"""The default FSDP2 units of ``FSDP2Strategy`` (``auto_wrap_policy=None``) on real architectures built from tiny
configs: Hugging Face models held as ``self.net`` in a LightningModule (their ``_no_split_modules``), a LightningModule
with a direct ``nn.ModuleList`` of blocks, tied parameters; pure functions, no processes. The real 2-process fits
and the measured all-gather sizes are in tests-integration/test_fsdp_real_models_units*.py."""

from __future__ import annotations

from typing import Any

import pytest
from lightning.pytorch import LightningModule
from torch import nn

from precision_fsdp.errors import TiedAcrossUnitsError
from precision_fsdp.sharding.units import (
    default_units,
    describe_units,
    is_container_without_forward,
    separate_roots,
    tied_parameters,
    units_for_lightning,
    units_to_shard,
)

transformers = pytest.importorskip("transformers")


class Holder(LightningModule):
    """A LightningModule holding a Hugging Face model as ``self.net``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net


def _llama(**extra: Any) -> nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, **extra,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


def _names(root: nn.Module, units: list[nn.Module]) -> list[str]:
    names = {id(m): n for n, m in root.named_modules()}
    return [names[id(u)] for u in units]


def test_llama_units_are_its_decoder_layers_then_the_model_itself() -> None:
    root = Holder(_llama())
    assert _names(root, default_units(root)) == ["net.model.layers.0", "net.model.layers.1"]
    units = units_for_lightning(root)
    assert _names(root, units) == ["net.model.layers.0", "net.model.layers.1", "net"]
    line = describe_units(root, units)
    assert line == (
        "4 FSDP2 units by the default policy (_no_split_modules: LlamaDecoderLayer): LlamaDecoderLayer x2, "
        "LlamaForCausalLM x1, then the root (Holder)"
    )
    assert separate_roots(units) == set(), "one root of its own (net): FSDP2's default resharding applies"


def test_tied_llama_keeps_embedding_and_head_together_outside_the_blocks() -> None:
    root = Holder(_llama(tie_word_embeddings=True))
    assert list(tied_parameters(root).values()) == [["net.lm_head.weight", "net.model.embed_tokens.weight"]]
    assert _names(root, units_for_lightning(root)) == ["net.model.layers.0", "net.model.layers.1", "net"]


def test_mixtral_units_are_its_decoder_layers() -> None:
    config = transformers.MixtralConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
    )  # fmt: skip
    root = Holder(transformers.MixtralForCausalLM(config))
    assert _names(root, units_for_lightning(root)) == ["net.model.layers.0", "net.model.layers.1", "net"]


def test_bert_embeddings_tied_to_the_decoder_are_not_a_unit_of_their_own() -> None:
    """BertForMaskedLM declares BertEmbeddings and BertLayer; the word embeddings are tied to the MLM decoder
    outside BertEmbeddings, so BertEmbeddings is not a unit and both stay in the model's own unit."""
    config = transformers.BertConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    root = Holder(transformers.BertForMaskedLM(config))
    tied = sorted(tied_parameters(root).values())
    assert ["net.bert.embeddings.word_embeddings.weight", "net.cls.predictions.decoder.weight"] in tied
    assert _names(root, units_for_lightning(root)) == ["net.bert.encoder.layer.0", "net.bert.encoder.layer.1", "net"]


def test_t5_blocks_of_encoder_and_decoder_and_the_shared_embedding_in_the_model_unit() -> None:
    config = transformers.T5Config(
        vocab_size=64, d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4, tie_word_embeddings=True
    )
    root = Holder(transformers.T5ForConditionalGeneration(config))
    (tied,) = tied_parameters(root).values()
    assert "net.shared.weight" in tied
    assert "net.lm_head.weight" in tied
    assert _names(root, units_for_lightning(root)) == [
        "net.encoder.block.0", "net.encoder.block.1", "net.decoder.block.0", "net.decoder.block.1", "net",
    ]  # fmt: skip


class Block(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))  # not split further


class Direct(LightningModule):
    def __init__(self, depth: int = 3, tie: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.blocks = nn.ModuleList([Block() for _ in range(depth)])
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 16, bias=False)
        if tie:
            self.head.weight = self.embed.weight


def test_direct_module_list_blocks_are_units_and_the_list_never_is() -> None:
    root = Direct()
    assert is_container_without_forward(root.blocks)
    units = units_for_lightning(root)
    assert _names(root, units) == ["blocks.0", "blocks.1", "blocks.2", "embed", "norm", "head"]
    assert all(not is_container_without_forward(u) for u in units)
    assert describe_units(root, units) == (
        "7 FSDP2 units by the default policy: Block x3, Embedding x1, LayerNorm x1, Linear x1, then the root (Direct)"
    )
    assert separate_roots(units) == {id(u) for u in units}, "each is its own FSDP2 root: resharded after forward"


def test_a_one_block_list_is_not_repeated_so_the_rule_looks_inside_the_block() -> None:
    root = Direct(depth=1)
    assert _names(root, default_units(root)) == ["blocks.0.mlp.0", "blocks.0.mlp.2"], "two Linears of a Sequential"
    names = _names(root, units_for_lightning(root))
    assert names == ["blocks.0.mlp.0", "blocks.0.mlp.2", "embed", "blocks.0", "norm", "head"], "never the ModuleList"


def test_tied_parameters_across_lightning_children_are_refused_with_the_way_out() -> None:
    root = Direct(tie=True)
    with pytest.raises(TiedAcrossUnitsError, match=r"cannot shard 'embed', 'head' of Direct as separate units") as e:
        units_for_lightning(root)
    assert "Hold the tied modules in one submodule that training_step calls" in str(e.value)
    assert "embed.weight = head.weight" in str(e.value)


def test_tied_parameters_inside_a_submodule_stay_in_its_unit() -> None:
    class Outer(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = Direct(tie=True)

    root = Outer()
    units = units_for_lightning(root)
    assert _names(root, units) == ["model.blocks.0", "model.blocks.1", "model.blocks.2", "model"]


def test_a_block_holding_one_end_of_a_tie_is_not_a_unit() -> None:
    root = Holder(nn.Sequential(Block(), Block(), nn.Linear(8, 8)))
    root.net[2].weight = root.net[0].mlp[0].weight  # tied across a block and the rest
    assert _names(root, default_units(root)) == ["net.1"]


def test_repeated_children_of_nested_containers_at_any_depth() -> None:
    class Deep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stages = nn.ModuleDict({"a": nn.ModuleList([Block(), Block()]), "b": nn.Linear(8, 8)})

    root = Holder(Deep())
    assert _names(root, default_units(root)) == ["net.stages.a.0", "net.stages.a.1"]
    assert _names(root, units_for_lightning(root)) == ["net.stages.a.0", "net.stages.a.1", "net"]


def test_explicit_policies_make_exactly_their_units_and_never_pick_a_forwardless_container() -> None:
    root = Direct()
    assert _names(root, units_to_shard(root, {Block})) == ["blocks.0", "blocks.1", "blocks.2"]
    # a LightningModule without forward: its steps gather the root unit, so no child is added (FSDP1's count)
    assert _names(root, units_for_lightning(root, {Block})) == ["blocks.0", "blocks.1", "blocks.2"]
    tied = Direct(tie=True)
    assert _names(tied, units_for_lightning(tied, {Block})) == [
        "blocks.0", "blocks.1", "blocks.2"
    ], "tied embed and head both stay in the root unit"  # fmt: skip

    class WithForward(Direct):
        def forward(self, x: Any) -> Any:  # a step may call self.embed / self.head directly: they gather alone
            return self.head(self.norm(self.embed(x)))

    with_forward = WithForward()
    assert _names(with_forward, units_for_lightning(with_forward, {Block})) == [
        "blocks.0", "blocks.1", "blocks.2", "embed", "norm", "head"
    ]  # fmt: skip
    # a size threshold reaching the ModuleList (3 x 224 parameters) passes over it instead of handing it to fully_shard
    assert "blocks" not in _names(root, units_to_shard(root, 500))
    with pytest.raises(TypeError, match=r"names ModuleList, a container without forward"):
        units_to_shard(root, {nn.ModuleList})


def test_no_split_classes_apply_inside_the_declaring_model_only() -> None:
    class Mixed(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _llama()
            self.adapters = nn.ModuleList([Block(32), Block(32)])  # outside the HF model: the container rule

    root = Mixed()
    assert _names(root, default_units(root)) == [
        "net.model.layers.0", "net.model.layers.1", "adapters.0", "adapters.1",
    ]  # fmt: skip


def test_strategy_shards_the_default_units_and_logs_them() -> None:
    """``FSDP2Strategy.shard`` on a real one-rank gloo group: the plugin's ``fully_shard`` (called through, and
    recorded) gets exactly these units, the separate roots with ``reshard_after_forward=True``, then the
    LightningModule; rank 0 logs one line naming them."""
    import logging

    from torch.distributed.device_mesh import init_device_mesh

    from precision_fsdp import FSDP2Strategy, FSDPPrecision
    from precision_fsdp._compat import FSDPModule, fsdp2_cpu_problem
    from precision_testsupport.launch import process_group

    if fsdp2_cpu_problem():
        pytest.skip(f"FSDP2 on CPU needs a newer torch: {fsdp2_cpu_problem()}")
    root = Direct()
    names = {id(m): n or "<root>" for n, m in root.named_modules()}
    calls: list[tuple[str, dict[str, Any]]] = []
    plugin = FSDPPrecision("bf16-mixed")
    real = plugin.fully_shard

    def recording(module: nn.Module, **kwargs: Any) -> Any:
        calls.append((names[id(module)], {k: v for k, v in kwargs.items() if k != "mesh"}))
        return real(module, **kwargs)

    plugin.fully_shard = recording  # type: ignore[method-assign]
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("lightning.pytorch")
    logger.addHandler(handler)
    try:
        with process_group():
            strategy = FSDP2Strategy()
            strategy.precision_plugin = plugin
            strategy._device_mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("data_parallel", "tensor_parallel"))
            strategy.shard(root)
            assert [n for n, m in root.named_modules() if isinstance(m, FSDPModule)] == [
                "", "embed", "blocks.0", "blocks.1", "blocks.2", "norm", "head",
            ]  # fmt: skip
    finally:
        logger.removeHandler(handler)
    assert [n for n, _ in calls] == ["blocks.0", "blocks.1", "blocks.2", "embed", "norm", "head", "<root>"]
    assert all(kw == {"reshard_after_forward": True} for n, kw in calls[:-1])
    assert calls[-1][1] == {}
    assert records == [
        "FSDP2Strategy: 7 FSDP2 units by the default policy: Block x3, Embedding x1, LayerNorm x1, Linear x1, then "
        "the root (Direct)"
    ]
