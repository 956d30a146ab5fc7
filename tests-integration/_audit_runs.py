"""Rank code for ``test_audit_fits.py``: real 2-process fits of a real architecture, audited by ``PrecisionAudit``.

Each function runs in both ranks (started by ``precision_testsupport.launch.run_ranks``) and returns, on rank 0,
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
from precision_testsupport.launch import world_size

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


def _fit_one(run: dict[str, Any]) -> dict[str, Any]:
    """One fit of ``run["spec"]`` (``run["liar"]``: a wrong plugin's backend) with ``PrecisionAudit(strict=True)``."""
    world_size()
    seed_everything(7)
    spec = _register_liar(run["liar"]) if "liar" in run else run["spec"]
    audit = PrecisionAudit(steps=int(run.get("audit_steps", 1)), strict=True)
    trainer = precision_base.Trainer(
        precision_plugin=precision_base.resolve(spec, **run.get("options", {})),
        accelerator="cpu",
        devices=2,
        max_steps=int(run.get("steps", 2)),
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
    assert audit.report is not None, "the audit made no report"
    return {"report": audit.report.as_dict(), "text": audit.report.format(), "error": error,
            "global_step": int(trainer.global_step)}  # fmt: skip


def _fabric_one(run: dict[str, Any]) -> dict[str, Any]:
    """``run["spec"]`` through ``precision_base.Fabric``: two steps inside ``audit_fabric_steps(strict=True)``."""
    from precision_base import Fabric, audit_fabric_steps

    world_size()
    seed_everything(7)
    fabric = Fabric(precision_plugin=run["spec"], strategy="auto", accelerator="cpu", devices=2)
    fabric.launch()
    module = TinyLlama().llama
    model, optimizer = fabric.setup(module, torch.optim.AdamW(module.parameters(), lr=1e-3))
    ids = torch.randint(0, VOCAB, (4, SEQ), generator=torch.Generator().manual_seed(fabric.global_rank))
    with audit_fabric_steps(fabric, model, optimizer, steps=1, strict=True) as audit:
        for _ in range(2):
            loss = model(input_ids=ids, labels=ids).loss
            fabric.backward(loss.float(), model=model)
            optimizer.step()
            optimizer.zero_grad()
    assert audit.report is not None
    return {"report": audit.report.as_dict(), "text": audit.report.format(), "error": None, "global_step": 2}


def fits(args: dict[str, Any]) -> dict[str, Any] | None:
    """Every run of ``args["runs"]`` one after another in the same 2 processes; rank 0 returns them by label."""
    torch.set_num_threads(1)
    out = {run["label"]: (_fabric_one if run.get("door") == "fabric" else _fit_one)(run) for run in args["runs"]}
    return out if torch.distributed.get_rank() == 0 else None


DOCS_JSON = "docs/audit.json"
"""What the docs page "Precision audit" shows (the cog blocks of ``tools/docgen/audit.py``), written by this file's
``main``: ``python tests-integration/_audit_runs.py`` (from the repository root) runs the fits and rewrites it."""


def main() -> None:
    """Run FSDP2 ``fsdp:bf16-mixed``, the lying-reduction plugin and DeepSpeed ``deepspeed:bf16-mixed`` in real
    2-process fits and write their reports to :data:`DOCS_JSON`."""
    import json
    import platform
    import sys
    import tempfile
    from pathlib import Path

    import deepspeed
    import lightning

    from precision_testsupport.launch import run_ranks

    sys.path.insert(0, str(Path(__file__).parent))
    from _deepspeed_helpers import extensions_dir

    here = Path(__file__).resolve()
    env = {"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": extensions_dir(),
           "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"}  # fmt: skip
    launches = [
        [{"label": "fsdp:bf16-mixed", "spec": "fsdp:bf16-mixed"}, {"label": "mismatch", "liar": "liar-reduction"}],
        [{"label": "deepspeed:bf16-mixed", "spec": "deepspeed:bf16-mixed"}],
    ]
    reports: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for runs in launches:
            reports |= run_ranks(f"{here}:fits", {"runs": runs}, world=2, threads=1, timeout=900, cwd=tmp, env=env)
    versions = (f"Python {platform.python_version()}, torch {torch.__version__}, lightning {lightning.__version__}, "
                f"deepspeed {deepspeed.__version__}")  # fmt: skip
    data = {
        "meta": {"command": "python tests-integration/_audit_runs.py", "versions": versions},
        "reports": {label: {k: r[k] for k in ("report", "text", "error")} for label, r in reports.items()},
    }
    target = here.parents[1] / DOCS_JSON
    target.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
