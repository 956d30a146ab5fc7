"""The same names with the ``pytorch_lightning`` package (a LightningModule of that
namespace)."""

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from precision_base.pytorch_lightning import Trainer


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 1)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).float(), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        x = torch.randn(64, 16)
        return DataLoader(TensorDataset(x, x[:, :1]), batch_size=8)


if __name__ == "__main__":
    trainer = Trainer(precision_plugin="fsdp:bf16-mixed", max_steps=2, logger=False)
    trainer.fit(Model())
    print(
        isinstance(trainer.strategy, pl.strategies.ModelParallelStrategy),
        trainer.precision_plugin.spec,
    )
