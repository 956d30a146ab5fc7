"""The fence around private and undocumented symbols (``precision_deepspeed._compat``), checked in milliseconds.

A Lightning, torch or DeepSpeed release that moves or re-shapes one of them fails here with one line naming it,
instead of as a broken training run.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest
import torch

from precision_deepspeed import DeepSpeedPrecision, _compat


@pytest.mark.parametrize("entry", _compat.FENCED, ids=lambda e: f"{e.module}.{e.name}")
def test_fenced_symbol_exists_with_expected_signature(entry: _compat.Fenced) -> None:
    problem = entry.problem()
    assert problem is None, problem


PACKAGE = Path(_compat.__file__).parent.parent  # _compat is a package inside precision_deepspeed
_OTHERS = ("torch", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed")


def _private_uses(path: Path) -> list[str]:
    """``x._name`` on anything but ``self``/``cls``/``_compat`` (``super()._name`` included), and imports from
    private torch/Lightning/DeepSpeed modules; the package's own markers on other objects (``_precision*``) are
    allowed."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            ours = isinstance(owner, ast.Name) and owner.id in ("self", "cls", "_compat")
            if not ours and not node.attr.startswith("_precision"):
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
        if (
            isinstance(node, ast.ImportFrom)
            and node.module is not None
            and node.module.split(".")[0] in _OTHERS
            and any(part.startswith("_") for part in node.module.split("."))
        ):
            found.append(f"{path.name}:{node.lineno} from {node.module}")
    return found


def test_no_private_symbol_outside_the_fence() -> None:
    outside = [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] != "_compat"]
    assert len(outside) > 10, f"modules not found under {PACKAGE}"
    uses = [use for path in outside for use in _private_uses(path)]
    assert uses == [], "private Lightning/torch/DeepSpeed symbols must go through precision_deepspeed._compat"


def test_a_moved_symbol_is_reported_in_one_line_naming_it() -> None:
    gone = _compat.Fenced("lightning.pytorch.strategies.deepspeed", "DeepSpeedStrategy._no_such", ("self",), "test")
    reshaped = _compat.Fenced("lightning.pytorch.strategies.deepspeed", "DeepSpeedStrategy._format_config",
                              ("self", "extra"), "test")  # fmt: skip
    for entry, expected in ((gone, "is gone"), (reshaped, "expected ('self', 'extra')")):
        problem = entry.problem()
        assert problem is not None
        assert "\n" not in problem
        assert problem.startswith(f"{entry.module}.{entry.name} ")
        assert expected in problem


def test_every_fenced_problem_is_listed() -> None:
    assert _compat.fenced_problems() == []


def test_overrides_carry_typing_extensions_override() -> None:
    """Every method of ours (the plugin's and the CPU strategies' mixins, ``_compat``'s strategy hooks) that
    overrides a Lightning or ``precision_base.PrecisionPlugin`` method is marked @override, in both doors."""
    import precision_deepspeed.fabric as fabric
    from precision_deepspeed.strategy import DeepSpeedCPUStrategy

    lightning_plugin = DeepSpeedPrecision.__mro__[-3]  # Lightning's DeepSpeedPrecision (before Precision, object)
    assert lightning_plugin.__module__.startswith("lightning.")
    checked = 0
    for concrete in (DeepSpeedPrecision, fabric.DeepSpeedPrecision, DeepSpeedCPUStrategy, fabric.DeepSpeedCPUStrategy):
        mro = concrete.__mro__
        for index, cls in enumerate(mro):
            if not cls.__module__.startswith("precision_deepspeed"):
                continue
            for name, value in vars(cls).items():
                func = value.fget if isinstance(value, property) else value
                if not callable(func) or name.startswith("__"):
                    continue
                bases = [k for k in mro[index + 1 :] if k.__module__.split(".")[0] in ("lightning", "precision_base")]
                if any(name in vars(k) for k in bases):
                    checked += 1
                    assert getattr(func, "__override__", False), f"{cls.__name__}.{name} overrides without @override"
    assert checked >= 40


def test_lightning_precisions_are_ours_in_lightnings_order() -> None:
    assert _compat.lightning_precisions() == DeepSpeedPrecision.precisions
    assert _compat.lightning_precisions() == get_args(
        __import__("lightning.fabric.plugins.precision.deepspeed", fromlist=["_PRECISION_INPUT"])._PRECISION_INPUT
    )


