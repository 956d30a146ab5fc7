"""The audit for ``lightning.fabric.Fabric``: a context manager around the steps to observe."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Optional

from precision_base.audit.core import AuditSession
from precision_base.audit.report import AuditReport


class FabricAudit:
    """What [`audit_fabric_steps`][precision_base.audit.fabric.audit_fabric_steps] yields:
    [`report`][precision_base.audit.fabric.FabricAudit.report] and [`ok`][precision_base.audit.fabric.FabricAudit.ok]
    once the ``with`` block ended."""

    def __init__(self, session: AuditSession) -> None:
        self._session = session

    @property
    def report(self) -> Optional[AuditReport]:
        """The report, ``None`` inside the block."""
        return self._session.report

    @property
    def ok(self) -> Optional[bool]:
        """The verdict over every rank, ``None`` inside the block."""
        return None if self.report is None else self.report.ok


@contextlib.contextmanager
def audit_fabric_steps(
    fabric: Any, model: Any, *optimizers: Any, steps: int = 1, strict: bool = False
) -> Iterator[FabricAudit]:
    """Audit the training steps run inside the ``with`` block (the first ``steps`` optimizer steps of them)::

        model, optimizer = fabric.setup(model, optimizer)
        with audit_fabric_steps(fabric, model, optimizer, strict=True) as audit:
            loss = model(batch).sum(); fabric.backward(loss); optimizer.step(); optimizer.zero_grad()
        print(audit.report.format())

    Every hook is removed when the block ends; then the report is made, exchanged between the ranks (every rank
    must leave the block), logged with ``fabric.log_dict`` (``precision_audit/ok``, ``precision_audit/mismatches``)
    and, on a mismatch, warned about or (``strict``) raised.

    Args:
        fabric: the ``Fabric`` (either namespace) whose precision plugin has a ``dtypes()`` table.
        model: the set-up model.
        optimizers: the set-up optimizers.
        steps: optimizer steps to observe (later ones in the block are not recorded).
        strict: raise [`PrecisionAuditError`][precision_base.errors.PrecisionAuditError] on every rank on a mismatch.

    Raises:
        ValueError: ``steps`` is not a positive int.
        TypeError: the precision plugin has no ``dtypes()``.
        PrecisionAuditError: ``strict`` and a mismatch.
    """
    from precision_base.audit.callback import PREFIX, _check_steps

    strategy = fabric.strategy
    session = AuditSession(
        strategy.precision, model, list(optimizers), steps=_check_steps(steps), strict=strict, strategy=strategy
    )
    session.recorder.limit = session.steps  # the Trainer's callback ends the audit itself, at a batch's end
    handle = FabricAudit(session)
    session.start()
    try:
        yield handle
    except BaseException:
        session.recorder.remove()
        raise
    try:
        session.finish()
    finally:
        report = session.report
        if report is not None:
            fabric.log_dict({PREFIX + "ok": float(report.ok), PREFIX + "mismatches": float(len(report.mismatches))})


__all__ = ["FabricAudit", "audit_fabric_steps"]
