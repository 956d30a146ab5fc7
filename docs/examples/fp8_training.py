"""FP8 training by name: fsdp:fp8-tensorwise (torchao). On a CPU it runs torchao's
emulation (fp8_emulate=True), a test device; on a GPU with FP8 (compute capability 8.9+)
drop fp8_emulate."""

import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, TensorDataset

from precision_base import Trainer, resolve


class Model(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, 256),  # first Linear: stays bf16
            torch.nn.GELU(),
            torch.nn.Linear(256, 256),  # converted to float8
            torch.nn.GELU(),
            torch.nn.Linear(256, 256),  # converted to float8
            torch.nn.GELU(),
            torch.nn.Linear(256, 10),  # last Linear: stays bf16
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x).float(), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        x = torch.randn(128, 32)
        return DataLoader(TensorDataset(x, x[:, :10].argmax(1)), batch_size=16)


if __name__ == "__main__":
    emulate = not torch.cuda.is_available()
    trainer = Trainer(
        precision_plugin=resolve("fsdp:fp8-tensorwise", fp8_emulate=emulate),
        max_steps=4,
    )
    trainer.fit(Model())
    print("converted:", trainer.precision_plugin.fp8_converted)
