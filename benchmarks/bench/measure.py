"""``precision-plugins recommend --measure`` (:func:`precision_base.tune_precision`, as a user calls it) on the tiny
Llama and the BatchNorm ResNet, one CPU process per candidate. The two factories are what such a user writes (they
import nothing of ``bench``: each candidate's process loads this file by its path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from precision_base import tune_precision
from precision_testsupport import architectures

MODELS = ("llama", "resnet")
BATCH = {"llama": 8, "resnet": 16}


def _factory(model: str) -> tuple[Any, Any]:
    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = architectures.build(model, 0, 0, 0, 1234)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            out = self.net(x)
            return torch.nn.functional.cross_entropy(out.float().flatten(0, -2), y.flatten())

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    data = architectures.data(model, 64 * BATCH[model], 0, 0, 1234)
    return Classifier(), torch.utils.data.DataLoader(data, batch_size=BATCH[model])


def llama() -> tuple[Any, Any]:
    return _factory("llama")


def resnet() -> tuple[Any, Any]:
    return _factory("resnet")


def run(quick: bool) -> dict[str, Any]:
    steps, warmup = (3, 1) if quick else (20, 3)
    results = {}
    for model in MODELS[:1] if quick else MODELS:
        found = tune_precision(f"{Path(__file__).resolve()}:{model}", steps=steps, warmup=warmup)
        results[model] = found.as_dict()
    config = {"models": list(results), "steps": steps, "warmup": warmup, "devices": 1,
              "descriptions": {m: architectures.describe(m, 0, 0, BATCH[m]) for m in results}}  # fmt: skip
    return {"config": config, "results": results}
