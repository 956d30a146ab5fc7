"""The conformance kit's audited fit: rank code for ``PluginConformance.test_strict_audit_of_a_real_two_process_fit``.

``fit_each(args)`` runs in every rank (``precision_base.testing.ranks.run_ranks``): for each precision of
``args["precisions"]``, a ``precision_base.Trainer(precision_plugin="<backend>:<precision>", accelerator="cpu",
devices=2, strategy="auto")`` fits the kit's own ``TinyRegressor`` (a hidden layer, a float32 buffer, AdamW)
for 2 steps with ``PrecisionAudit(strict=True)``. A plugin registered in-process by the kit class is registered
here too, from ``args["register"]`` (the ``PluginInfo`` fields and the plugin class's ``module:QualName``).

Rank 0 returns, per precision, ``{"report": ..., "text": ...}``, ``{"error": ...}`` (the strict audit failed) or
``{"refused": ...}``: the plugin itself refused the precision here with a ``PrecisionPluginError`` while the
Trainer was built (e.g. DeepSpeed's fp16 on a CPU without fp16 kernels), before any training.
"""

from __future__ import annotations

from typing import Any

import torch

import precision_base
from precision_base.audit.callback import PrecisionAudit
from precision_base.errors import PrecisionAuditError, PrecisionPluginError
from precision_base.registry.loading import load_class
from precision_base.testing.ranks import world_size

_QUIET: dict[str, Any] = dict(
    logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
)


def _regressor() -> Any:
    """A `TinyRegressor` (its class is made on first use: importing this module imports no Lightning)."""
    import lightning.pytorch as pl
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class TinyRegressor(pl.LightningModule):
        """``Linear(8, 16) -> GELU -> Linear(16, 1)`` plus a float32 zero buffer (so a precision that casts buffers
        shows it), AdamW, an MSE loss in float32, on 64 fixed samples ``(x, tanh(x @ w))`` in batches of 8."""

        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1))
            self.register_buffer("offset", torch.zeros(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.net(x) + self.offset
            return out

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self(x).float(), y.float())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=0.05)

        def train_dataloader(self) -> DataLoader[Any]:
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(64, 8, generator=gen)
            w = torch.randn(8, 1, generator=gen) / 8**0.5
            return DataLoader(TensorDataset(x, torch.tanh(x @ w)), batch_size=8, shuffle=False)

    return TinyRegressor()


def _register(fields: dict[str, Any]) -> None:
    cls = load_class(fields.pop("class_ref"))
    values: dict[str, Any] = {
        k: tuple(map(tuple, v)) if k == "extra_precisions" else tuple(v) if isinstance(v, list) else v
        for k, v in fields.items()
    }
    info = precision_base.PluginInfo(**values)
    precision_base.register(info, plugin_class=cls, replace=True)


def _one(backend: str, precision: str) -> dict[str, Any]:
    world_size()
    audit = PrecisionAudit(strict=True)
    try:
        trainer = precision_base.Trainer(
            precision_plugin=f"{backend}:{precision}", accelerator="cpu", devices=2, max_steps=2,
            callbacks=[audit], **_QUIET,
        )  # fmt: skip
    except PrecisionPluginError as exc:
        return {"refused": f"{type(exc).__name__}: {exc}"}
    try:
        trainer.fit(_regressor())
    except PrecisionAuditError as exc:
        return {"error": str(exc)}
    assert audit.report is not None, "the audit made no report"
    return {"report": audit.report.as_dict(), "text": audit.report.format()}


def fit_each(args: dict[str, Any]) -> dict[str, Any] | None:
    """Every precision of ``args["precisions"]`` in turn, in the same 2 processes."""
    torch.set_num_threads(1)
    if args.get("register"):
        _register(dict(args["register"]))
    out = {p: _one(args["backend"], p) for p in args["precisions"]}
    return out if torch.distributed.get_rank() == 0 else None


__all__ = ["fit_each"]
