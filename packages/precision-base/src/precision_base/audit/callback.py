"""``PrecisionAudit``: the audit as a Lightning callback, for both namespaces, and the environment switch.

The callback is written once as [`PrecisionAuditImpl`][precision_base.audit.callback.PrecisionAuditImpl] (no Lightning
base) and built per namespace, like
[`precision_base.PrecisionMonitor`][]: ``precision_base.PrecisionAudit`` for ``lightning.pytorch``,
``precision_base.pytorch_lightning.PrecisionAudit`` for ``pytorch_lightning``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Optional

import lightning.pytorch as pl
from typing_extensions import override

from precision_base.audit.core import AuditSession
from precision_base.audit.report import AuditReport
from precision_base.errors import PrecisionAuditError

if TYPE_CHECKING:
    _CallbackBase = pl.Callback
else:
    _CallbackBase = object

ENV_VARIABLE: Final[str] = "PRECISION_PLUGINS_AUDIT"
"""Set to ``1`` (warn), ``strict`` (raise) and/or ``steps=N``, comma-separated, to audit every Trainer made through
precision-base's doors, with the report printed at rank 0."""

PREFIX: Final[str] = "precision_audit/"
"""What the names the callback logs start with."""

REPORT_FILE: Final[str] = "precision_audit"
"""The stem of the files (``.txt``, ``.json``) written into each logger's ``log_dir`` that has one."""


def _check_steps(steps: object) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int (optimizer steps to audit), got {steps!r}")
    return steps


SKIPPED_STEPS_WAITED = 8
"""Optimizer steps past ``steps`` the callback waits for an applied one when the loss scaler skips steps."""


