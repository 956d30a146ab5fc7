"""The DeepSpeed config a real Lightning ``DeepSpeedStrategy`` ends up with, for every option of the plugin.

A user on GPUs passes Lightning's own strategy and the plugin to a plain Lightning Trainer:
``Trainer(strategy=DeepSpeedStrategy(...), plugins=[DeepSpeedPrecision(...)])``. Lightning writes its default
``fp16``/``bf16`` section and ``gradient_clipping`` first; the plugin's section must still win over those defaults,
while a config (or strategy argument) the *user* wrote that contradicts the plugin is an error naming both values.

Each test builds a real Trainer and runs Lightning's real ``DeepSpeedStrategy.setup(trainer)`` (which formats the
config, then connects the precision plugin), in both Lightning namespaces. The one step replaced is
``init_deepspeed`` (``deepspeed.initialize``): Lightning's strategy refuses to create the engine without CUDA, and
the config is final before it runs. Real engines on the CPU run in ``test_plugin.py`` (one process) and in
``tests-integration/test_deepspeed_cpu.py`` (two processes).
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from precision_base.namespaces import for_namespace
from precision_deepspeed import DeepSpeedCPUStrategy, DeepSpeedPrecision, _compat
from precision_deepspeed.errors import DeepSpeedConfigConflictError
from precision_deepspeed.implementation import deepspeed_has_torch_autocast

NAMESPACES = ("lightning.pytorch", "pytorch_lightning")
PRECISION_KEYS = ("fp16", "bf16", "torch_autocast")

#: every constructor option of DeepSpeedPrecision, with a non-default value, at each precision that takes it
FP16_OPTIONS: list[dict[str, Any]] = [
    {"loss_scale": 128.0},
    {"initial_scale_power": 8},
    {"loss_scale_window": 500},
    {"hysteresis": 4},
    {"consecutive_hysteresis": True},
    {"min_loss_scale": 2},
    {"loss_scale_window": 200, "hysteresis": 3, "consecutive_hysteresis": True, "min_loss_scale": 4},
]
CASES: list[tuple[str, dict[str, Any]]] = [
    *[(precision, {}) for precision in ("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")],
    *[(precision, options) for precision in ("16-mixed", "16-true") for options in FP16_OPTIONS],
    ("16-mixed", {"max_skipped_steps": 3}),  # no config key: checked by the plugin after each step
]
if _compat.deepspeed_checks_bf16_overflow():  # bf16: the plugin turns on check_grad_overflow where it is off
    CASES += [("bf16-mixed", {"max_skipped_steps": 3})]
if deepspeed_has_torch_autocast():  # the installed DeepSpeed decides whether torch_autocast exists at all
    CASES += [  # 16-mixed with torch_autocast=True is refused (test_plugin.py)
        ("bf16-mixed", {"torch_autocast": True}),
        ("bf16-mixed", {"torch_autocast": True, "autocast_lower_precision_safe_modules": ["torch.nn.Linear"]}),
    ]


def _ids(case: tuple[str, dict[str, Any]]) -> str:
    precision, options = case
    return precision + "".join(f"-{k}={v}" for k, v in options.items())


def _lightning(namespace: str) -> Any:
    return importlib.import_module(namespace)


def _plugin(namespace: str, precision: str, **options: Any) -> Any:
    return for_namespace(DeepSpeedPrecision, namespace)(precision, **options)


def _module(namespace: str) -> Any:
    pl = _lightning(namespace)

    class Tiny(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=0.1)

    return Tiny()


def final_config(
    namespace: str, plugin: Any, strategy: Any = None, gradient_clip_val: Any = None, **strategy_kwargs: Any
) -> dict[str, Any]:
    """The config after Lightning's ``DeepSpeedStrategy.setup`` (everything up to ``deepspeed.initialize``)."""
    pl = _lightning(namespace)
    if strategy is None:
        strategy = pl.strategies.DeepSpeedStrategy(**strategy_kwargs)
    trainer = pl.Trainer(
        strategy=strategy, plugins=[plugin], accelerator="cpu", devices=1, gradient_clip_val=gradient_clip_val,
        logger=False, enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
    )  # fmt: skip
    model = _module(namespace)
    # what Trainer.fit does before setup: attach the data and the module, enter the fitting state
    trainer._data_connector.attach_data(model, train_dataloaders=DataLoader(torch.zeros(8, 4), batch_size=4))
    model.trainer = trainer
    strategy._lightning_module = model
    strategy.connect(model)
    trainer.state.fn = pl.trainer.states.TrainerFn.FITTING
    strategy.init_deepspeed = lambda: None  # deepspeed.initialize: needs CUDA with Lightning's own strategy
    strategy.setup(trainer)
    assert trainer.precision_plugin is plugin
    return dict(strategy.config)


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_every_option_reaches_lightnings_strategy(namespace: str, case: tuple[str, dict[str, Any]]) -> None:
    precision, options = case
    plugin = _plugin(namespace, precision, **options)
    config = final_config(namespace, plugin, gradient_clip_val=0.5)
    section = plugin.precision_section()
    assert {k: config.get(k) for k in PRECISION_KEYS} == {k: section.get(k) for k in PRECISION_KEYS}
    for key, value in options.items():
        if key in section.get("fp16", {}):
            assert config["fp16"][key] == value
    if options.get("torch_autocast"):
        assert config["bf16"] == {"enabled": False}, "Lightning's default bf16 section must give way"
        assert config["torch_autocast"]["dtype"] == ("float16" if precision == "16-mixed" else "bfloat16")
    assert config["gradient_clipping"] == 0.5
    assert config["zero_optimization"]["stage"] == 2  # Lightning's own defaults stay
    assert config["train_micro_batch_size_per_gpu"] == 4


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_the_issue_examples_no_longer_raise(namespace: str) -> None:
    config = final_config(namespace, _plugin(namespace, "16-mixed", loss_scale_window=500))
    assert config["fp16"]["loss_scale_window"] == 500
    if deepspeed_has_torch_autocast():
        config = final_config(namespace, _plugin(namespace, "bf16-mixed", torch_autocast=True))
        assert config["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    assert config["gradient_clipping"] == 0.0  # Lightning's default when the Trainer does not clip


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_user_config_that_agrees_is_kept(namespace: str) -> None:
    user = {"zero_optimization": {"stage": 1}, "bf16": {"enabled": True, "immediate_grad_update": True}}
    pl = _lightning(namespace)
    config = final_config(namespace, _plugin(namespace, "bf16-mixed"), pl.strategies.DeepSpeedStrategy(config=user))
    assert config["bf16"] == {"enabled": True, "immediate_grad_update": True}
    assert config["fp16"] == {"enabled": False}
    assert config["zero_optimization"] == {"stage": 1}


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_user_config_that_contradicts_names_both_values(namespace: str) -> None:
    pl = _lightning(namespace)
    strategy = pl.strategies.DeepSpeedStrategy(config={"fp16": {"enabled": True, "loss_scale_window": 1000}})
    with pytest.raises(DeepSpeedConfigConflictError) as info:
        final_config(namespace, _plugin(namespace, "16-mixed", loss_scale_window=500), strategy)
    assert "fp16.loss_scale_window=1000 (the plugin needs 500)" in str(info.value)
    assert "deepspeed:16-mixed" in str(info.value)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_a_user_bf16_section_still_contradicts_torch_autocast(namespace: str) -> None:
    if not deepspeed_has_torch_autocast():
        pytest.skip("the installed DeepSpeed has no torch_autocast config section")
    pl = _lightning(namespace)
    strategy = pl.strategies.DeepSpeedStrategy(config={"bf16": {"enabled": True}})
    with pytest.raises(DeepSpeedConfigConflictError, match=r"bf16\.enabled=True \(the plugin needs False\)"):
        final_config(namespace, _plugin(namespace, "bf16-mixed", torch_autocast=True), strategy)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_strategy_loss_scaling_argument_that_contradicts_names_both(namespace: str) -> None:
    with pytest.raises(DeepSpeedConfigConflictError) as info:
        final_config(namespace, _plugin(namespace, "16-mixed", loss_scale_window=500), loss_scale_window=200)
    assert str(info.value).startswith(
        "DeepSpeedStrategy(loss_scale_window=200) contradicts the precision plugin deepspeed:16-mixed, which needs "
        "loss_scale_window=500."
    )
    # the same argument, agreeing with the plugin, is fine
    config = final_config(namespace, _plugin(namespace, "16-mixed", loss_scale_window=200), loss_scale_window=200)
    assert config["fp16"]["loss_scale_window"] == 200


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_user_clip_value_against_the_trainers(namespace: str) -> None:
    pl = _lightning(namespace)
    strategy = pl.strategies.DeepSpeedStrategy(config={"gradient_clipping": 2.0, "zero_optimization": {"stage": 2}})
    with pytest.raises(DeepSpeedConfigConflictError, match=r"gradient_clipping=2\.0 but the Trainer has gradient_cl"):
        final_config(namespace, _plugin(namespace, "bf16-mixed"), strategy, gradient_clip_val=1.0)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_cpu_strategy_writes_the_section_before_lightning(namespace: str) -> None:
    """Our CPU strategy writes the section before Lightning's defaults: Lightning then writes no bf16 default."""
    if not deepspeed_has_torch_autocast():
        pytest.skip("the installed DeepSpeed has no torch_autocast config section")
    strategy = for_namespace(DeepSpeedCPUStrategy, namespace)()
    plugin = _plugin(namespace, "bf16-mixed", torch_autocast=True)
    config = final_config(namespace, plugin, strategy, gradient_clip_val=0.25)
    assert list(config).index("torch_autocast") < list(config).index("gradient_accumulation_steps")
    assert config["bf16"] == {"enabled": False}
    assert config["gradient_clipping"] == 0.25


# -- Lightning's real ThroughputMonitor reads the plugin's compute dtype -----------------------------------------
THROUGHPUT_CASES: list[tuple[str, dict[str, Any]]] = [
    *[(precision, {}) for precision in ("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")],
    *([("bf16-mixed", {"torch_autocast": True})] if deepspeed_has_torch_autocast() else []),
]  # fmt: skip


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("case", THROUGHPUT_CASES, ids=_ids)
def test_throughput_monitor_sees_the_compute_dtype(
    namespace: str, case: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning's ``ThroughputMonitor.setup`` looks up the peak FLOPs for the plugin's compute dtype.

    The lookup (``get_available_flops``) is wrapped to record the dtype it is asked for and still runs; on a CPU it
    answers ``None`` for every dtype, so the dtype is only visible as its argument.
    """
    from precision_base.kit.plugin_support import precision_dtype

    precision, options = case
    pl = _lightning(namespace)
    monitor_module = importlib.import_module(f"{namespace}.callbacks.throughput_monitor")
    real = monitor_module.get_available_flops
    asked: list[torch.dtype] = []

    def recording(device: torch.device, dtype: torch.dtype) -> Any:
        asked.append(dtype)
        return real(device, dtype)

    monkeypatch.setattr(monitor_module, "get_available_flops", recording)
    plugin = _plugin(namespace, precision, **options)
    trainer = pl.Trainer(
        strategy=pl.strategies.DeepSpeedStrategy(), plugins=[plugin], accelerator="cpu", devices=1, logger=False
    )
    trainer.state.fn = pl.trainer.states.TrainerFn.FITTING  # as Trainer.fit sets them before setup hooks run
    trainer.state.stage = pl.trainer.states.RunningStage.TRAINING
    monitor = pl.callbacks.ThroughputMonitor(batch_size_fn=len)
    monitor.setup(trainer, _module(namespace), stage="fit")
    assert asked == [precision_dtype(precision)]
    assert plugin.dtypes().compute == str(asked[0]).removeprefix("torch.")


def test_resolve_for_pytorch_lightning_builds_that_namespaces_classes() -> None:
    """The same code, built for ``pytorch_lightning``: plugin, CPU strategy choice, pickling."""
    import pickle

    import pytorch_lightning

    import precision_base

    plugin = precision_base.resolve("deepspeed:bf16", namespace="pytorch_lightning")
    assert isinstance(plugin, pytorch_lightning.plugins.precision.DeepSpeedPrecision)
    assert type(plugin).__qualname__ == "DeepSpeedPrecision"  # checkpoints stay portable
    strategy = plugin.configure_strategy("auto", accelerator="cpu", devices=2)
    assert isinstance(strategy, pytorch_lightning.strategies.DeepSpeedStrategy)
    assert type(strategy) is for_namespace(DeepSpeedCPUStrategy, "pytorch_lightning")
    assert type(pickle.loads(pickle.dumps(plugin))) is type(plugin)
