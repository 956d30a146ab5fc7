"""Evaluation after ``fit`` on the same Trainer keeps the model's own module hooks (issue 18, zoo failure A).

Lightning's ``DeepSpeedStrategy`` builds the evaluation engine after emptying every hook table of every module;
``DeepSpeedCPUStrategy`` removes only DeepSpeed's hooks. Real Trainer, real DeepSpeed engine on its CPU accelerator
(one process).
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import precision_base
from precision_deepspeed import DeepSpeedCPUStrategy, _compat


class Hooked(pl.LightningModule):
    """A module whose forward needs its own forward hook (as Hugging Face MoE models record router logits)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)
        self.head = nn.Linear(4, 1)
        self.recorded: list[torch.Tensor] = []
        self.hook_calls = 0
        self.layer.register_forward_hook(self._record)

    def _record(self, module: nn.Module, args: Any, output: torch.Tensor) -> None:
        self.hook_calls += 1
        self.recorded.append(output)

    def _loss(self, batch: Any) -> torch.Tensor:
        (x,) = batch
        self.recorded.clear()
        out = self.head(self.layer(x))
        (recorded,) = self.recorded  # fails (ValueError: not enough values) when the hook was removed
        return out.float().pow(2).mean() + 0.0 * recorded.float().sum()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._loss(batch)

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("val_loss", loss)
        return loss

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._loss(batch)

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def _hook_tables(module: nn.Module) -> dict[str, int]:
    return {name: len(sub._forward_hooks) for name, sub in module.named_modules()}


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["deepspeed:32-true", "deepspeed:bf16-mixed"])
def test_user_forward_hook_survives_validate_and_predict_after_fit(spec: str) -> None:
    model = Hooked()
    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    trainer = precision_base.Trainer(
        precision_plugin=spec, accelerator="cpu", devices=1, max_steps=2, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    assert isinstance(trainer.strategy, DeepSpeedCPUStrategy)
    trainer.fit(model, data)
    after_fit = model.hook_calls
    assert after_fit == 2
    metrics = trainer.validate(model, data)
    assert model.hook_calls == after_fit + 2
    assert metrics[0]["val_loss"] >= 0
    predictions = trainer.predict(model, data)
    assert predictions is not None
    assert len(predictions) == 2
    assert model.hook_calls == after_fit + 4
    # DeepSpeed's own hooks on the root (the engine's forward prologue/epilogue) do not pile up: one engine's each
    root_pre = [h for h in model._forward_pre_hooks.values() if _compat.lightning._defined_in_deepspeed(h)]
    root_post = [h for h in model._forward_hooks.values() if _compat.lightning._defined_in_deepspeed(h)]
    assert len(root_pre) == 1, root_pre
    assert len(root_post) == 1, root_post
    assert _hook_tables(model)["layer"] == 1  # the user's hook, once


def test_remove_deepspeed_hooks_keeps_others() -> None:
    """The classifier itself, on hooks registered by a function defined in DeepSpeed and by the user."""
    layer = nn.Linear(2, 2)
    user = layer.register_forward_hook(lambda m, a, o: None)

    def ds_hook(*args: Any) -> None:
        return None

    ds_hook.__module__ = "deepspeed.runtime.engine"  # as DeepSpeed's closures are
    layer.register_forward_hook(ds_hook, with_kwargs=False, always_call=True)
    layer.register_forward_pre_hook(ds_hook)
    assert _compat.remove_deepspeed_hooks(layer) == 2
    assert list(layer._forward_hooks) == [user.id]
    assert not layer._forward_pre_hooks
    assert not layer._forward_hooks_always_called


class WithBatchNorm(pl.LightningModule):
    """A conv net with BatchNorm: kept float32 by default under ``*-mixed`` (issue 18, zoo failure B)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        out = self.head(self.norm(self.conv(x)).mean(dim=(2, 3)))
        return out.float().pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


@pytest.mark.slow
def test_native_bf16_batchnorm_computes_from_float32_copies_and_the_strict_audit_sees_them() -> None:
    """DeepSpeed's native bf16 mode stores the BatchNorm parameters bfloat16 (its flat groups); the kept module's
    forward computes with float32 copies, and the audit's "forward parameters" row observes those copies."""
    audit = precision_base.PrecisionAudit(strict=True)
    model = WithBatchNorm()
    trainer = precision_base.Trainer(
        precision_plugin="deepspeed:bf16-mixed", accelerator="cpu", devices=1, max_steps=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[audit],
    )  # fmt: skip
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(4, 3, 5, 5)), batch_size=4))
    assert model.norm.weight.dtype == torch.bfloat16  # stored as DeepSpeed's native mode stores every parameter
    assert model.norm.running_mean.dtype == torch.float32
    assert audit.report is not None
    assert audit.report.ok, audit.report.format()
    (row,) = [r for r in audit.report.rows if r.role == "forward parameters" and "BatchNorm2d" in r.subject]
    assert (row.expected, row.observed) == ("float32", "float32")
    conv = [r for r in audit.report.rows if r.role == "forward parameters" and "Conv2d" in r.subject]
    assert [(r.expected, r.observed) for r in conv] == [("bfloat16", "bfloat16")]
    table = trainer.precision_plugin.dtypes()
    assert any("stored bfloat16" in note and "float32 copy" in note for note in table.notes), table.notes


def test_lightnings_own_strategy_also_keeps_the_models_hooks_for_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning's ``DeepSpeedStrategy`` (what users on GPUs pass) with the plugin: its evaluation engine is built
    after removing only DeepSpeed's hooks. Lightning's class refuses to build an engine without CUDA, so
    ``deepspeed.initialize`` is replaced by a stand-in that records the hooks the model still holds when it is called
    (after Lightning's ``remove_module_hooks``) and stops there; the rest is Lightning's real setup."""
    import deepspeed

    from precision_deepspeed import DeepSpeedPrecision

    strategy = pl.strategies.DeepSpeedStrategy()
    trainer = pl.Trainer(
        strategy=strategy, plugins=[DeepSpeedPrecision("bf16-mixed")], accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
    )  # fmt: skip
    model = Hooked()
    trainer._data_connector.attach_data(model, train_dataloaders=DataLoader(TensorDataset(torch.zeros(8, 4))))
    model.trainer = trainer
    strategy._lightning_module = model
    strategy.connect(model)
    trainer.state.fn = pl.trainer.states.TrainerFn.FITTING
    monkeypatch.setattr(strategy, "init_deepspeed", lambda: None)  # deepspeed.initialize needs CUDA here
    strategy.setup(trainer)  # the plugin's connect wraps the instance

    def ds_hook(*args: Any) -> None:
        return None

    ds_hook.__module__ = "deepspeed.runtime.engine"  # as the training engine's forward prologue is
    model.register_forward_pre_hook(ds_hook)
    seen: dict[str, int] = {}

    class Built(Exception):
        pass

    def initialize(**kwargs: Any) -> Any:
        seen["user hooks on layer"] = len(kwargs["model"].layer._forward_hooks)
        seen["deepspeed hooks on root"] = len(kwargs["model"]._forward_pre_hooks)
        raise Built

    monkeypatch.setattr(deepspeed, "initialize", initialize)
    with pytest.raises(Built):
        strategy._initialize_deepspeed_inference(model)
    assert seen == {"user hooks on layer": 1, "deepspeed hooks on root": 0}