class PrecisionAuditImpl(_CallbackBase):
    """Observe the first ``steps`` optimizer steps of ``fit`` and compare every dtype with the plugin's table.

    Hooks are installed when training starts and removed after the ``steps``-th optimizer step; nothing is
    installed before, or at all when the callback is not used. Then `report` holds the rows (role, module or
    collective, expected, observed, ok) and [`ok`][precision_base.audit.callback.PrecisionAuditImpl.ok] the verdict;
    every logger gets ``precision_audit/ok``
    (1.0/0.0) and ``precision_audit/mismatches``, and a logger with a ``log_dir`` gets ``precision_audit.txt`` and
    ``precision_audit.json`` there.

    Args:
        steps: optimizer steps to observe (default 1).
        strict: on a mismatch on any rank, raise [`PrecisionAuditError`][precision_base.errors.PrecisionAuditError] on
            every rank
            (default: warn with [`PrecisionAuditWarning`][precision_base.errors.PrecisionAuditWarning] listing the rows
            that differ).
        print_report: print the whole report at rank 0 when the audit ends.
        at_step: start observing at this optimizer step (``trainer.global_step``) instead of when training starts,
            e.g. the first step after a [`PrecisionSchedule`][precision_base.PrecisionSchedule] switch (default 0). The
            table
            compared with is the plugin's when observing starts.

    Raises:
        ValueError: ``steps`` is not a positive int, or ``at_step`` is not an int >= 0.
        TypeError: (when training starts) the Trainer's precision plugin has no ``dtypes()`` table.
        PrecisionAuditError: ``strict`` and a mismatch.
    """

    def __init__(self, steps: int = 1, strict: bool = False, print_report: bool = False, at_step: int = 0) -> None:
        super().__init__()
        self.steps = _check_steps(steps)
        if isinstance(at_step, bool) or not isinstance(at_step, int) or at_step < 0:
            raise ValueError(f"at_step must be an int >= 0 (the optimizer step to start observing at), got {at_step!r}")
        self.at_step = at_step
        self.strict = strict
        self.print_report = print_report
        self.report: Optional[AuditReport] = None
        self._session: Optional[AuditSession] = None
        self._start_step = 0

    @property
    def ok(self) -> Optional[bool]:
        """Whether the audited steps matched the table on every rank; ``None`` before the audit ended."""
        return None if self.report is None else self.report.ok

    @override
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """When training starts (after the sanity check, before the first batch is fetched): install the hooks."""
        if self._session is not None or self.report is not None or int(trainer.global_step) < self.at_step:
            return
        strategy = trainer.strategy
        self._session = AuditSession(
            strategy.precision_plugin, pl_module, list(trainer.optimizers), steps=self.steps, strict=self.strict,
            strategy=strategy,
        )  # fmt: skip
        self._start_step = int(trainer.global_step)
        self._session.start()

    @override
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """``at_step``: install the hooks before the batch of optimizer step ``at_step``."""
        if self.at_step > 0 and self._session is None and self.report is None:
            self.on_train_start(trainer, pl_module)

    @override
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After the ``steps``-th applied optimizer step on every rank: remove the hooks and report.

        A step the loss scaler skipped (inf/NaN gradients, common in the first steps of ``16-mixed``) never calls
        ``optimizer.step``, so it shows no gradients or optimizer state: the audit waits for ``steps`` applied steps,
        at most [`SKIPPED_STEPS_WAITED`][precision_base.audit.callback.SKIPPED_STEPS_WAITED] more, then reports what it
        saw (a run that never steps is a finding).
        """
        if self._session is None:
            return
        counted = int(trainer.global_step) - self._start_step
        if counted < self.steps:
            return
        applied = trainer.strategy.reduce_boolean_decision(self._session.done, all=True)  # every rank finishes together
        if applied or counted >= self.steps + SKIPPED_STEPS_WAITED:
            self._finish(trainer)

    @override
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Fit ended before ``steps`` optimizer steps: report what was seen."""
        if self._session is not None:
            self._finish(trainer)

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Remove the hooks when the run fails."""
        if self._session is not None:
            self._session.recorder.remove()
            self._session = None

    def _finish(self, trainer: Any) -> None:
        session, self._session = self._session, None
        assert session is not None
        try:
            session.finish()
        except PrecisionAuditError:
            self.report = session.report
            self._publish(trainer)
            raise
        self.report = session.report
        self._publish(trainer)

    def _publish(self, trainer: Any) -> None:
        report = self.report
        if report is None:
            return
        metrics = {PREFIX + "ok": float(report.ok), PREFIX + "mismatches": float(len(report.mismatches))}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=int(trainer.global_step))
        if trainer.global_rank != 0:
            return
        for logger in trainer.loggers:
            log_dir = getattr(logger, "log_dir", None)
            if isinstance(log_dir, (str, os.PathLike)):
                folder = Path(log_dir)
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"{REPORT_FILE}.txt").write_text(report.format() + "\n")
                (folder / f"{REPORT_FILE}.json").write_text(json.dumps(report.as_dict(), indent=2) + "\n")
        if self.print_report:
            print(report.format(), flush=True)


class PrecisionAudit(PrecisionAuditImpl, pl.Callback):
    """[`PrecisionAuditImpl`][precision_base.audit.callback.PrecisionAuditImpl] for ``lightning.pytorch.Trainer``
    (``precision_base.PrecisionAudit``).

    Example::

        audit = PrecisionAudit(strict=True)
        trainer = precision_base.Trainer(precision_plugin="fsdp:bf16-mixed", callbacks=[audit])
        trainer.fit(model)
        print(audit.report.format())
    """


def audit_from_env(namespace: str = "lightning.pytorch") -> Optional[Any]:
    """The callback [`ENV_VARIABLE`][precision_base.audit.callback.ENV_VARIABLE] asks for (built for ``namespace``), or
    ``None`` when it is unset or ``0``.

    Raises:
        ValueError: the variable holds something else than ``1``, ``strict`` and ``steps=N``, comma-separated.
    """
    value = os.environ.get(ENV_VARIABLE, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return None
    strict, steps = False, 1
    for token in (t.strip() for t in value.split(",")):
        if token in ("1", "true", "yes", "on", "warn"):
            continue
        if token == "strict":
            strict = True
        elif token.startswith("steps=") and token[6:].isdigit() and int(token[6:]) > 0:
            steps = int(token[6:])
        else:
            raise ValueError(
                f"{ENV_VARIABLE}={os.environ[ENV_VARIABLE]!r} is not understood: use 1 (audit, warn on a mismatch), "
                "strict (raise on a mismatch) and/or steps=N, comma-separated, e.g. 'strict,steps=2'; 0 turns it off"
            )
    from precision_base.namespaces import for_namespace

    callback_class = for_namespace(PrecisionAudit, namespace)
    return callback_class(steps=steps, strict=strict, print_report=True)


def add_audit_from_env(kwargs: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``kwargs`` with the callback of [`ENV_VARIABLE`][precision_base.audit.callback.ENV_VARIABLE] appended to
    ``callbacks`` (unchanged when unset, or
    when a ``PrecisionAudit`` is already there)."""
    callback = audit_from_env(namespace)
    if callback is None:
        return kwargs
    given = kwargs.get("callbacks")
    callbacks = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
    if any(isinstance(c, PrecisionAuditImpl) for c in callbacks):
        return kwargs
    return {**kwargs, "callbacks": [*callbacks, callback]}


__all__ = ["ENV_VARIABLE", "PrecisionAudit", "PrecisionAuditImpl", "add_audit_from_env", "audit_from_env"]
