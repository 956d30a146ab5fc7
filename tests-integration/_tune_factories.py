"""What a user passes to ``precision-plugins recommend --measure`` (tests-integration/test_tune_precision.py): functions
that build a LightningModule and its data.

``softplus_sum``: a small MLP whose loss is ``log(mean(exp(out)))`` computed without subtracting the maximum first, a
common way to write it, with outputs near 13: ``exp`` of that is about 4.4e5, fine in float32 and bfloat16, above
float16's largest value (65504), so under ``16-true`` the loss is ``inf`` from the first step.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn


class NaiveLogMeanExp(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 8))
        with torch.no_grad():
            self.net[2].bias.fill_(13.0)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        return self.net(x).exp().mean().log()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-2)


def softplus_sum() -> tuple[pl.LightningModule, Any]:
    data = torch.utils.data.TensorDataset(torch.randn(512, 32))
    return NaiveLogMeanExp(), torch.utils.data.DataLoader(data, batch_size=16)


def raises() -> Any:
    raise ValueError("no data here: the dataset folder is empty")


def not_a_module() -> Any:
    return {"weights": 1}
