"""``precision_fsdp.selection``: one set of rules for both doors' strategy choice, each door with its own texts."""

from __future__ import annotations

import lightning.fabric as lf
import lightning.pytorch as pl
import pytest

from precision_base import TrainerConfigurationError
from precision_fsdp import fabric, selection
from precision_fsdp._compat import fsdp2_cpu_problem, lightning_fsdp_on_cpu_message

SPEC = "fsdp:bf16-mixed"


def _fabric(strategy: object, accelerator: str = "cpu") -> object:
    return selection.choose_fabric_strategy(
        SPEC, lf, strategy, accelerator=accelerator, fsdp2_strategy=fabric.FSDP2Strategy
    )


def _trainer(strategy: object, accelerator: str = "cpu") -> object:
    return selection.choose_strategy(SPEC, pl, strategy, accelerator=accelerator, devices=1)


def test_fabric_fsdp1_on_cpu_and_other_strategies_are_refused_with_fabrics_texts() -> None:
    with pytest.raises(TrainerConfigurationError) as info:
        _fabric("fsdp")
    assert "FSDPStrategy is FSDP1, which cannot run on CPU (torch needs an accelerator for " in str(info.value)
    assert f"On CPU, use FSDP2: pass {selection.HOW_FABRIC_FSDP2}." in str(info.value)
    with pytest.raises(TrainerConfigurationError) as info:
        _fabric("ddp")
    assert f"Pass {selection.HOW_FABRIC_FSDP2} for FSDP2, or {selection.HOW_FABRIC_FSDP1}." in str(info.value)


def test_trainer_texts() -> None:
    with pytest.raises(TrainerConfigurationError) as info:
        _trainer("ddp")
    assert f"Pass {selection.HOW_FSDP2} for FSDP2, or {selection.HOW_FSDP1} for FSDP1." in str(info.value)
    with pytest.raises(TrainerConfigurationError) as info:
        _trainer("fsdp")
    lightnings = lightning_fsdp_on_cpu_message(pl, "cpu")
    assert lightnings is not None
    assert lightnings.rstrip(".") in str(info.value)
    assert f"On CPU, use FSDP2: pass {selection.HOW_FSDP2}." in str(info.value)


@pytest.mark.skipif(fsdp2_cpu_problem() is not None, reason="FSDP2 does not run on CPU with this torch")
def test_auto_builds_each_doors_fsdp2_strategy_and_model_parallel_is_kept() -> None:
    from precision_fsdp.sharding.strategy import FSDP2Strategy

    assert type(_fabric("auto")) is fabric.FSDP2Strategy
    assert type(_trainer("auto")) is FSDP2Strategy
    kept = lf.strategies.ModelParallelStrategy(lambda m, mesh: m)
    assert _fabric(kept) is kept


def test_fsdp1_mixed_precision_refused_at_both_doors_each_in_its_own_terms() -> None:
    """Both Lightning FSDPStrategy classes prefer their own mixed_precision to the plugin's: both doors refuse it (the
    Fabric door kept it until issue 20's drift was fixed), the Fabric door naming Fabric's FSDPStrategy."""
    from torch.distributed.fsdp import MixedPrecision

    with pytest.raises(
        TrainerConfigurationError, match=r"FSDPStrategy\(mixed_precision=\.\.\.\) would replace"
    ) as info:
        _trainer(pl.strategies.FSDPStrategy(mixed_precision=MixedPrecision()), accelerator="cuda")
    assert selection.TRAINER.fsdp1_mixed_precision in str(info.value)
    with pytest.raises(TrainerConfigurationError) as info:
        _fabric(lf.strategies.FSDPStrategy(mixed_precision=MixedPrecision()), accelerator="cuda")
    assert selection.FABRIC.fsdp1_mixed_precision in str(info.value)
    assert str(info.value).count("lightning.fabric.strategies.FSDPStrategy(mixed_precision=...) would replace") == 1
    assert "(Fabric's FSDPStrategy prefers it to the plugin's mixed_precision_config)" in str(info.value)
    assert "Lightning's FSDPStrategy" not in str(info.value)
    kept = lf.strategies.FSDPStrategy()
    assert _fabric(kept, accelerator="cuda") is kept
