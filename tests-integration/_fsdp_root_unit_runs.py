"""Rank code for ``test_fsdp_root_unit.py``: a ``configure_model`` that ends with ``fully_shard(self)``.

The LightningModule (:class:`NoForward`: an embedding, a ModuleList of blocks and a head, no ``forward``; its steps
call the submodules, as a module holding a Hugging Face model as ``self.net`` does) shards each block, then itself,
through the precision plugin, so the embedding and the head stay in the LightningModule's own FSDP2 unit. Lightning
never calls the LightningModule, so nothing would all-gather that unit; the plugin makes the step methods gather it.
Every variant is trained with ``precision_base.Trainer(precision_plugin=..., accelerator="cpu", devices=2)`` and
``strategy="auto"`` in the same 2 gloo ranks; rank 0 returns what the tests assert on.

* ``root``: blocks, then ``self`` (the case above); fit, then validate and predict on the same Trainer;
* ``units``: blocks, the embedding and the head, then ``self`` (no parameter left in the root unit): the reference;
* ``unpatched``: ``root`` with the plugin's step gathering turned off beforehand: what the user saw before.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, seed_everything
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from typing_extensions import override

import precision_base
from precision_testsupport.launch import world_size

VOCAB = 16
WIDTH = 16
DEPTH = 2
SEED = 3


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.fc = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc(torch.tanh(self.norm(x)))


def tokens() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randint(0, VOCAB, (16, 6), generator=g))


class NoForward(LightningModule):
    """No ``forward``: the steps call ``embed``, ``blocks`` and ``head`` themselves."""

    def __init__(self, units: str) -> None:
        super().__init__()
        self.units = units
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(DEPTH)])
        self.head = nn.Linear(WIDTH, VOCAB)
        self.losses: list[float] = []
        if units == "unpatched":
            self._precision_fsdp_steps_gather_root = True  # the plugin's mark: it then does nothing

    @override
    def configure_model(self) -> None:
        plugin: Any = self.trainer.precision_plugin
        mesh = self.device_mesh["data_parallel"]  # type: ignore[index]
        for block in self.blocks:
            plugin.fully_shard(block, mesh=mesh)
        if self.units == "units":
            plugin.fully_shard(self.embed, mesh=mesh)
            plugin.fully_shard(self.head, mesh=mesh)
        plugin.fully_shard(self, mesh=mesh)

    def _loss(self, batch: Any) -> torch.Tensor:
        (ids,) = batch
        h = self.embed(ids[:, :-1])
        for block in self.blocks:
            h = block(h)
        logits = self.head(h).float()
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))

    @override
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.losses.append(float(loss.detach()))
        return loss

    @override
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch), sync_dist=True)

    @override
    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        return float(self._loss(batch))

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _variant(spec: str, units: str, root: Path) -> dict[str, Any]:
    from torch.distributed.tensor import DTensor

    world_size()  # Lightning's teardown of the previous run deleted WORLD_SIZE
    seed_everything(SEED, workers=True)
    model = NoForward(units)
    data = DataLoader(tokens(), batch_size=4)
    trainer = precision_base.Trainer(
        precision_plugin=spec, accelerator="cpu", devices=2, max_steps=4, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, default_root_dir=root, num_sanity_val_steps=0,
    )  # fmt: skip
    lines = _Lines()
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    logger.addHandler(lines)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        trainer.fit(model, data)
        out: dict[str, Any] = {"losses": model.losses}
        out["validate"] = dict(trainer.validate(model, data, verbose=False)[0])
        out["predict"] = trainer.predict(model, data)
    except Exception as err:  # the test shows what the user would see
        return {"error": f"{type(err).__name__}: {err}", "losses": model.losses}
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    out["lines"] = [line for line in lines.lines if "FSDP2 unit" in line]
    out["params"] = {
        n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().float().flatten().tolist()
        for n, p in model.named_parameters()
    }
    return out


def runs(args: dict[str, Any]) -> dict[str, Any] | None:
    root = Path(args["out"])
    result = {
        f"{spec}/{units}": _variant(spec, units, root / f"{spec.replace(':', '_')}-{units}")
        for spec, units in (("fsdp:32-true", "root"), ("fsdp:32-true", "units"), ("fsdp:32-true", "unpatched"),
                            ("fsdp:bf16-mixed", "root"))
    }  # fmt: skip
    return result if torch.distributed.get_rank() == 0 else None
