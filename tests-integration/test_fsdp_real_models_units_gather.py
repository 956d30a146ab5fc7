"""How many parameter bytes FSDP2 all-gathers at once under ``FSDP2Strategy``'s default units, measured by hooks on
real models: a tiny Hugging Face Llama held as ``self.net`` (and Mixtral, BERT, T5) and a LightningModule with a
direct ``nn.ModuleList`` of blocks, each sharded exactly as ``FSDP2Strategy.shard`` does (the plugin's
``fully_shard`` on each unit of ``units_for_lightning``, then the LightningModule) on a real one-rank gloo group.

Per FSDP2 unit, a forward pre-hook registered after FSDP2's own (which all-gathers the unit's parameters) adds up the
bytes of the unit's parameters that are unsharded at that moment: that is the unit's all-gather. A pre-hook on every
module adds up all unsharded parameter bytes of the model: the peak during the forward. "previous" is the rule
before issue 18 (each direct child of the LightningModule with parameters is one unit).

Run as a script to print the table in docs/guides/fsdp.md::

    OMP_NUM_THREADS=1 python tests-integration/test_fsdp_real_models_units_gather.py
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from _fsdp_helpers import needs_fsdp2_on_cpu

pytestmark = [needs_fsdp2_on_cpu()]

SPEC = "bf16-mixed"


class HFModule(nn.Module):
    """Stands for a LightningModule holding a Hugging Face model as ``self.net`` (the sharding code sees only
    ``nn.Module``; Lightning calls ``training_step``, which calls ``self.net``)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net


def tiny(name: str) -> nn.Module:
    """The tiny Hugging Face models (hidden 32-64, 2 layers), built from configs; no weights downloaded."""
    import transformers as tf

    torch.manual_seed(0)
    if name == "llama":
        return tf.LlamaForCausalLM(
            tf.LlamaConfig(
                vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2,
            )
        )  # fmt: skip
    if name == "mixtral":
        return tf.MixtralForCausalLM(
            tf.MixtralConfig(
                vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
            )
        )  # fmt: skip
    if name == "bert":
        return tf.BertForMaskedLM(
            tf.BertConfig(
                vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
            )
        )
    if name == "t5":
        return tf.T5ForConditionalGeneration(
            tf.T5Config(
                vocab_size=256,
                d_model=32,
                d_ff=64,
                d_kv=8,
                num_layers=2,
                num_heads=4,
                decoder_start_token_id=0,
                pad_token_id=0,
            )
        )
    raise ValueError(name)


def _forward(name: str, root: nn.Module) -> Callable[[], torch.Tensor]:
    ids = torch.randint(0, 256, (2, 12))
    if name == "modulelist":
        x = torch.randn(4, 8)
        return lambda: root.head(_blocks(root, root.embed(x))).float().pow(2).mean()
    if name == "t5":
        return lambda: root.net(input_ids=ids, labels=ids).loss
    return lambda: root.net(input_ids=ids, labels=ids).loss


def _blocks(root: nn.Module, h: torch.Tensor) -> torch.Tensor:
    for block in root.blocks:
        h = block(h)
    return h


def build(name: str) -> nn.Module:
    if name == "modulelist":
        from _fsdp_real_models_units_runs import ListModule

        torch.manual_seed(0)
        return ListModule(width=64, depth=4)
    return HFModule(tiny(name))


