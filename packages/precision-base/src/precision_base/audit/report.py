"""The audit's report: what each role of the plugin's dtype table expects, and rows comparing it with what ran.

Plain data (no torch import): an [`AuditReport`][precision_base.audit.report.AuditReport] holds
[`AuditRow`][precision_base.audit.report.AuditRow] s (role, subject, expected, observed,
ok) and renders them as a fixed-width table ([`AuditReport.format`][precision_base.audit.report.AuditReport.format]) or
JSON-ready dicts
([`AuditReport.as_dict`][precision_base.audit.report.AuditReport.as_dict]).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Optional

ROLES: Final[tuple[str, ...]] = (
    "parameters",
    "forward parameters",
    "autocast",
    "compute",
    "float8",
    "gradients",
    "optimizer state",
    "reduction",
    "gathering",
    "buffers",
    "inputs",
    "loss scale",
)
"""The roles a report's rows belong to, in display order."""

COLUMNS: Final[tuple[str, ...]] = ("ROLE", "MODULE / COLLECTIVE", "EXPECTED", "OBSERVED", "OK")


@dataclass(frozen=True)
class AuditRow:
    """One comparison of the audit.

    Attributes:
        role: one of [`ROLES`][precision_base.audit.report.ROLES].
        subject: what was observed: modules (``"Linear x4: blocks.0.qkv, blocks.0.proj, ..."``), an optimizer or a
            collective (``"reduce_scatter_single x2, 12.0 KiB"``).
        expected: the dtype (or dtypes, ``"bfloat16 or float32"``) the plugin's table and its documented exceptions
            say; ``"-"`` when the row is informational.
        observed: what ran, e.g. ``"bfloat16"``.
        ok: ``True``/``False`` for a compared row; ``None`` for an informational one (never a mismatch).
    """

    role: str
    subject: str
    expected: str
    observed: str
    ok: Optional[bool]

    def as_dict(self) -> dict[str, Any]:
        """The row as a JSON-ready dict."""
        return {
            "role": self.role,
            "subject": self.subject,
            "expected": self.expected,
            "observed": self.observed,
            "ok": self.ok,
        }


def _mark(ok: Optional[bool]) -> str:
    return "-" if ok is None else ("ok" if ok else "MISMATCH")


@dataclass(frozen=True)
class AuditReport:
    """What [`precision_base.PrecisionAudit`][] found on one rank.

    Attributes:
        spec: the plugin's name, e.g. ``"fsdp:bf16-mixed"`` (the class name for plugins outside the contract).
        steps: the optimizer steps observed.
        rank: the global rank this report was made on.
        rows: the comparisons, ordered by [`ROLES`][precision_base.audit.report.ROLES].
        other_ranks: mismatching rows other ranks reported, as ``(rank, row)`` (filled when the ranks compared).
    """

    spec: str
    steps: int
    rank: int
    rows: tuple[AuditRow, ...]
    other_ranks: tuple[tuple[int, AuditRow], ...] = field(default=())

    @property
    def mismatches(self) -> tuple[AuditRow, ...]:
        """The rows of this rank whose observation differs from the expectation."""
        return tuple(row for row in self.rows if row.ok is False)

    @property
    def ok(self) -> bool:
        """Whether no row on any rank (that reported) is a mismatch."""
        return not self.mismatches and not self.other_ranks

    def format(self, rows: Optional[Iterable[AuditRow]] = None) -> str:
        """The rows (default: all of them) as a fixed-width text table with a one-line heading."""
        shown = list(self.rows if rows is None else rows)
        table = [COLUMNS] + [(r.role, r.subject, r.expected, r.observed, _mark(r.ok)) for r in shown]
        widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table]
        verdict = "ok" if self.ok else f"{len(self.mismatches)} mismatch(es)"
        head = f"precision audit of {self.spec}, rank {self.rank}, {self.steps} optimizer step(s): {verdict}"
        return "\n".join([head, *lines])

    def mismatch_message(self) -> str:
        """The warning/error text: which rows differ, on this rank and on the others."""
        parts = [f"The precision that ran differs from {self.spec}'s dtypes() table:"]
        if self.mismatches:
            parts.append(self.format(self.mismatches))
        for rank, row in self.other_ranks:
            parts.append(f"rank {rank}: {row.role} | {row.subject} | expected {row.expected} | observed {row.observed}")
        parts.append(
            "Each row names what ran in another dtype than the plugin's table says (see 'precision-plugins show "
            f"{self.spec}'); a table that is wrong is a bug of the plugin, a run that is wrong is a bug of the set-up."
        )
        return "\n".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "spec": self.spec,
            "steps": self.steps,
            "rank": self.rank,
            "ok": self.ok,
            "rows": [row.as_dict() for row in self.rows],
            "other_ranks": [{"rank": rank, **row.as_dict()} for rank, row in self.other_ranks],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditReport:
        """The inverse of [`as_dict`][precision_base.audit.report.AuditReport.as_dict]."""
        rows = tuple(
            AuditRow(**{k: r[k] for k in ("role", "subject", "expected", "observed", "ok")}) for r in data["rows"]
        )
        others = tuple(
            (int(r["rank"]), AuditRow(**{k: r[k] for k in ("role", "subject", "expected", "observed", "ok")}))
            for r in data.get("other_ranks", ())
        )
        return cls(str(data["spec"]), int(data["steps"]), int(data["rank"]), rows, others)


__all__ = ["COLUMNS", "ROLES", "AuditReport", "AuditRow"]
