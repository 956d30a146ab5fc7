"""The docs' example plugin, checked by the conformance kit and trained for a few steps
through the Trainer."""

from __future__ import annotations

import pytest
from cast.info import INFO
from cast.plugin import CastPrecision

from precision_base import UnsupportedPrecisionError, registered, resolve
from precision_base.testing import PluginConformance


class TestCastPrecisionConformance(PluginConformance):
    backend = "cast"
    plugin_info = INFO
    plugin_class = CastPrecision


def test_alias_and_refusal() -> None:
    with registered(INFO, plugin_class=CastPrecision):
        assert resolve("cast:bf16-true").precision == "bf16-true"
        with pytest.raises(
            UnsupportedPrecisionError, match="offers 16-true, bf16-true"
        ):
            # the alias means bf16-mixed, which this plugin does not offer
            resolve("cast:bf16")


def test_trains_through_the_front_door(tmp_path: object) -> None:
    import torch
    from lightning.pytorch.demos.boring_classes import BoringModel

    from precision_base import Trainer

    seen: list[torch.dtype] = []

    class Model(BoringModel):
        def training_step(self, batch: torch.Tensor, batch_idx: int) -> object:
            seen.append(self.layer.weight.dtype)
            return super().training_step(batch, batch_idx)

        def loss(
            self, preds: torch.Tensor, labels: torch.Tensor | None = None
        ) -> torch.Tensor:
            # torch 2.4's CPU kernels have no bfloat16 mse_loss ("mse_cpu" not
            # implemented for 'BFloat16')
            return super().loss(preds.float(), labels)

    with registered(INFO, plugin_class=CastPrecision):
        trainer = Trainer(
            precision_plugin="cast:bf16-true",
            accelerator="cpu",
            devices=1,
            max_steps=3,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=str(tmp_path),
        )
        trainer.fit(Model())
    assert isinstance(trainer.precision_plugin, CastPrecision)
    assert seen == [torch.bfloat16] * 3
