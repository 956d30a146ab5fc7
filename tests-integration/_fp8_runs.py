"""Rank code for ``test_fp8_fits.py``: 2-process FSDP2 fits of the same model under ``fsdp:bf16-mixed`` and the FP8
precisions (torchao's emulation on CPU), measuring what FSDP2 all-gathers."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch import Callback, LightningModule, seed_everything
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import precision_base
from precision_testsupport.launch import world_size
from precision_testsupport.models import QUIET

WIDTH, FEATURES, OUT = 512, 64, 8


def teacher_task(samples: int = 256) -> TensorDataset:
    """Regression onto a fixed random two-layer teacher (the same data in every rank and run)."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(samples, FEATURES, generator=g)
    w1, w2 = torch.randn(FEATURES, 128, generator=g) / 8, torch.randn(128, OUT, generator=g) / 11
    return TensorDataset(x, torch.tanh(x @ w1) @ w2)


class Student(LightningModule):
    def __init__(self, samples: int = 256) -> None:
        super().__init__()
        self.samples = samples
        layers: list[nn.Module] = [nn.Linear(FEATURES, WIDTH), nn.GELU()]
        for _ in range(3):
            layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
        self.net = nn.Sequential(*layers, nn.Linear(WIDTH, OUT))
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x).float(), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=2e-3)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(teacher_task(self.samples), batch_size=32, shuffle=False)


class AllGatherBytes(Callback):
    """Counts the bytes and input dtypes of FSDP2's all-gathers (``dist.all_gather_single``) during training."""

    def __init__(self) -> None:
        self.bytes = 0
        self.dtypes: set[str] = set()
        self.bytes_by_dtype: dict[str, int] = {}
        self._original: Any = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._original = dist.all_gather_single

        def counting(output: torch.Tensor, input: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            self.bytes += output.numel() * output.element_size()
            self.dtypes.add(str(input.dtype))
            key = str(input.dtype)
            self.bytes_by_dtype[key] = self.bytes_by_dtype.get(key, 0) + output.numel() * output.element_size()
            return self._original(output, input, *args, **kwargs)

        dist.all_gather_single = counting

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        dist.all_gather_single = self._original


def bias_free(student: Student) -> Student:
    """``student`` with its three middle 512x512 Linear layers bias-free: torchao 0.18's MXFP8 weight wrapper drops a
    Linear's bias, so the plugin converts only bias-free layers to MXFP8."""
    for index in (2, 4, 6):
        student.net[index] = nn.Linear(student.net[index].in_features, student.net[index].out_features, bias=False)
    return student


def fit(args: dict[str, Any]) -> dict[str, Any] | None:
    """Each spec of ``args["specs"]`` fits ``args["steps"]`` steps, counting FSDP2's all-gathers; ``args["bias_free"]``
    makes the middle layers bias-free (:func:`bias_free`)."""
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    for spec in args["specs"]:
        world_size()
        seed_everything(2)
        options = {"fp8_emulate": True} if "fp8" in spec else {}
        model, counter = (bias_free(Student()) if args.get("bias_free") else Student()), AllGatherBytes()
        trainer = precision_base.Trainer(
            precision_plugin=precision_base.resolve(spec, **options),
            accelerator="cpu",
            devices=2,
            max_steps=int(args["steps"]),
            callbacks=[counter],
            **QUIET,
        )
        trainer.fit(model)
        out[spec] = {
            "losses": model.losses,
            "bytes_per_step": counter.bytes / int(args["steps"]),
            "dtypes": sorted(counter.dtypes),
            "bytes_per_step_by_dtype": {k: v / int(args["steps"]) for k, v in counter.bytes_by_dtype.items()},
            "converted": list(getattr(trainer.precision_plugin, "fp8_converted", [])),
            "types": {name: type(m).__name__ for name, m in model.net.named_children() if "Linear" in type(m).__name__},
            "float8": {  # FSDP2 subclasses each unit (FSDPFloat8Linear), so ask the class hierarchy
                name: any(c.__name__ == "Float8Linear" for c in type(m).__mro__)
                for name, m in model.net.named_children()
                if isinstance(m, nn.Linear)
            },
        }
    return out if trainer.global_rank == 0 else None


def _trainer(spec: str, epochs: int, root: str, callbacks: list[Any]) -> Any:
    options = {"fp8_emulate": True} if "fp8" in spec else {}
    quiet = {k: v for k, v in QUIET.items() if k != "enable_checkpointing"}
    return precision_base.Trainer(
        precision_plugin=precision_base.resolve(spec, **options),
        accelerator="cpu",
        devices=2,
        max_epochs=epochs,
        callbacks=callbacks,
        default_root_dir=root,
        **quiet,
    )


def resume(args: dict[str, Any]) -> dict[str, Any] | None:
    """fp8-tensorwise: 2 epochs of 2 steps uninterrupted (checkpoint after epoch 0, step 2); epoch 1 resumed from it
    under fp8-tensorwise; the same fp8 checkpoint resumed under bf16-mixed."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    torch.set_num_threads(1)
    root = args["root"]
    world_size()
    seed_everything(2)
    full = Student(samples=128)
    ckpt = ModelCheckpoint(dirpath=f"{root}/ckpt", every_n_epochs=1, save_top_k=-1, save_on_train_epoch_end=True)
    trainer = _trainer("fsdp:fp8-tensorwise", 2, root, [ckpt])
    trainer.fit(full)
    step2 = f"{root}/ckpt/epoch=0-step=2.ckpt"
    out: dict[str, Any] = {"full": full.losses}
    for name, spec in (("resumed", "fsdp:fp8-tensorwise"), ("as_bf16", "fsdp:bf16-mixed")):
        world_size()
        seed_everything(2)
        model = Student(samples=128)
        _trainer(spec, 2, root, []).fit(model, ckpt_path=step2)
        out[name] = model.losses
    return out if trainer.global_rank == 0 else None
