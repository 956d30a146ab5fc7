"""Summaries of timing samples and of ratios between two sets of samples. Pure Python, deterministic.

Conventions used by every benchmark:

* a *summary* of samples is the median with the 25th and 75th percentiles (``iqr`` = p75 - p25) and
  ``rel_iqr`` = iqr / median;
* the *ratio* of A to B is median(A) / median(B); its spread is a 95% percentile-bootstrap interval
  (resampling A and B independently, fixed seed), and, when the samples were taken in interleaved rounds,
  also the lowest and highest per-round ratio;
* A is *slower beyond spread* than B when the whole 95% interval of the ratio lies above 1 and, when the samples
  come in interleaved rounds, every round's ratio is above 1 too (load drift makes the bootstrap interval, which
  assumes independent samples, too narrow).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method) of a non-empty sequence."""
    if not values:
        raise ValueError("quantile of an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be within [0, 1], got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return float(ordered[lo])
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


def median(values: Sequence[float]) -> float:
    return quantile(values, 0.5)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """``{"n", "median", "p25", "p75", "iqr", "rel_iqr", "min", "max", "mean"}`` of ``values``."""
    med = median(values)
    p25 = quantile(values, 0.25)
    p75 = quantile(values, 0.75)
    return {
        "n": len(values),
        "median": med,
        "p25": p25,
        "p75": p75,
        "iqr": p75 - p25,
        "rel_iqr": (p75 - p25) / med if med else math.nan,
        "min": float(min(values)),
        "max": float(max(values)),
        "mean": float(sum(values) / len(values)),
    }


def bootstrap_ratio(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    q: float = 0.5,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of quantile(a, q) / quantile(b, q) (the medians by default)."""
    if not a or not b:
        raise ValueError("bootstrap_ratio needs two non-empty samples")
    rng = random.Random(seed)
    na, nb = len(a), len(b)
    ratios = []
    for _ in range(resamples):
        ra = quantile([a[rng.randrange(na)] for _ in range(na)], q)
        rb = quantile([b[rng.randrange(nb)] for _ in range(nb)], q)
        ratios.append(ra / rb)
    tail = (1.0 - level) / 2.0
    return quantile(ratios, tail), quantile(ratios, 1.0 - tail)


def ratio(
    a: Sequence[float],
    b: Sequence[float],
    *,
    rounds_a: Sequence[Sequence[float]] | None = None,
    rounds_b: Sequence[Sequence[float]] | None = None,
    resamples: int = 2000,
) -> dict[str, Any]:
    """median(a) / median(b) with its 95% bootstrap interval, per-round ratios and a verdict.

    ``rounds_a`` / ``rounds_b``: the same samples split by interleaved round (equal number of rounds), used for
    the per-round ratios. ``verdict`` is ``"slower"`` / ``"faster"`` when the whole interval lies above / below 1,
    else ``"same within spread"``. ``p20`` is the same for the 20th percentiles: other load on a shared machine only
    ever adds time, so the lower quantile is the less disturbed estimate, given as corroboration.
    """
    value = median(a) / median(b)
    lo, hi = bootstrap_ratio(a, b, resamples=resamples)
    p20 = quantile(a, 0.2) / quantile(b, 0.2)
    plo, phi = bootstrap_ratio(a, b, resamples=resamples, q=0.2)
    out: dict[str, Any] = {
        "ratio": value,
        "ci95": [lo, hi],
        "verdict": verdict(lo, hi),
        "p20": {"ratio": p20, "ci95": [plo, phi], "verdict": verdict(plo, phi)},
    }
    if rounds_a is not None and rounds_b is not None:
        per_round = [median(x) / median(y) for x, y in zip(rounds_a, rounds_b, strict=True) if x and y]
        out["per_round"] = per_round
        if per_round:
            out["round_range"] = [min(per_round), max(per_round)]
            # under drifting load the bootstrap interval (which assumes independent samples) is too narrow:
            # a verdict also needs every interleaved round to agree
            disagree = (out["verdict"] == "slower" and min(per_round) <= 1.0) or (
                out["verdict"] == "faster" and max(per_round) >= 1.0
            )
            if disagree:
                out["verdict"] = "same within spread (rounds disagree)"
    return out


def verdict(lo: float, hi: float) -> str:
    if lo > 1.0:
        return "slower"
    if hi < 1.0:
        return "faster"
    return "same within spread"


def fmt_ratio(r: dict[str, Any]) -> str:
    """``"1.02 [0.99, 1.05]"`` for a :func:`ratio` result."""
    lo, hi = r["ci95"]
    return f"{r['ratio']:.3f} [{lo:.3f}, {hi:.3f}]"


def fmt_ratio_p20(r: dict[str, Any]) -> str:
    """``"1.02 [0.99, 1.05]; p20 1.01"``: the median ratio with its interval, then the 20th-percentile ratio."""
    text = fmt_ratio(r)
    if "p20" in r:
        text += f"; p20 {r['p20']['ratio']:.3f}"
    return text
