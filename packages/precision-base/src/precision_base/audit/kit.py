"""The conformance kit's audited fit: rank code for ``PluginConformance.test_strict_audit_of_a_real_two_process_fit``.

``fit_each(args)`` runs in every rank (``precision_base.testing.launch.run_ranks``): for each precision of
``args["precisions"]``, a ``precision_base.Trainer(precision_plugin="<backend>:<precision>", accelerator="cpu",
devices=2, strategy="auto")`` fits :class:`~precision_base.testing.models.TinyRegressor` (a hidden layer, AdamW)
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
from precision_base.loading import load_class
from precision_base.testing.launch import world_size
from precision_base.testing.models import QUIET, TinyRegressor


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
            callbacks=[audit], **QUIET,
        )  # fmt: skip
    except PrecisionPluginError as exc:
        return {"refused": f"{type(exc).__name__}: {exc}"}
    try:
        trainer.fit(TinyRegressor(hidden=16, optimizer="adamw", samples=64, batch_size=8))
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
