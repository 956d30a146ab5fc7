"""Measure, don't guess: try precision plugins on the user's own model and pick the fastest that still trains.

[`tune_precision`][precision_base.tune.search.tune_precision] runs the ``32-true`` reference of the candidates'
backend, then every candidate, each in a fresh process ([`precision_base.tune.trial`][]) with the same factory,
seed, data and devices; it compares the candidates' loss trajectories with the reference's and returns a
[`TuneResult`][precision_base.tune.search.TuneResult]: the fastest candidate whose loss stays within the tolerance,
and every candidate's row (step time, peak memory, loss deviation, audit verdict, or why it was not picked).
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from precision_base.errors import TuneTargetError

STATUSES = ("ok", "failed", "diverged", "refused", "skipped")
"""A candidate's status: ``ok`` (trained within the tolerance), ``failed`` (raised while training), ``diverged``
(a non-finite loss, or a loss further than the tolerance from the reference's), ``refused`` (the plugin refused the
configuration before training), ``skipped`` (the budget ended before it could run)."""

DEFAULT_TOLERANCE = 0.1
"""The largest mean relative deviation of a candidate's losses from the reference's, over the same steps."""


@dataclass
class Trial:
    """One candidate's row. ``step_ms``: median milliseconds per optimizer step after the warm-up (with a 95%
    interval of the median, ``step_ms_low`` .. ``step_ms_high``); ``peak_bytes``: CUDA allocator peak, or on a CPU
    the peak RSS increase of the fit; ``tensor_bytes``: the parameters', gradients' and optimizer state's bytes one
    process holds before the last optimizer step (its local shards); ``loss_deviation``: mean of
    ``|loss - reference| / |reference|`` over the steps both ran; ``world_size``: the processes its Trainer trained
    with (``devices``)."""

    spec: str
    status: str
    reason: str = ""
    step_ms: Optional[float] = None
    step_ms_low: Optional[float] = None
    step_ms_high: Optional[float] = None
    peak_bytes: Optional[int] = None
    tensor_bytes: Optional[int] = None
    loss_deviation: Optional[float] = None
    audit_ok: Optional[bool] = None
    skipped_steps: Optional[int] = None
    losses: list[Optional[float]] = field(default_factory=list)
    wall_s: float = 0.0
    fit_s: float = 0.0
    world_size: Optional[int] = None


@dataclass
class TuneResult:
    """What [`tune_precision`][precision_base.tune.search.tune_precision] found.

    Attributes:
        picked: the fastest candidate with status ``ok``; ``None`` when none trained within the tolerance.
        reference: the ``32-true`` plugin name the losses were compared with.
        reason: one line saying why ``picked`` (or why nothing) was picked.
        candidates: every candidate's [`Trial`][precision_base.tune.search.Trial], fastest first, then those
            that did not train.
        tolerance: the largest mean relative loss deviation a picked candidate may have.
        steps: the timed optimizer steps of every candidate.
        warmup: the optimizer steps before them, left out of the timing.
        overhead_s: the search's own time besides the fits (process starts, imports, building the model).
        wall_s: the whole search.
    """

    picked: Optional[str]
    reference: str
    reason: str
    candidates: list[Trial]
    tolerance: float
    steps: int
    warmup: int
    overhead_s: float
    wall_s: float

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "candidates": [asdict(t) for t in self.candidates]}

    def render(self) -> str:
        """The table ``precision-plugins recommend --measure`` prints, fastest first, ratios against the reference."""
        ref = next((t for t in self.candidates if t.spec == self.reference), None)
        rows = [("candidate", "status", "step ms", "vs 32-true", "peak MiB", "tensors MiB", "loss dev.", "audit",
                 "why not")]  # fmt: skip
        for t in self.candidates:
            ratio = f"{t.step_ms / ref.step_ms:.2f}x" if t.step_ms and ref is not None and ref.step_ms else ""
            rows.append((
                t.spec + (" *" if t.spec == self.picked else ""), t.status,
                f"{t.step_ms:.1f}" if t.step_ms is not None else "", ratio,
                f"{t.peak_bytes / 2**20:.0f}" if t.peak_bytes is not None else "",
                f"{t.tensor_bytes / 2**20:.2f}" if t.tensor_bytes is not None else "",
                percent(t.loss_deviation) if t.loss_deviation is not None else "",
                {True: "ok", False: "mismatch", None: ""}[t.audit_ok], "" if t.status == "ok" else t.reason,
            ))  # fmt: skip
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]) - 1)]
        lines = ["  ".join(f"{c:<{w}}" for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows]
        head = f"picked: {self.picked}" if self.picked else "picked: none"
        foot = (f"{self.steps} timed steps after {self.warmup} warm-up steps per candidate, each in its own process; "
                f"search {self.wall_s:.1f} s, of which {self.overhead_s:.1f} s outside the fits (process starts, "
                "imports, the model's construction)")  # fmt: skip
        return "\n".join([head, f"  {self.reason}", "", *(line.rstrip() for line in lines), "", foot])


def percent(fraction: float) -> str:
    """``fraction`` as a percentage with two significant digits: ``0.0123`` -> ``"1.2%"``, ``0.00034`` ->
    ``"0.034%"``, ``0.25`` -> ``"25%"``, ``1.5`` -> ``"150%"``; zero is ``"0%"``."""
    value = fraction * 100
    if value == 0 or not math.isfinite(value):
        return f"{value:g}%"
    if abs(value) >= 10:
        return f"{value:.0f}%"
    digits = 1 - math.floor(math.log10(abs(value)))
    return f"{value:.{digits}f}%"


def median_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """The median of ``values`` and a distribution-free ~95% interval of it (order statistics)."""
    ordered, n = sorted(values), len(values)
    k = max(0, math.floor(n / 2 - 0.98 * math.sqrt(n)))
    return statistics.median(ordered), ordered[k], ordered[n - 1 - k]


def loss_deviation(losses: Sequence[Any], reference: Sequence[Any]) -> tuple[Optional[float], Optional[str]]:
    """Mean relative deviation of ``losses`` from ``reference`` over the steps both have, or why it cannot be had:
    a non-finite loss (``"the loss became nan at step 3"``) or no loss recorded."""
    for step, value in enumerate(losses, 1):
        if value is None or isinstance(value, str) or not math.isfinite(value):
            return None, f"the loss became {value} at step {step}" if value is not None else "no loss was recorded"
    pairs = [(a, b) for a, b in zip(losses, reference, strict=False) if isinstance(b, float) and math.isfinite(b)]
    if not pairs:
        return None, "no loss was recorded"
    return sum(abs(a - b) / max(abs(b), 1e-12) for a, b in pairs) / len(pairs), None


def default_candidates() -> list[str]:
    """The plugin names the static recommendation says run here: its suggestion, then its alternatives."""
    from precision_base.tune.recommend import read_machine, recommend

    found = recommend(read_machine())
    if found.spec is None:
        raise TuneTargetError("no precision plugin can train here: " + "; ".join(found.reasons))
    return [found.spec, *(choice.spec for choice in found.alternatives)]


def factory_ref(target: Any) -> str:
    """``target`` as a reference a fresh process can import: a ``"module:factory"`` / ``"path.py:factory"`` string
    as given, or a module-level function's ``module:qualname`` (``__main__``'s: its file's path)."""
    if isinstance(target, str):
        return target
    module, name = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
    if not callable(target) or module is None or "<" in name:
        raise TuneTargetError(
            f"{target!r} cannot be run in a fresh process: pass a module-level function (or 'module:factory', "
            "'path.py:factory') that returns the LightningModule"
        )
    if module == "__main__":
        main_file = getattr(sys.modules["__main__"], "__file__", None)
        if main_file is None:
            raise TuneTargetError(f"{name} is defined in an interactive session: define it in a file and pass "
                                  "'path.py:factory'")  # fmt: skip
        return f"{Path(main_file).resolve()}:{name}"
    return f"{module}:{name}"


