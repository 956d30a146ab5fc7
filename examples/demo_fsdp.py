"""Demo: train a tiny model with precision-fsdp on CPU, in 2 processes (FSDP2 under ModelParallelStrategy, gloo).

``run()`` prints the resolved plugin and its dtype table for each precision, then trains in a child process
(``python examples/demo_fsdp.py --train <precision>``): Lightning's launcher starts rank 1 by re-running the script
it finds in ``sys.argv``, so the training has to be its own script rather than code inside the caller's.
"""

from __future__ import annotations

from typing import Any

from _demo_runner import main, print_plugin, train_in_child

PRECISIONS = ("bf16-mixed", "32-true")


def _train(precision: str) -> None:
    import torch
    from lightning.pytorch import LightningModule, seed_everything
    from lightning.pytorch.strategies import ModelParallelStrategy
    from torch.utils.data import DataLoader, TensorDataset

    from precision_base import Trainer

    class TinyRegressor(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
            self.losses: list[float] = []

        def configure_model(self) -> None:
            # the one line: FSDP2 sharding with the dtypes of the plugin chosen by name
            self.trainer.precision_plugin.fully_shard(self, mesh=self.device_mesh["data_parallel"])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self(x).float(), y)
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.5)

    seed_everything(0, verbose=False)
    torch.set_num_threads(1)
    x = torch.randn(256, 16, generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(x, torch.tanh(x[:, :1] + x[:, 1:2])), batch_size=16)
    trainer = Trainer(
        precision_plugin=f"fsdp:{precision}",
        strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
        accelerator="cpu",
        devices=2,
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = TinyRegressor()
    trainer.fit(model, data)
    if trainer.global_rank == 0:
        first, last = model.losses[0], model.losses[-1]
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
        print(
            f"[fsdp:{precision}] {len(model.losses)} steps on 2 CPU processes, loss {first:.4f} -> {last:.4f}, "
            f"sharded parameters {dtypes}",
            flush=True,
        )


def run() -> None:
    """Train with ``fsdp:bf16-mixed`` and ``fsdp:32-true`` on CPU (2 processes each) and print the dtype tables."""
    for precision in PRECISIONS:
        print_plugin(f"fsdp:{precision}")
        train_in_child(__file__, "fsdp", precision, timeout=600)


if __name__ == "__main__":
    main(_train, run)
