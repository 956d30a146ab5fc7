"""Demo: train a tiny model with precision-deepspeed on CPU, in 2 processes (a real DeepSpeed engine, ZeRO-2, gloo).

``run()`` prints the resolved plugin, its dtype table and the DeepSpeed config section it writes, then trains in a
child process (``python examples/demo_deepspeed.py --train <precision>``): Lightning's launcher starts rank 1 by
re-running the script it finds in ``sys.argv``, so the training has to be its own script. The child prints the
precision section of the DeepSpeed config the engine was built with, and the engine's dtypes.
"""

from __future__ import annotations

import json
from typing import Any

from _demo_runner import main, print_plugin, train_in_child

PRECISIONS = ("bf16-mixed", "32-true")
SECTION_KEYS = ("fp16", "bf16", "torch_autocast")


def _train(precision: str) -> None:
    import torch
    from lightning.pytorch import LightningModule, seed_everything
    from torch.utils.data import DataLoader, TensorDataset

    from precision_base import Trainer

    class TinyRegressor(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
            self.losses: list[float] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x).float(), y.float())
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    seed_everything(0, verbose=False)
    torch.set_num_threads(1)
    x = torch.randn(256, 16, generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(x, torch.tanh(x[:, :1] + x[:, 1:2])), batch_size=16)
    trainer = Trainer(
        precision_plugin=f"deepspeed:{precision}",  # strategy="auto": DeepSpeedCPUStrategy, ZeRO stage 2
        accelerator="cpu",
        devices=2,
        max_epochs=3,
        gradient_clip_val=1.0,  # reaches DeepSpeed's gradient_clipping
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = TinyRegressor()
    trainer.fit(model, data)
    if trainer.global_rank == 0:
        engine = trainer.model
        config = trainer.strategy.config or {}
        section = {key: config[key] for key in SECTION_KEYS if key in config}
        params = sorted({str(p.dtype).removeprefix("torch.") for p in engine.module.parameters()})
        print(
            f"[deepspeed:{precision}] strategy {type(trainer.strategy).__name__}, ZeRO stage "
            f"{engine.zero_optimization_stage()}, gradient_clipping {engine.gradient_clipping()}",
            flush=True,
        )
        print(
            f"[deepspeed:{precision}] DeepSpeed config section used: {json.dumps(section, sort_keys=True)}", flush=True
        )
        print(
            f"[deepspeed:{precision}] {len(model.losses)} steps on 2 CPU processes, loss {model.losses[0]:.4f} -> "
            f"{model.losses[-1]:.4f}, engine module parameters {params}, reduction "
            f"{str(engine.communication_data_type).removeprefix('torch.')}",
            flush=True,
        )


def run() -> None:
    """Train with ``deepspeed:bf16-mixed`` and ``deepspeed:32-true`` on CPU (2 processes each); print what was used."""
    for precision in PRECISIONS:
        print_plugin(
            f"deepspeed:{precision}",
            lambda plugin: [f"DeepSpeed config section: {json.dumps(plugin.precision_section(), sort_keys=True)}"],
        )
        train_in_child(__file__, "deepspeed", precision, timeout=900)


if __name__ == "__main__":
    main(_train, run)