def test_lightning_format_marker_separates_its_keys_from_the_users() -> None:
    """Lightning's real ``_format_config``: every key it adds comes after ``gradient_accumulation_steps``."""
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.precision import DeepSpeedPrecision as LightningPlugin
    from lightning.pytorch.strategies import DeepSpeedStrategy

    user = {"zero_optimization": {"stage": 1}, "fp16": {"enabled": True, "hysteresis": 3}}
    strategy = DeepSpeedStrategy(config=user, precision_plugin=LightningPlugin("16-mixed"))
    trainer = pl.Trainer(strategy=strategy, accelerator="cpu", devices=1, logger=False, gradient_clip_val=0.5)
    model = pl.LightningModule()
    model.trainer = trainer
    strategy._lightning_module = model
    trainer._data_connector.attach_data(model, train_dataloaders=[torch.zeros(1)])
    assert _compat.lightning_written_keys(strategy) == frozenset()
    strategy._init_config_if_needed()
    assert _compat.config_formatted(strategy)
    written = _compat.lightning_written_keys(strategy)
    assert written == {"gradient_accumulation_steps", "train_micro_batch_size_per_gpu", "gradient_clipping"}
    assert set(strategy.config) - written == {"zero_optimization", "fp16"}
    assert strategy.config["fp16"] == {"enabled": True, "hysteresis": 3}, "Lightning keeps a user's fp16 section"


def test_loss_scaling_defaults_of_lightnings_strategy() -> None:
    from lightning.pytorch.strategies import DeepSpeedStrategy

    assert _compat.strategy_loss_scaling(DeepSpeedStrategy()) == {}
    assert _compat.strategy_loss_scaling(DeepSpeedStrategy(hysteresis=5, loss_scale=8.0)) == {
        "hysteresis": 5,
        "loss_scale": 8.0,
    }


def test_cpu_fp16_answer_is_the_one_deepspeeds_engine_checks() -> None:
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    if accelerator.device_name() != "cpu":
        pytest.skip(f"DeepSpeed chose its {accelerator.device_name()} accelerator here, not the CPU one")
    assert _compat.cpu_supports_fp16() is bool(accelerator.is_fp16_supported())


def test_deepspeed_still_raises_the_min_loss_scale_message() -> None:
    import inspect

    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler

    assert _compat.MIN_LOSS_SCALE_MESSAGE in inspect.getsource(DynamicLossScaler.update_scale)
    assert _compat.is_min_loss_scale_error(Exception(_compat.MIN_LOSS_SCALE_MESSAGE + " Exiting run."))
    assert not _compat.is_min_loss_scale_error(RuntimeError(_compat.MIN_LOSS_SCALE_MESSAGE))


def test_an_optional_symbol_may_be_absent_but_not_reshaped() -> None:
    absent = _compat.Fenced("deepspeed.runtime.constants", "NO_SUCH_SECTION", None, "test", optional=True)
    assert absent.problem() is None
    reshaped = _compat.Fenced(
        "lightning.pytorch.strategies.deepspeed", "DeepSpeedStrategy._format_config", ("self", "x"), "t", optional=True
    )
    assert reshaped.problem() is not None


def test_private_instance_attributes_read_through_compat() -> None:
    """Attributes Lightning sets on instances (not checkable on the class): ``LightningModule._trainer``,
    ``DeepSpeedStrategy._config_initialized`` (see the marker test), the registry's ``init_params``."""
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import DeepSpeedStrategy, StrategyRegistry

    assert _compat.trainer_of(pl.LightningModule()) is None
    assert "_trainer" in vars(pl.LightningModule())
    assert _compat.config_formatted(DeepSpeedStrategy()) is False
    assert "_config_initialized" in vars(DeepSpeedStrategy())
    assert _compat.registry_init_params(StrategyRegistry, "deepspeed_stage_3") == {"stage": 3}


def test_instance_attributes_the_fence_reads_exist() -> None:
    """Instance attributes (not class symbols, so not in ``FENCED``) that ``_compat`` reads: torch's
    ``Module._parameters`` table (``forward_with_fp32_parameters``), and the ZeRO stage 1/2 optimizer's ``overflow``
    flag and torch_autocast ``GradScaler`` (``optimizer_overflowed``, ``optimizer_loss_scale``), set in its
    ``__init__``."""
    import inspect

    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    layer = torch.nn.Linear(2, 2)
    assert isinstance(layer._parameters, dict)
    assert layer._parameters["weight"] is layer.weight
    source = inspect.getsource(DeepSpeedZeroOptimizer)
    for attribute in ("self.overflow = ", "self.torch_autocast_gradscaler = "):
        assert attribute in source, f"DeepSpeedZeroOptimizer no longer sets {attribute.strip(' =')}"


def test_forward_with_fp32_parameters_restores_the_parameters() -> None:
    layer = torch.nn.Linear(3, 2).to(torch.bfloat16)
    weight = layer.weight
    _compat.forward_with_fp32_parameters(layer)
    out = layer(torch.randn(4, 3))
    assert out.dtype == torch.float32
    assert layer.weight is weight
    assert layer.weight.dtype == torch.bfloat16
    out.sum().backward()
    assert weight.grad is not None
    assert weight.grad.dtype == torch.bfloat16
    with pytest.raises(RuntimeError):
        layer(torch.randn(4, 5))  # a failing forward
    assert layer.weight is weight
