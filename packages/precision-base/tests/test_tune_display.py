"""What ``recommend --measure`` shows while and after it measures: percentages with two significant digits, the
progress bar on a terminal and one line per candidate elsewhere (the search itself: tests-integration)."""

from __future__ import annotations

import io

import pytest

from precision_base.tune.command import Progress
from precision_base.tune.search import Trial, TuneResult, percent


@pytest.mark.parametrize(
    ("fraction", "shown"),
    [(0.0123, "1.2%"), (0.00034, "0.034%"), (0.25, "25%"), (1.5, "150%"), (0.0, "0%"), (0.099, "9.9%"),
     (0.000012, "0.0012%")],
)  # fmt: skip
def test_percent_keeps_two_significant_digits(fraction: float, shown: str) -> None:
    assert percent(fraction) == shown


def _result(deviation: float) -> TuneResult:
    rows = [Trial("fsdp:bf16-mixed", "ok", step_ms=5.0, loss_deviation=deviation),
            Trial("fsdp:32-true", "ok", step_ms=10.0, loss_deviation=0.0)]  # fmt: skip
    return TuneResult("fsdp:bf16-mixed", "fsdp:32-true", "fastest", rows, 0.1, 4, 1, 1.0, 2.0)


def test_the_table_shows_a_small_deviation_instead_of_rounding_it_to_zero() -> None:
    table = _result(0.00034).render()
    row = next(line for line in table.splitlines() if line.startswith("fsdp:bf16-mixed *"))
    assert row.split() == ["fsdp:bf16-mixed", "*", "ok", "5.0", "0.50x", "0.034%"]
    assert "0.0%" not in table


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_naming_the_candidate_that_trains_and_a_line_per_finished_one() -> None:
    stream = _Terminal()
    progress = Progress(stream)
    progress.start("fsdp:32-true", 0, 2)
    assert progress.bar is not None
    assert progress.bar.total == 2
    assert "training fsdp:32-true" in stream.getvalue()
    progress.finish(Trial("fsdp:32-true", "ok", step_ms=12.5, wall_s=3.0))
    progress.start("fsdp:bf16-mixed", 1, 2)
    assert "training fsdp:bf16-mixed" in stream.getvalue()
    assert progress.bar.n == 1
    progress.finish(Trial("fsdp:bf16-mixed", "refused", reason="not here", wall_s=1.0))
    progress.close()
    shown = stream.getvalue()
    assert "[measure] fsdp:32-true: ok, 12.5 ms/step (3 s)\n" in shown
    assert "[measure] fsdp:bf16-mixed: refused, not here (1 s)\n" in shown
    assert "\r" in shown  # the bar redraws in place


def test_a_log_gets_one_plain_line_per_candidate_and_no_bar() -> None:
    stream = io.StringIO()
    progress = Progress(stream)
    progress.start("fsdp:32-true", 0, 2)
    progress.finish(Trial("fsdp:32-true", "ok", step_ms=12.5, wall_s=3.0))
    progress.start("fsdp:bf16-mixed", 1, 2)
    progress.finish(Trial("fsdp:bf16-mixed", "diverged", reason="the loss became inf at step 1", wall_s=2.0))
    progress.close()
    assert progress.bar is None
    assert stream.getvalue() == (
        "[measure] fsdp:32-true: ok, 12.5 ms/step (3 s)\n"
        "[measure] fsdp:bf16-mixed: diverged, the loss became inf at step 1 (2 s)\n"
    )
