"""Rank code for ``test_audit_fits.py``: real 2-process fits of a real architecture, audited by ``PrecisionAudit``.

Each function runs in both ranks (started by ``precision_base.testing.launch.run_ranks``) and returns, on rank 0,
the audit's report (``AuditReport.as_dict()``) or the error the strict audit raised. The architecture is
transformers' ``LlamaForCausalLM`` built from a tiny config (no weights are downloaded): RMSNorm, rotary embeddings
(a float32 ``inv_freq`` buffer), grouped-query attention projections and a gated MLP.

The deliberately wrong plugins are real plugins with a lying ``dtypes()`` table, registered in-process under a
backend name of their own before the Trainer is made, so the audit meets them exactly as it meets any plugin.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch import seed_everything
from torch.utils.data import DataLoader, TensorDataset

import precision_base
from precision_base import PluginInfo, PrecisionAudit, PrecisionAuditError
from precision_base.testing.launch import world_size

VOCAB, SEQ = 64, 16


class TinyLlama(pl.LightningModule):
    """``LlamaForCausalLM`` (2 layers, hidden 32, 4 heads, 2 KV heads) on random token ids; the library's own loss."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=2 * SEQ, tie_word_embeddings=False,
        )  # fmt: skip
        self.llama = LlamaForCausalLM(config)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (ids,) = batch
        loss: torch.Tensor = self.llama(input_ids=ids, labels=ids).loss
        return loss.float()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self) -> DataLoader[Any]:
        ids = torch.randint(0, VOCAB, (16, SEQ), generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(ids), batch_size=4)


def _liar_classes() -> dict[str, tuple[type, str]]:
    """Backend -> (plugin class with a lying table, the precision it offers)."""
    from precision_fsdp.plugin import FSDPPrecision

    class LyingReductionFSDP(FSDPPrecision):  # type: ignore[misc]
        """``fsdp:bf16-true`` (bf16 reduce-scatter) whose table says gradients are reduced in float32."""

        backend = "liar-reduction"

        def dtypes(self, fsdp_version: Any = None) -> Any:
            return dataclasses.replace(super().dtypes(fsdp_version), reduction="float32")

    return {"liar-reduction": (LyingReductionFSDP, "bf16-true")}


def _register_liar(backend: str) -> str:
    cls, precision = _liar_classes()[backend]
    cls.precisions = (precision,)
    info = PluginInfo(backend=backend, precisions=(precision,), plugin_class=f"{__name__}:{cls.__name__}")
    precision_base.register(info, plugin_class=cls, replace=True)
    return f"{backend}:{precision}"


def fit(args: dict[str, Any]) -> dict[str, Any] | None:
    """Fit ``args["spec"]`` for ``args["steps"]`` (default 2) steps with ``PrecisionAudit(strict=True)``."""
    world_size()
    torch.set_num_threads(1)
    seed_everything(7)
    spec = args["spec"]
    if "liar" in args:
        spec = _register_liar(args["liar"])
    audit = PrecisionAudit(steps=int(args.get("audit_steps", 1)), strict=True)
    trainer = precision_base.Trainer(
        precision_plugin=precision_base.resolve(spec, **args.get("options", {})),
        accelerator="cpu",
        devices=2,
        max_steps=int(args.get("steps", 2)),
        logger=False,
        callbacks=[audit],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    error = None
    try:
        trainer.fit(TinyLlama())
    except PrecisionAuditError as exc:
        error = str(exc)
    if trainer.global_rank != 0:
        return None
    assert audit.report is not None, "the audit made no report"
    return {"report": audit.report.as_dict(), "text": audit.report.format(), "error": error}