def run_trial(spec: str, ref: str, settings: dict[str, Any], timeout: Optional[float]) -> dict[str, Any]:
    """One candidate in a fresh process (``python -m precision_base.tune.trial``); its record."""
    with tempfile.TemporaryDirectory(prefix="precision-tune-") as work:
        args, out = Path(work) / "args.json", Path(work) / "out.json"
        args.write_text(json.dumps({"spec": spec, "factory": ref, **settings}))
        command = [sys.executable, "-m", "precision_base.tune.trial", str(args), str(out)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"spec": spec, "status": "skipped", "reason": f"stopped at the budget's end ({timeout:.0f} s)"}
        if not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return {"spec": spec, "status": "failed", "reason": f"its process exited {done.returncode} without a "
                    f"result: {' | '.join(tail)}"}  # fmt: skip
        record: dict[str, Any] = json.loads(out.read_text())
        return record


def _trial(record: dict[str, Any], wall_s: float) -> Trial:
    trial = Trial(record["spec"], record["status"], record.get("reason", ""), wall_s=wall_s)
    times = record.get("step_s") or []
    if times:
        mid, low, high = median_interval([t * 1e3 for t in times])
        trial.step_ms, trial.step_ms_low, trial.step_ms_high = mid, low, high
    trial.peak_bytes, trial.audit_ok = record.get("peak_bytes"), record.get("audit_ok")
    trial.tensor_bytes = record.get("tensor_bytes")
    trial.skipped_steps, trial.losses = record.get("skipped_steps"), list(record.get("losses") or [])
    trial.fit_s, trial.world_size = float(record.get("fit_s", 0.0)), record.get("world_size")
    return trial


def _judge(trial: Trial, base: Trial, reference: str, tolerance: float) -> None:
    """Mark ``trial`` (status ``ok``) ``diverged`` where its losses are not finite or stray from ``base``'s."""
    trial.loss_deviation, problem = loss_deviation(trial.losses, base.losses)
    if problem is None and trial.loss_deviation is not None and trial.loss_deviation > tolerance:
        problem = f"its loss deviates {percent(trial.loss_deviation)} from {reference}'s (tolerance {tolerance:.0%})"
    if problem is not None:
        trial.status, trial.reason = "diverged", problem


