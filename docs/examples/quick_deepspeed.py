"""DeepSpeed ZeRO-2 with bf16 mixed precision: runs as written on a CPU-only machine
(and on GPUs)."""

import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, TensorDataset

from precision_base import Trainer


class Model(LightningModule):
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
    trainer = Trainer(precision_plugin="deepspeed:bf16-mixed", max_steps=4)
    trainer.fit(Model())
    print(type(trainer.strategy).__name__, trainer.strategy.config["bf16"])
