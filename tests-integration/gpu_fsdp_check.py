"""GPU check for precision-fsdp: FSDP1 (FSDPStrategy) and FSDP2 (ModelParallelStrategy), run as-is on a CUDA machine.

    python tests-integration/gpu_fsdp_check.py            # uses min(2, visible GPUs) devices

For each precision the GPU supports, trains a tiny model through ``precision_base.Trainer(precision_plugin=...)``
under FSDP1, under FSDP2 (the user's configure_model shards) and with ``strategy="auto"`` (the plugin's
FSDP2Strategy shards by its default policy), and checks: the strategy, the forward compute dtype, the sharded
parameter dtype, the scaler kind (ShardedGradScaler under FSDP1, torch.amp.GradScaler under FSDP2), that clipping
by norm works, that loss falls, and that a checkpoint written with our plugin resumes with Lightning's built-in
FSDPPrecision and the other way round (FSDP1, 16-mixed: the scaler state travels). Prints one JSON line per check
and exits non-zero on any failure.
Lightning's launcher re-runs this script once per extra device, so it must stay a script.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, seed_everything
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import FSDPPrecision as BuiltinFSDPPrecision
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy
from torch.utils.data import DataLoader, TensorDataset

from precision_base import Trainer
from precision_fsdp import FSDPPrecision

WIDTH = 64


class Model(LightningModule):
    def __init__(self, fsdp2: bool) -> None:
        super().__init__()
        self.fsdp2 = fsdp2
        self.body = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU(), torch.nn.Linear(WIDTH, 1))
        self.losses: list[float] = []
        self.compute: set[str] = set()
        self.body[0].register_forward_hook(lambda m, a, out: self.compute.add(str(out.dtype)))

    def configure_model(self) -> None:
        if self.fsdp2:
            plugin = self.trainer.precision_plugin
            plugin.fully_shard(self.body, mesh=self.device_mesh["data_parallel"])
            plugin.fully_shard(self, mesh=self.device_mesh["data_parallel"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x).float(), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.5)

    def train_dataloader(self) -> DataLoader:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, WIDTH, generator=g)
        return DataLoader(TensorDataset(x, torch.tanh(x.sum(1, keepdim=True) / 8)), batch_size=16)


class Sharded(Callback):
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        pl_module.sharded_dtypes = sorted({str(p.dtype) for p in pl_module.parameters()})


def train(
    plugin: Any, fsdp2: bool, devices: int, root: Path, steps: int, ckpt: str | None = None, auto: bool = False
) -> Any:
    """``auto``: ``strategy="auto"`` and a configure_model that does not shard (the plugin's FSDP2Strategy shards)."""
    seed_everything(0)
    model = Model(fsdp2 and not auto)
    strategy: Any = (
        ModelParallelStrategy(data_parallel_size=devices, tensor_parallel_size=1) if fsdp2 else FSDPStrategy()
    )
    if auto:
        strategy = "auto"
    kwargs = dict(
        strategy=strategy,
        accelerator="cuda",
        devices=devices,
        max_steps=steps,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        default_root_dir=root,
        gradient_clip_val=1.0,
        callbacks=[Sharded()],
    )
    trainer = Trainer(precision_plugin=plugin, **kwargs)
    trainer.fit(model, ckpt_path=ckpt)
    return trainer, model


def main() -> int:
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA GPU visible"}))
        return 0
    devices = min(2, torch.cuda.device_count())
    precisions = ["32-true", "16-mixed", "16-true"]
    if torch.cuda.is_bf16_supported():
        precisions += ["bf16-mixed", "bf16-true"]
    failures = 0
    root = Path(tempfile.mkdtemp(prefix="gpu_fsdp_check_"))
    for fsdp2, auto in ((False, False), (True, False), (True, True)):
        for precision in precisions:
            plugin = FSDPPrecision(precision)
            trainer, model = train(plugin, fsdp2, devices, root / f"{fsdp2}-{auto}-{precision}", steps=12, auto=auto)
            table = plugin.dtypes()
            checks = {
                "strategy": type(trainer.strategy).__name__
                == ("FSDP2Strategy" if auto else "ModelParallelStrategy" if fsdp2 else "FSDPStrategy"),
                "fsdp_version": plugin.fsdp_version == (2 if fsdp2 else 1),
                "compute": model.compute == {f"torch.{table.compute}"},
                "sharded_params": model.sharded_dtypes == [f"torch.{table.parameters}"],
                "loss_falls": all(map(math.isfinite, model.losses)) and model.losses[-1] < model.losses[0],
                "scaler_kind": (type(plugin.scaler).__name__ if plugin.scaler is not None else None)
                == ({"16-mixed": "ShardedGradScaler" if not fsdp2 else "GradScaler"}.get(precision)),
            }
            failures += not all(checks.values())
            if trainer.global_rank == 0:
                print(
                    json.dumps({"fsdp": 2 if fsdp2 else 1, "auto": auto, "precision": precision, **checks}), flush=True
                )
    # checkpoint portability, FSDP1 16-mixed: ours -> built-in -> ours, the scaler's scale travels both ways
    ours = FSDPPrecision("16-mixed", init_scale=1024.0)
    trainer, _ = train(ours, False, devices, root / "port-a", steps=4)
    path = str(root / "port.ckpt")
    trainer.save_checkpoint(path)
    builtin = BuiltinFSDPPrecision("16-mixed")
    trainer_b, _ = train(builtin, False, devices, root / "port-b", steps=8, ckpt=path)
    ok_in = builtin.scaler is not None and builtin.scaler.get_scale() <= 1024.0
    path_b = str(root / "port-b.ckpt")
    trainer_b.save_checkpoint(path_b)
    back = FSDPPrecision("16-mixed")
    train(back, False, devices, root / "port-c", steps=10, ckpt=path_b)
    ok_back = back.scaler is not None and back.scaler.get_scale() <= 1024.0
    failures += not (ok_in and ok_back)
    if trainer.global_rank == 0:
        print(json.dumps({"checkpoint_ours_to_builtin": ok_in, "checkpoint_builtin_to_ours": ok_back}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
