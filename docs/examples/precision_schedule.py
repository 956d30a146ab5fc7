"""An fp32 tail: train fsdp:bf16-mixed, switch to fsdp:32-true for the last half; runs
on a CPU-only machine."""

import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, TensorDataset

from precision_base import PrecisionAudit, PrecisionSchedule, Trainer


class Model(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 1)
        )
        self.seen = []  # (step, dtype the first Linear computed in, loss)

    def training_step(self, batch, batch_idx):
        x, y = batch
        hidden = self.net[0](x)
        loss = torch.nn.functional.mse_loss(self.net[2](self.net[1](hidden)).float(), y)
        self.seen.append((self.global_step, str(hidden.dtype), round(loss.item(), 4)))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-2, momentum=0.9)

    def train_dataloader(self):
        x = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, x[:, :1]), batch_size=8)


if __name__ == "__main__":
    # from step 4 of 8 on: float32
    schedule = PrecisionSchedule({0: "fsdp:bf16-mixed", 0.5: "fsdp:32-true"})
    # audits the first step after the switch
    audit = PrecisionAudit(strict=True, at_step=4)
    trainer = Trainer(
        precision_plugin="fsdp:bf16-mixed",
        max_steps=8,
        callbacks=[schedule, audit],
        logger=False,
    )
    model = Model()
    trainer.fit(model)
    for step, dtype, loss in model.seen:
        print(step, dtype, loss)
    print(trainer.precision_plugin.precision, audit.report.spec, audit.ok)
