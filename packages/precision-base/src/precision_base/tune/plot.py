"""The picture of a precision search (``precision-plugins recommend --measure ... --out DIR`` writes ``DIR/tune.png``):
each candidate's loss per step against the reference's, and each candidate's median step time, the pick in green.
It needs matplotlib, which precision-base does not require: [`draw`][precision_base.tune.plot.draw] raises
``ImportError`` without it, and the command says so."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from precision_base.tune.search import TuneResult


def draw(result: TuneResult, path: Path) -> Path:
    """``result`` as a PNG at ``path`` (150 dpi); the candidates that produced no step time are left out of both
    panels (the table says why)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [t for t in result.candidates if t.step_ms is not None]
    fig, (curves, bars) = plt.subplots(2, 1, figsize=(7, 8.5), layout="constrained")
    for i, trial in enumerate(ran):
        losses = [x if isinstance(x, (int, float)) and math.isfinite(x) else float("nan") for x in trial.losses]
        curves.plot(range(1, len(losses) + 1), losses, lw=1.4, color=f"C{i % 10}", label=trial.spec)
    curves.set_title(f"loss per step (reference {result.reference})")
    curves.set_xlabel("step")
    curves.set_ylabel("loss")
    curves.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=min(3, max(1, len(ran))), frameon=False)
    colors: list[Any] = ["C2" if t.spec == result.picked else "C7" for t in ran]
    labels = [t.spec if t.status == "ok" else f"{t.spec} ({t.status})" for t in ran]
    bars.barh(labels, [t.step_ms or 0.0 for t in ran], color=colors)
    bars.invert_yaxis()
    bars.set_title("median ms per optimizer step (green: picked; a status: not picked, see the table)")
    bars.set_xlabel("ms per step")
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


__all__ = ["draw"]
