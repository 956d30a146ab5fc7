"""Log the loss scale and skipped steps of fsdp:16-mixed with PrecisionMonitor; runs on
a CPU-only machine."""

import csv
from pathlib import Path

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from precision_base import PrecisionMonitor, Trainer, resolve


class Model(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 1)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x).float(), y)
        # one overflowing step, on purpose
        return loss * float("inf") if self.global_step == 2 else loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-2)

    def train_dataloader(self):
        x = torch.randn(64, 16)
        return DataLoader(TensorDataset(x, x[:, :1]), batch_size=8)


if __name__ == "__main__":
    trainer = Trainer(
        precision_plugin=resolve("fsdp:16-mixed", init_scale=1024.0),
        max_steps=4,
        logger=CSVLogger("logs", name="monitor"),
        callbacks=[PrecisionMonitor(logging_interval=1)],
        # clipping by norm computes the unscaled gradient norm, which is logged too
        gradient_clip_val=1.0,
    )
    trainer.fit(Model())
    (metrics,) = Path("logs").rglob("metrics.csv")
    with metrics.open() as f:
        for row in csv.DictReader(f):
            print(
                row["step"], row["precision/loss_scale"], row["precision/skipped_steps"]
            )
