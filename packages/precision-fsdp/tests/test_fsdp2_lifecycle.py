"""Unit tests of FSDP2Strategy's lifecycle pieces: activation checkpointing, resharding after a forward that needs no
backward (``toggle_optimizer``), sharding once, and the whole model seen before ``configure_model`` shards parts of
it. The real 2-process Trainer runs are in tests-integration/test_fsdp2_lifecycle.py."""

from __future__ import annotations

import copy
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

from precision_fsdp import FSDP2Strategy, FSDPPrecision
from precision_fsdp._compat import DTensor, configure_model_counted_as_overridden
from precision_fsdp.sharding.strategy import (
    apply_activation_checkpointing,
    checkpoint_classes,
    is_checkpointed,
    reshard_after_gradless_forward,
)


class Block(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x + self.fc(self.norm(x))


class Outer(nn.Module):
    """A Block holding a Block: only the outer one is checkpointed."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), Block(), Block(), nn.Linear(8, 1))


# -- activation checkpointing ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [Block, (Block,), [Block], {Block}])
def test_activation_checkpointing_takes_a_class_or_a_collection(value: Any) -> None:
    assert checkpoint_classes(value) == (Block,)
    assert checkpoint_classes(None) == ()


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("Block", "pass a torch.nn.Module subclass or a collection of them"),
        ((), "pass a torch.nn.Module subclass"),
        ((int,), "pass a torch.nn.Module subclass"),
        (Block(), "pass a torch.nn.Module subclass"),
        ((nn.ModuleList,), "names ModuleList, which has no forward to recompute"),
    ],
)
def test_activation_checkpointing_of_the_wrong_kind_is_refused_at_construction(value: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        FSDP2Strategy(activation_checkpointing=value)


def test_checkpointed_blocks_recompute_and_give_the_same_gradients() -> None:
    plain, checkpointed = _model(), _model()
    assert apply_activation_checkpointing(checkpointed, (Block,)) == ["1", "2"]
    x = torch.randn(3, 4)
    for model in (plain, checkpointed):
        model(x).sum().backward()
    assert [plain[1].calls, plain[2].calls] == [1, 1]
    assert [checkpointed[1].calls, checkpointed[2].calls] == [2, 2], "forward, then recomputed in backward"
    for a, b in zip(plain.parameters(), checkpointed.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    assert list(plain.state_dict()) == list(checkpointed.state_dict()), "parameter names do not change"


def test_activation_checkpointing_is_idempotent_outermost_only_and_copied_with_the_model() -> None:
    model = nn.Sequential(Outer(), Block())
    assert apply_activation_checkpointing(model, (Block, Outer)) == ["0", "1"]
    assert apply_activation_checkpointing(model, (Block, Outer)) == ["0", "1"], "a second setup changes nothing"
    assert is_checkpointed(model[0])
    assert not is_checkpointed(model[0].inner)
    clone = copy.deepcopy(model)
    clone[1].calls = 0
    clone(torch.randn(2, 8)).sum().backward()
    assert clone[1].calls == 2, "the copy recomputes its own forward"
    assert model[1].calls == 0


def test_activation_checkpointing_of_a_class_the_model_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match=r"activation_checkpointing=\(Outer\) matches no module of Sequential; its "):
        apply_activation_checkpointing(_model(), (Outer,))


# -- a forward that needs no backward --------------------------------------------------------------------------------
def _registered_are_sharded(module: nn.Module) -> bool:
    return all(isinstance(p, DTensor) for p in module.parameters())


@pytest.mark.parametrize("watched", [False, True])
def test_a_frozen_forward_of_an_fsdp2_root_no_longer_leaves_it_unsharded(cpu_mesh: Any, watched: bool) -> None:
    """The mechanism behind ``toggle_optimizer``'s failure: a root unit run with its parameters frozen keeps its
    unsharded parameters (frozen) registered; the next forward after unfreezing uses them and builds no graph."""
    torch.manual_seed(0)
    net = Block()
    FSDPPrecision("32-true").fully_shard(net, mesh=cpu_mesh)
    if watched:
        reshard_after_gradless_forward(net)
        reshard_after_gradless_forward(net)  # once per module
    sharded = list(net.parameters())
    x = torch.randn(2, 8)
    net(x).sum().backward()  # the root's first forward; resharded after its backward
    for p in sharded:  # what toggle_optimizer does to the other optimizer's (sharded) parameters
        p.requires_grad_(False)
    net(x)  # no backward follows
    assert _registered_are_sharded(net) is watched
    for p in sharded:
        p.requires_grad_(True)
    out = net(x)
    assert out.requires_grad is watched, "unwatched: the stale unsharded parameters are frozen"
    if watched:
        out.sum().backward()
        assert all(p.grad is not None for p in sharded)


def test_under_no_grad_the_root_is_resharded_too(cpu_mesh: Any) -> None:
    net = Block()
    FSDPPrecision("32-true").fully_shard(net, mesh=cpu_mesh)
    reshard_after_gradless_forward(net)
    with torch.no_grad():
        net(torch.randn(2, 8))
    assert _registered_are_sharded(net)


# -- sharded once; the whole model seen first ------------------------------------------------------------------------
def test_the_plugins_fully_shard_returns_a_module_already_sharded(cpu_mesh: Any) -> None:
    plugin = FSDPPrecision("bf16-mixed")
    model = _model()
    plugin.fully_shard(model[1], mesh=cpu_mesh)
    plugin.fully_shard(model, mesh=cpu_mesh)
    assert plugin.fully_shard(model[1], mesh=cpu_mesh) is model[1], "configure_model runs again after fit"
    assert plugin.fully_shard(model, mesh=cpu_mesh) is model


def test_fp8_converts_the_whole_model_when_a_part_is_sharded_first(cpu_mesh: Any) -> None:
    """What FSDP2Strategy does before configure_model: ``expect_model(lightning_module)``. The counterpart without
    it (nothing converted, refused) is test_float8.py::test_sub_module_sharded_first_converts_nothing_and_is_refused.
    """
    pytest.importorskip("torchao.float8", reason='torchao is not installed (pip install "precision-fsdp[fp8]")')
    model = nn.Sequential(nn.Linear(32, 32), nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32)), nn.Linear(32, 8))
    plugin = FSDPPrecision("fp8-tensorwise", fp8_emulate=True)
    plugin.expect_model(model)
    plugin.fully_shard(model[1], mesh=cpu_mesh)
    plugin.fully_shard(model, mesh=cpu_mesh)
    assert plugin.fp8_converted == ["1.0", "1.1"], "named in the whole model; its first and last Linear kept"
    plugin.convert_module(model)  # not refused


class _Overrides(pl.LightningModule):
    def configure_model(self) -> None:
        self.touched = True


def test_counted_as_overridden_leaves_a_class_override_alone() -> None:
    from lightning.pytorch.utilities.model_helpers import is_overridden

    module = _Overrides()
    with configure_model_counted_as_overridden(module):
        assert "configure_model" not in vars(module), "the user's own hook is not shadowed"
        assert is_overridden("configure_model", module)
    plain = pl.LightningModule()
    with configure_model_counted_as_overridden(plain):
        assert is_overridden("configure_model", plain)
    assert not is_overridden("configure_model", plain)
