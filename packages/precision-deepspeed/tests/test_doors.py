"""What both doors share: one strategy choice, one CPU strategy implementation, one error wording, and errors of the
plugin's own Lightning namespace."""

from __future__ import annotations

import pickle

import lightning.fabric
import lightning_fabric
import pytest

from precision_base.namespaces import for_namespace
from precision_deepspeed import _compat, fabric
from precision_deepspeed.errors import DeepSpeedOverflowStormError, DeepSpeedPrecisionError, error_class
from precision_deepspeed.plugin import DeepSpeedPrecision
from precision_deepspeed.selection import resolve_strategy
from precision_deepspeed.strategy import DeepSpeedCPUStrategy, DeepSpeedCPUStrategyImpl, TrainerDeepSpeedCPUStrategyImpl


def _misconfiguration(module: object) -> type:
    return module.utilities.exceptions.MisconfigurationException  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize(
    ("cls", "namespace", "lightnings"),
    [
        (DeepSpeedPrecision, "lightning.pytorch", lightning.fabric),
        (DeepSpeedPrecision, "pytorch_lightning", lightning_fabric),
        (fabric.DeepSpeedPrecision, "lightning.fabric", lightning.fabric),
    ],
)
def test_errors_are_the_plugins_namespaces_misconfiguration(cls: type, namespace: str, lightnings: object) -> None:
    plugin = for_namespace(cls, namespace)("bf16-mixed")
    with pytest.raises(DeepSpeedPrecisionError) as info:
        plugin.switch_precision("16-mixed")
    assert isinstance(info.value, _misconfiguration(lightnings))
    other = lightning_fabric if lightnings is lightning.fabric else lightning.fabric
    assert not isinstance(info.value, _misconfiguration(other))
    assert type(info.value).__qualname__ == "DeepSpeedPrecisionError"
    storm = plugin._overflow.error
    assert issubclass(storm, DeepSpeedOverflowStormError)
    assert issubclass(storm, _misconfiguration(lightnings))
    clone = pickle.loads(pickle.dumps(plugin))
    assert clone._overflow.error is storm
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is type(info.value)
    assert again.args == info.value.args


def test_error_class_is_built_once_per_namespace() -> None:
    assert error_class(DeepSpeedPrecisionError, "pytorch_lightning") is error_class(
        DeepSpeedPrecisionError, "pytorch_lightning"
    )
    assert error_class(DeepSpeedPrecisionError, "pytorch_lightning") is not error_class(
        DeepSpeedPrecisionError, "lightning.pytorch"
    )


@pytest.mark.parametrize("cls", [DeepSpeedPrecision, fabric.DeepSpeedPrecision])
def test_min_loss_scale_error_has_one_wording_for_both_doors(cls: type) -> None:
    plugin = cls("16-mixed", min_loss_scale=2)

    def overflows() -> None:
        raise Exception(_compat.MIN_LOSS_SCALE_MESSAGE + " Exiting run.")

    with pytest.raises(DeepSpeedPrecisionError) as info:
        plugin._step_checked(overflows)
    assert str(info.value) == (
        "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run. Under deepspeed:16-mixed "
        "every step overflowed at DeepSpeed's lowest loss scale (min_loss_scale=2): the fp16 gradients are not finite "
        "even unscaled, so every step is skipped. Look for inf/NaN in the loss or the data, lower the learning rate, "
        "or train in bf16 ('deepspeed:bf16-mixed'), whose range does not need loss scaling."
    )


def test_both_cpu_strategies_share_one_implementation() -> None:
    for cls in (
        DeepSpeedCPUStrategy,
        fabric.DeepSpeedCPUStrategy,
        for_namespace(DeepSpeedCPUStrategy, "pytorch_lightning"),
    ):
        assert issubclass(cls, DeepSpeedCPUStrategyImpl)
    assert issubclass(for_namespace(DeepSpeedCPUStrategy, "pytorch_lightning"), TrainerDeepSpeedCPUStrategyImpl)
    assert not issubclass(fabric.DeepSpeedCPUStrategy, TrainerDeepSpeedCPUStrategyImpl)


@pytest.mark.parametrize(
    ("cls", "namespace", "expected"),
    [
        (DeepSpeedPrecision, "lightning.pytorch", DeepSpeedCPUStrategy),
        (DeepSpeedPrecision, "pytorch_lightning", for_namespace(DeepSpeedCPUStrategy, "pytorch_lightning")),
        (fabric.DeepSpeedPrecision, "lightning.fabric", fabric.DeepSpeedCPUStrategy),
    ],
)
def test_one_strategy_choice_serves_both_doors(cls: type, namespace: str, expected: type) -> None:
    plugin = for_namespace(cls, namespace)("bf16-mixed")
    chosen = plugin.configure_strategy("deepspeed_stage_2", accelerator="cpu", devices=1)
    assert type(chosen) is expected
    assert chosen.config["zero_optimization"]["stage"] == 2
    direct = resolve_strategy("auto", accelerator="cpu", plugin=plugin, namespace=namespace)
    assert type(direct) is expected
