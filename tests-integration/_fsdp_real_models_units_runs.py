"""Rank code for ``test_fsdp_real_models_units.py``: real 2-process FSDP2 fits by name, no strategy and no
``configure_model`` given (the default units of ``FSDP2Strategy``), recording by hooks what actually ran.

* :func:`fit_batchnorm`: transformers' ``ResNetForImageClassification`` from a tiny ``ResNetConfig`` (conv +
  ``BatchNorm2d`` layers), held as ``self.net``, under each spec in ``args["specs"]``.
* :func:`fit_module_list`: a LightningModule whose direct child is ``nn.ModuleList`` of blocks.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import LightningModule, seed_everything
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import precision_base
from precision_testsupport.models import QUIET


def _trainer(spec: str, steps: int) -> Any:
    return precision_base.Trainer(precision_plugin=spec, accelerator="cpu", devices=2, max_steps=steps, **QUIET)


class ResNetModule(LightningModule):
    """A 3-class image classifier: a tiny Hugging Face ResNet (2 stages, conv + BatchNorm2d) as ``self.net``.

    Hooks record, per forward: every Conv2d's output dtype; every BatchNorm2d's weight dtype while it computes, its
    input and output dtypes and whether autocast was on inside.
    """

    def __init__(self) -> None:
        super().__init__()
        from transformers import ResNetConfig, ResNetForImageClassification

        config = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3)
        self.net = ResNetForImageClassification(config)
        self.losses: list[float] = []
        self.conv_out: set[str] = set()
        self.bn_seen: set[tuple[str, str, str, bool]] = set()

    def on_fit_start(self) -> None:
        for module in self.net.modules():
            if isinstance(module, nn.Conv2d):
                module.register_forward_hook(lambda m, a, out: self.conv_out.add(str(out.dtype)))
            if isinstance(module, nn.BatchNorm2d):
                module.register_forward_hook(self._record_bn, prepend=True)  # before the plugin's output hook

    def _record_bn(self, module: nn.Module, args: Any, out: torch.Tensor) -> None:
        autocast = torch.is_autocast_enabled("cpu")
        self.bn_seen.add((str(module.weight.dtype), str(args[0].dtype), str(out.dtype), autocast))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.net(pixel_values=x).logits
        loss = nn.functional.cross_entropy(logits.float(), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.02)

    def train_dataloader(self) -> DataLoader[Any]:
        g = torch.Generator().manual_seed(0)
        y = torch.randint(0, 3, (64,), generator=g)
        x = torch.randn(64, 3, 16, 16, generator=g) * 0.5 + y.view(-1, 1, 1, 1).float()  # learnable: brightness
        return DataLoader(TensorDataset(x, y), batch_size=8)


def fit_batchnorm(args: dict[str, Any]) -> dict[str, Any] | None:
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    trainer = None
    for spec in args["specs"]:
        seed_everything(3)
        model = ResNetModule()
        first_bn = next(m for m in model.net.modules() if isinstance(m, nn.BatchNorm2d))
        before = first_bn.running_mean.clone()
        trainer = _trainer(spec, steps=8)
        trainer.fit(model)
        bns = [m for m in model.net.modules() if isinstance(m, nn.BatchNorm2d)]
        out[spec] = {
            "losses": model.losses,
            "conv_out": sorted(model.conv_out),
            "bn_seen": sorted(map(list, model.bn_seen)),
            "running_stats_dtypes": sorted(
                {str(m.running_mean.dtype) for m in bns} | {str(m.running_var.dtype) for m in bns}
            ),
            "running_mean_moved": float((first_bn.running_mean - before).abs().max()),
            "batches_tracked": int(first_bn.num_batches_tracked),
            "bn_weight_stored": sorted({str(m.weight.dtype) for m in bns}),
            "bn_units": sum(1 for m in bns if type(m).__name__.startswith("FSDP")),
            "bn_count": len(bns),
            "notes": list(trainer.precision_plugin.dtypes().notes),
        }
    assert trainer is not None
    return out if trainer.global_rank == 0 else None


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class ListModule(LightningModule):
    """``self.blocks = nn.ModuleList([...])`` directly on the LightningModule (the usual way to write a transformer),
    an input projection and a head beside it; regression on a fixed random target."""

    def __init__(self, width: int = 16, depth: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.blocks = nn.ModuleList([Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, 1)
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        loss = nn.functional.mse_loss(self.head(h).float(), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)

    def train_dataloader(self) -> DataLoader[Any]:
        g = torch.Generator().manual_seed(1)
        x = torch.randn(64, 8, generator=g)
        return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True) * 0.3), batch_size=8)


def fit_module_list(args: dict[str, Any]) -> dict[str, Any] | None:
    torch.set_num_threads(1)
    seed_everything(4)
    model = ListModule()
    trainer = _trainer(args["spec"], steps=8)
    trainer.fit(model)
    units = sorted(name or "<root>" for name, m in model.named_modules() if type(m).__name__.startswith("FSDP"))
    return {"losses": model.losses, "units": units} if trainer.global_rank == 0 else None
