"""Measure precisions on this model instead of guessing (recommend --measure)."""

import lightning.pytorch as pl
import torch
from torch import nn

from precision_base import tune_precision


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def build():
    """What every candidate trains: the same model and data in each."""
    x, y = torch.randn(1024, 64), torch.randint(0, 8, (1024,))
    data = torch.utils.data.TensorDataset(x, y)
    return Model(), torch.utils.data.DataLoader(data, batch_size=32)


# Each candidate's process imports this file for build(): measure only when run.
if __name__ == "__main__":
    candidates = ["fsdp:bf16-mixed", "fsdp:bf16-true"]
    result = tune_precision(build, candidates=candidates, steps=10, warmup=2)
    print(result.render())
    print("reference", result.reference)