def tune_precision(
    target: Any,
    *,
    candidates: Optional[Sequence[str]] = None,
    steps: int = 20,
    warmup: int = 3,
    budget_s: Optional[float] = None,
    tolerance: float = DEFAULT_TOLERANCE,
    devices: Any = 1,
    accelerator: str = "auto",
    seed: int = 0,
    on_trial: Optional[Callable[[Trial], None]] = None,
    on_start: Optional[Callable[[str, int, int], None]] = None,
) -> TuneResult:
    """Try precision plugins on the model ``target`` builds and pick the fastest that still trains.

    Args:
        target: a function with no arguments that returns the LightningModule (it brings its own data), a
            ``(LightningModule, DataLoader or LightningDataModule)`` pair, or a dict with ``model`` and
            ``datamodule`` / ``train_dataloaders``; or its reference, ``"module:factory"`` or ``"path.py:factory"``.
            Every candidate's process calls it after ``seed_everything(seed)``: same weights, same data.
        candidates: plugin names to try (default: what ``precision-plugins recommend`` says runs here).
        steps: timed optimizer steps per candidate, after ``warmup`` steps left out of the timing.
        budget_s: the whole search's seconds; a candidate is started only while the longest trial so far still
            fits, and the rest are listed as ``skipped``.
        tolerance: the largest mean relative deviation of a candidate's losses from the reference's.
        devices: the Trainer's ``devices`` for every candidate (``2``: each candidate trains in 2 processes).
        accelerator: the Trainer's ``accelerator`` for every candidate.
        on_trial: called with each candidate's row as it finishes (a progress line).
        on_start: called as each candidate's process starts, with its name, its position (0: the reference) and
            the number of runs (the reference and the candidates).

    Raises:
        TuneTargetError: ``target`` cannot be run in a fresh process, the factory fails (the reference run says how;
            nothing else is run), or the reference itself cannot train.
        ValueError: ``steps`` < 2, ``warmup`` < 0 or ``tolerance`` <= 0.
    """
    if steps < 2 or warmup < 0 or not tolerance > 0:
        raise ValueError(f"steps must be >= 2, warmup >= 0 and tolerance > 0; got {steps}, {warmup}, {tolerance}")
    ref = factory_ref(target)
    chosen = list(dict.fromkeys(candidates if candidates is not None else default_candidates()))
    if not chosen:
        raise ValueError("candidates is empty: name at least one plugin, e.g. ['fsdp:bf16-mixed']")
    reference = f"{chosen[0].partition(':')[0]}:32-true"
    settings = {"steps": steps, "warmup": warmup, "devices": devices, "accelerator": accelerator, "seed": seed}
    start, longest, trials = time.monotonic(), 0.0, list[Trial]()
    order = [reference, *(c for c in chosen if c != reference)]
    for position, spec in enumerate(order):
        elapsed = time.monotonic() - start
        if budget_s is not None and spec != reference and elapsed + longest > budget_s:
            trial = Trial(spec, "skipped", f"the budget of {budget_s:.0f} s was spent ({elapsed:.0f} s used)")
        else:
            left = None if budget_s is None or spec == reference else max(1.0, budget_s - elapsed)
            if on_start is not None:
                on_start(spec, position, len(order))
            began = time.monotonic()
            record = run_trial(spec, ref, settings, left)
            if spec == reference and record.get("factory_error"):
                raise TuneTargetError(record["reason"] + f"\n{record.get('traceback', '')}".rstrip())
            trial = _trial(record, time.monotonic() - began)
            longest = max(longest, trial.wall_s)
        if trial.status == "ok":  # judged as it finishes (the reference ran first): the progress line is final
            _judge(trial, trials[0] if trials else trial, reference, tolerance)
        trials.append(trial)
        if spec == reference and trial.status != "ok":
            raise TuneTargetError(f"the reference {reference} cannot train the model: {trial.reason}")
        if on_trial is not None:
            on_trial(trial)
    base = trials[0]
    ran = sorted((t for t in trials if t.status == "ok" and t.step_ms is not None), key=lambda t: t.step_ms or 0.0)
    rest = [t for t in trials if t not in ran]
    wall = time.monotonic() - start
    if ran:
        best = ran[0]
        ratio = best.step_ms / base.step_ms if best.step_ms and base.step_ms else float("nan")
        reason = (f"the fastest of {len(ran)} candidate(s) whose loss stays within {tolerance:.0%} of {reference}'s "
                  f"({best.step_ms:.1f} ms a step, {ratio:.2f}x {reference}'s)")  # fmt: skip
    else:
        reason = f"no candidate trained within {tolerance:.0%} of {reference}'s loss"
    overhead = max(0.0, wall - sum(t.fit_s for t in trials))
    return TuneResult(ran[0].spec if ran else None, reference, reason, [*ran, *rest], tolerance, steps, warmup,
                      overhead, wall)  # fmt: skip


__all__ = ["DEFAULT_TOLERANCE", "STATUSES", "Trial", "TuneResult", "loss_deviation", "median_interval", "percent",
           "tune_precision"]  # fmt: skip
