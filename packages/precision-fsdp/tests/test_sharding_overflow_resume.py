"""Unit tests of the default FSDP2 wrap policy, the 16-mixed overflow watch and the resume-under-another-precision
rules. The real 2-process runs of each live in tests-integration/test_fsdp_cpu_training.py."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from torch.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy

from precision_base.errors import OverflowStormError
from precision_base.kit.overflow import OverflowWatch
from precision_fsdp import FSDP2Strategy
from precision_fsdp.errors import PrecisionChangeError
from precision_fsdp.resume import changes, message, saved_precision
from precision_fsdp.sharding.units import units_for_lightning, units_to_shard


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(4, 8)  # 40 parameters
        self.blocks = torch.nn.Sequential(Block(8), Block(8))  # 88 each
        self.act = torch.nn.ReLU()  # no parameters: never a unit
        self.head = torch.nn.Linear(8, 1)  # 9


def test_default_policy_is_the_repeated_blocks() -> None:
    net = Net()
    assert units_to_shard(net) == [net.blocks[0], net.blocks[1]], "more in test_default_units.py"


@pytest.mark.parametrize("policy", [{Block}, [Block], (Block,)])
def test_module_classes_select_every_instance(policy: Any) -> None:
    net = Net()
    assert units_to_shard(net, policy) == [net.blocks[0], net.blocks[1]]


def test_size_threshold_counts_parameters_not_yet_in_a_unit() -> None:
    net = Net()
    # each Block holds 88 >= 80; the Sequential then holds nothing new; embed (40) and head (9) stay in the root
    assert units_to_shard(net, 80) == [net.blocks[0], net.blocks[1]]
    assert units_to_shard(net, 100) == [net.blocks], "the Sequential holds 176 parameters, no Block reaches 100"


def test_torch_fsdp1_policies_have_the_same_meaning() -> None:
    net = Net()
    assert units_to_shard(net, ModuleWrapPolicy({Block})) == units_to_shard(net, {Block})
    sized = functools.partial(size_based_auto_wrap_policy, min_num_params=80)
    assert units_to_shard(net, sized) == units_to_shard(net, 80)


def test_children_left_in_the_root_unit_become_units_for_lightning() -> None:
    net = Net()
    # {Block} leaves embed and head to the root unit, whose forward Lightning never calls (it calls training_step)
    assert units_for_lightning(net, {Block}) == [net.blocks[0], net.blocks[1], net.embed, net.head]
    # the default policy: the blocks, then embed and head (held by no block), and the Sequential holding the blocks
    assert units_for_lightning(net) == [net.blocks[0], net.blocks[1], net.embed, net.blocks, net.head]
    assert units_for_lightning(net, 100) == [net.blocks, net.embed, net.head]


def test_a_class_policy_trains_a_module_whose_head_is_outside_the_units(tmp_path: Any) -> None:
    """Real 1-process FSDP2 fit: Lightning calls training_step, never the root's forward, so the head outside the
    chosen Sequential must still be gathered (it failed with "got mixed torch.Tensor and DTensor")."""
    from precision_fsdp._compat import fsdp2_cpu_problem

    problem = fsdp2_cpu_problem()
    if problem:
        pytest.skip(f"FSDP2 on CPU needs a newer torch: {problem}")
    from lightning.pytorch import LightningModule
    from torch.utils.data import DataLoader, TensorDataset

    from precision_base import Trainer

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
            self.head = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.head(self.body(x)).float(), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> DataLoader[Any]:
            x = torch.randn(16, 8)
            return DataLoader(TensorDataset(x, x[:, :1]), batch_size=8)

    trainer = Trainer(
        precision_plugin="fsdp:bf16-mixed",
        strategy=FSDP2Strategy(auto_wrap_policy={torch.nn.Sequential}),
        accelerator="cpu",
        devices=1,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(Model())
    assert trainer.global_step == 2


@pytest.mark.parametrize(
    ("policy", "error"), [(0, ValueError), (True, TypeError), ({int}, TypeError), ("x", TypeError)]
)
def test_bad_policy_is_refused_when_the_strategy_is_made(policy: Any, error: type) -> None:
    with pytest.raises(error, match="auto_wrap_policy"):
        FSDP2Strategy(auto_wrap_policy=policy)


def test_overflow_watch_warns_at_half_and_stops_at_the_limit() -> None:
    watch = OverflowWatch(4)
    watch.after_step(True, 2.0, "fsdp:16-mixed")
    with pytest.warns(RuntimeWarning, match=r"2 optimizer steps in a row were skipped"):
        watch.after_step(True, 1.0, "fsdp:16-mixed")
    watch.after_step(True, 0.5, "fsdp:16-mixed")
    with pytest.raises(OverflowStormError, match=r"fsdp:16-mixed: 4 optimizer steps in a row.*scale now 0.25"):
        watch.after_step(True, 0.25, "fsdp:16-mixed")
    watch.after_step(False, 0.25, "fsdp:16-mixed")
    assert watch.skipped_in_a_row == 0, "a clean step resets the count"
    bf16 = OverflowWatch(1)
    with pytest.raises(OverflowStormError, match=r"held inf or NaN, so training stopped.*learning rate\. \("):
        bf16.after_step(True, None, "fsdp:bf16-mixed")


def test_overflow_watch_off_and_bad_limits() -> None:
    watch = OverflowWatch(None)
    for _ in range(100):
        watch.after_step(True, 1.0, "fsdp:16-mixed")
    with pytest.raises(ValueError, match="max_skipped_steps"):
        OverflowWatch(0)


def test_resume_rules() -> None:
    assert changes("bf16-mixed", "bf16-mixed", None) == []
    said = changes("16-mixed", "bf16-mixed", None)
    assert said[0] == "the 16-mixed loss scaler state is dropped: bf16-mixed does not scale the loss"
    assert "compute runs in bfloat16 instead of float16" in said[1]
    assert changes("32-true", "16-mixed", 65536.0)[0].startswith("the 16-mixed loss scaler starts fresh at scale 65536")
    assert (
        message("a", "b", ["x", "y"]) == "resuming a checkpoint written under precision 'a' with precision 'b': x; y."
    )
    with pytest.raises(PrecisionChangeError, match=r"'bf16-true' with precision 'bf16-mixed'.*bfloat16.*float32"):
        changes("bf16-true", "bf16-mixed", None)


def test_saved_precision_reads_ours_or_recognises_lightnings_16_mixed() -> None:
    assert saved_precision({"precision_fsdp": {"precision": "32-true"}}, "FSDPPrecision") == "32-true"
    assert saved_precision({"FSDPPrecision": {"scale": 2.0}}, "FSDPPrecision") == "16-mixed"
    assert saved_precision({}, "FSDPPrecision") is None


def test_finite_check_is_for_precisions_without_a_scaler() -> None:
    from precision_fsdp import FSDPPrecision

    with pytest.raises(ValueError, match=r"check_finite_grads=True is for precisions without loss scaling"):
        FSDPPrecision("16-mixed", check_finite_grads=True)
    assert FSDPPrecision("bf16-mixed", check_finite_grads=True, max_skipped_steps=None) is not None


def test_finite_gradients_in_one_process() -> None:
    from precision_fsdp.steps import grads_finite

    w = torch.nn.Parameter(torch.ones(3))
    w.grad = torch.ones(3)
    assert grads_finite([w])
    w.grad[1] = float("nan")
    assert not grads_finite([w])
