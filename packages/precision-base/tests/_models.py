"""A tiny LightningModule and data shared by the Trainer tests (imported lazily: it needs Lightning)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch


class TinyRegressor(pl.LightningModule):
    """Linear regression on fixed random data; records the dtype the forward computed in."""

    def __init__(self, features: int = 8) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(features, 1)
        self.compute_dtypes: list[torch.dtype] = []
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        out = self.layer(x)
        self.compute_dtypes.append(out.dtype)
        loss = torch.nn.functional.mse_loss(out.float(), y.float())
        self.losses.append(float(loss))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> torch.utils.data.DataLoader[Any]:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(256, 8, generator=gen)
        y = x @ torch.linspace(-1, 1, 8).unsqueeze(1)
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)


QUIET: dict[str, Any] = dict(
    logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
)
