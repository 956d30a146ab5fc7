"""One audit of a run: install the hooks, count the optimizer steps, then compare, tell every rank, warn or raise."""

from __future__ import annotations

import warnings
from typing import Any, Optional

from precision_base.audit.compare import build_rows, declares_float8, plugin_loss_scale
from precision_base.audit.observe import Recorder
from precision_base.audit.report import AuditReport, AuditRow
from precision_base.contract import DtypeTable
from precision_base.doors.identity import door_of
from precision_base.errors import PrecisionAuditError, PrecisionAuditWarning


def plugin_table(plugin: Any) -> DtypeTable:
    """``plugin.dtypes()``, checked to be a [`DtypeTable`][precision_base.DtypeTable].

    Raises:
        TypeError: the precision plugin has no ``dtypes()`` (it is not a precision-base plugin; the message names the
            door of the plugin's class: ``PrecisionAudit`` and ``Trainer(...)``, or ``audit_fabric_steps`` and
            ``Fabric(...)``), or it returned something else than a ``DtypeTable``.
    """
    dtypes = getattr(plugin, "dtypes", None)
    if dtypes is None:
        fabric = door_of(plugin) == "Fabric"  # a Fabric's plugin is a Fabric precision class: name Fabric's calls
        audit, door = ("audit_fabric_steps", "Fabric") if fabric else ("PrecisionAudit", "Trainer")
        raise TypeError(
            f"{audit} compares a run with the precision plugin's dtypes() table, and {type(plugin).__name__} "
            f"has none: use a precision-base plugin, e.g. {door}(precision_plugin='fsdp:bf16-mixed')"
        )
    table = dtypes()
    if not isinstance(table, DtypeTable):
        raise TypeError(f"{type(plugin).__name__}.dtypes() returned {type(table).__name__}, not a DtypeTable")
    return table


def _spec(plugin: Any) -> str:
    spec = getattr(plugin, "spec", None)
    return spec if isinstance(spec, str) else type(plugin).__name__


def _distributed() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _gather_mismatches(rows: tuple[AuditRow, ...], rank: int, world: int) -> tuple[tuple[int, AuditRow], ...]:
    """Every other rank's mismatching rows (a collective: every rank calls it; not recorded by the audit)."""
    if world == 1:
        return ()
    import torch.distributed as dist

    mine = [row.as_dict() for row in rows if row.ok is False]
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, mine)
    return tuple((r, AuditRow(**row)) for r, theirs in enumerate(everyone) if r != rank for row in theirs or [])


class AuditSession:
    """The hooks of one audit and their result.

    Args:
        plugin: the precision plugin in use (a precision-base plugin: it has ``dtypes()``).
        model: the model being trained.
        optimizers: its optimizers.
        steps: optimizer steps to observe (a positive int).
        strict: raise [`PrecisionAuditError`][precision_base.errors.PrecisionAuditError] on a mismatch instead of
            warning.
        strategy: the strategy, handed to ``plugin.precision_stats`` for the loss scale.
    """

    def __init__(
        self, plugin: Any, model: Any, optimizers: list[Any], *, steps: int, strict: bool, strategy: Any = None
    ) -> None:
        self.table = plugin_table(plugin)
        self.plugin = plugin
        self.steps = steps
        self.strict = strict
        self.strategy = strategy
        self.float8 = declares_float8(plugin)
        self.recorder = Recorder(plugin, model, optimizers, watch_float8=self.float8)
        self.report: Optional[AuditReport] = None

    def start(self) -> None:
        """Install the hooks."""
        self.recorder.install()

    @property
    def done(self) -> bool:
        """Whether ``steps`` optimizer steps were observed."""
        return self.recorder.optimizer_steps >= self.steps

    def finish(self, *, observed_steps: Optional[int] = None) -> AuditReport:
        """Remove the hooks, compare, exchange mismatches with the other ranks, then warn or raise.

        Raises:
            PrecisionAuditError: ``strict`` and a row differs on any rank (raised on every rank).
        """
        self.recorder.remove()
        rank, world = _distributed()
        steps = self.recorder.optimizer_steps if observed_steps is None else observed_steps
        rows = build_rows(
            self.recorder, self.table, plugin_loss_scale(self.plugin, self.strategy), world, float8=self.float8
        )
        report = AuditReport(_spec(self.plugin), steps, rank, tuple(rows))
        report = AuditReport(report.spec, steps, rank, report.rows, _gather_mismatches(report.rows, rank, world))
        self.report = report
        if not report.ok:
            if self.strict:
                raise PrecisionAuditError(report.mismatch_message())
            warnings.warn(report.mismatch_message(), PrecisionAuditWarning, stacklevel=2)
        return report


__all__ = ["AuditSession", "plugin_table"]