def previous_default(root: nn.Module) -> Callable[..., bool]:
    """The default policy before issue 18: each direct child of the root that has parameters is one unit."""
    children = {id(child) for child in root.children()}

    def policy(module: nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
        return module is root if recurse else id(module) in children and nonwrapped_numel > 0

    return policy


def measure(name: str, rule: str) -> dict[str, Any]:
    """Shard model ``name`` by ``rule`` (``"default"`` or ``"previous"``) as ``FSDP2Strategy.shard`` does, run one
    forward and backward under the plugin's autocast, and return the units and the gathered bytes."""
    from torch.distributed.device_mesh import init_device_mesh

    from precision_fsdp import FSDPPrecision
    from precision_fsdp._compat import DTensor, FSDPModule
    from precision_fsdp.sharding.units import describe_units, separate_roots, units_for_lightning
    from precision_testsupport.launch import process_group

    with process_group():
        root = build(name)
        policy = None if rule == "default" else previous_default(root)
        plugin = FSDPPrecision(SPEC)
        mesh = init_device_mesh("cpu", (1,))
        plugin.prepare_for_sharding(root)
        units = units_for_lightning(root, policy)
        described = describe_units(root, units, policy)
        roots = separate_roots(units) if rule == "default" else set()
        for unit in units:
            plugin.fully_shard(unit, mesh=mesh, **({"reshard_after_forward": True} if id(unit) in roots else {}))
        plugin.fully_shard(root, mesh=mesh)
        plugin.convert_module(root)

        fsdp_modules = [(n, m) for n, m in root.named_modules() if isinstance(m, FSDPModule)]
        fsdp_ids = {id(m) for _, m in fsdp_modules}

        def managed(unit: nn.Module) -> list[tuple[nn.Module, str]]:
            """(module, parameter name) of the parameters ``unit``'s FSDP2 group holds (not a nested unit's)."""
            out: list[tuple[nn.Module, str]] = []

            def visit(module: nn.Module) -> None:
                out.extend((module, p) for p in module._parameters if module._parameters[p] is not None)
                for child in module.children():
                    if id(child) not in fsdp_ids:
                        visit(child)

            visit(unit)
            return out

        def unsharded_bytes(pairs: list[tuple[nn.Module, str]]) -> int:
            seen: dict[int, int] = {}
            for module, pname in pairs:
                p = module._parameters[pname]
                if p is not None and not isinstance(p, DTensor):
                    seen[id(p)] = p.numel() * p.element_size()
            return sum(seen.values())

        gathers: dict[str, int] = {}
        peak = [0]
        every = [(m, p) for m in root.modules() for p in m._parameters if m._parameters[p] is not None]
        for unit_name, unit in fsdp_modules:
            pairs = managed(unit)

            def record(module: nn.Module, args: Any, pairs: Any = pairs, unit_name: str = unit_name) -> None:
                gathers[unit_name or "<root>"] = max(gathers.get(unit_name or "<root>", 0), unsharded_bytes(pairs))

            unit.register_forward_pre_hook(record)  # after FSDP2's pre-forward hook (prepended), so gathered
        for module in root.modules():
            module.register_forward_pre_hook(lambda m, a: peak.__setitem__(0, max(peak[0], unsharded_bytes(every))))

        loss_of = _forward(name, root)
        with plugin.forward_context():
            loss = loss_of()
        loss.backward()
        total = sum(p.numel() for p in root.parameters()) * torch.tensor([], dtype=plugin.param_dtype).element_size()
        return {
            "units": described,
            "gathers": gathers,
            "largest": max(gathers.values()),
            "peak_forward": peak[0],
            "model_bytes": total,
            "loss_finite": bool(torch.isfinite(loss.detach()).item()),
        }


def _part_bytes(*modules: nn.Module) -> int:
    params = {id(p): p for m in modules for p in m.parameters()}
    return sum(p.numel() for p in params.values()) * 2  # bf16


def test_llama_gathers_one_block_or_the_embeddings_and_head_at_once() -> None:
    """Before: the Hugging Face model held as ``self.net`` was one unit, gathered whole. Now: the largest gather is
    one LlamaDecoderLayer or the model's own embeddings + final norm + head, and the forward never holds more than
    those two unsharded at once."""
    now, before = measure("llama", "default"), measure("llama", "previous")
    assert now["loss_finite"]
    assert before["largest"] == before["model_bytes"], "the whole model was one unit"
    net = build("llama").net
    block = _part_bytes(net.model.layers[0])
    rest = _part_bytes(net.model.embed_tokens, net.lm_head, net.model.norm)
    assert now["largest"] == max(block, rest)
    assert now["peak_forward"] == block + rest < before["model_bytes"]
    assert set(now["gathers"]) == {"net", "net.model.layers.0", "net.model.layers.1"}, "no root forward (Lightning)"


def test_module_list_blocks_are_resharded_after_their_forward() -> None:
    """The blocks of a direct ModuleList are FSDP2 roots of their own (Lightning runs no root forward); sharded with
    reshard_after_forward=True, the forward holds one block at a time, not all of them."""
    now = measure("modulelist", "default")
    model = build("modulelist")
    block = _part_bytes(model.blocks[0])
    assert now["largest"] == block
    assert now["peak_forward"] == block < now["model_bytes"]


def main() -> None:
    rows = []
    for name in ("llama", "mixtral", "bert", "t5", "modulelist"):
        before, now = measure(name, "previous"), measure(name, "default")
        rows.append((name, before, now))
        print(f"{name}: now {now['units']}", flush=True)
    print(
        "\n| model | parameter bytes (bf16) | largest all-gather before | largest all-gather now "
        "| peak unsharded in forward before / now |"
    )
    print("|---|---|---|---|---|")
    for name, before, now in rows:
        print(
            f"| {name} | {now['model_bytes']:,} | {before['largest']:,} | {now['largest']:,} | "
            f"{before['peak_forward']:,} / {now['peak_forward']:,} |"
        )


if __name__ == "__main__":
    main()
