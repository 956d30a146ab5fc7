"""keep_fp32: the head and every LayerNorm compute in float32 while the rest runs in
bf16; runs on a CPU."""

import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, TensorDataset

from precision_base import Trainer, resolve


class Model(LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.GELU()
        )
        self.lm_head = torch.nn.Linear(16, 1)
        self.seen = {}

    def on_fit_start(self):
        for name, module in [
            ("body.0", self.body[0]),
            ("body.1", self.body[1]),
            ("lm_head", self.lm_head),
        ]:
            module.register_forward_hook(
                lambda m, args, out, name=name: self.seen.update({name: out.dtype})
            )

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lm_head(self.body(x)).float(), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        x = torch.randn(64, 16)
        return DataLoader(TensorDataset(x, x[:, :1]), batch_size=8)


if __name__ == "__main__":
    plugin = resolve("fsdp:bf16-mixed", keep_fp32=("lm_head", torch.nn.LayerNorm))
    trainer = Trainer(precision_plugin=plugin, max_steps=2)
    model = Model()
    trainer.fit(model)
    for name, dtype in model.seen.items():
        print(name, dtype)
