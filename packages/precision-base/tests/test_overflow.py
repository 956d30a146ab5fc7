"""``precision_base.kit.overflow``: the ``max_skipped_steps`` watch both plugins use (pure Python, no torch)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import precision_base
from precision_base.errors import OverflowStormError
from precision_base.kit.overflow import DEFAULT_MAX_SKIPPED_STEPS, OverflowWatch, check_limit


def test_error_is_exported_and_a_runtime_error() -> None:
    assert precision_base.OverflowStormError is OverflowStormError
    assert "OverflowStormError" in precision_base.__all__
    assert issubclass(OverflowStormError, precision_base.PrecisionPluginError)
    assert issubclass(OverflowStormError, RuntimeError)
    assert DEFAULT_MAX_SKIPPED_STEPS == 50


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_limit_must_be_a_positive_int_or_none(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        OverflowWatch(bad)  # type: ignore[arg-type]
    assert str(info.value) == f"max_skipped_steps must be a positive int or None, got {bad!r}"
    assert check_limit(None) is None
    assert check_limit(3) == 3


def test_warns_once_at_half_then_raises_at_the_limit() -> None:
    watch = OverflowWatch(4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        watch.after_step(True, None, "x:bf16-mixed")
        watch.after_step(True, None, "x:bf16-mixed")
        watch.after_step(True, None, "x:bf16-mixed")
        with pytest.raises(OverflowStormError) as info:
            watch.after_step(True, None, "x:bf16-mixed")
    assert [str(w.message) for w in seen] == [
        "x:bf16-mixed: 2 optimizer steps in a row were skipped because the gradients held inf or NaN; training "
        "stops at 4 (max_skipped_steps)."
    ]
    assert all(w.category is RuntimeWarning for w in seen)
    assert str(info.value) == (
        "x:bf16-mixed: 4 optimizer steps in a row were skipped because the gradients held inf or NaN, so training "
        "stopped: the model no longer learns. Check the loss and the weights for inf/NaN, lower the learning rate. "
        "(max_skipped_steps=4; None never stops.)"
    )
    assert watch.skipped_total == 4


def test_an_applied_step_resets_the_run_and_a_loss_scale_is_named() -> None:
    watch = OverflowWatch(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        watch.after_step(True, 8.0, "x:16-mixed")
        watch.after_step(False, 4.0, "x:16-mixed")
        watch.after_step(True, 4.0, "x:16-mixed")
        with pytest.raises(
            OverflowStormError, match=r"at every loss scale tried \(scale now 2\).*or train in bf16-mixed"
        ):
            watch.after_step(True, 2.0, "x:16-mixed")
    assert watch.skipped_total == 3


def test_none_never_stops_but_still_counts_and_a_subclass_can_be_raised() -> None:
    quiet = OverflowWatch(None)
    for _ in range(100):
        quiet.after_step(True, None, "x:bf16-mixed")
    assert quiet.skipped_total == 100

    class BackendStorm(OverflowStormError):
        pass

    with pytest.raises(BackendStorm):
        OverflowWatch(1, BackendStorm).after_step(True, None, "x:bf16-mixed")


def test_importing_precision_base_stays_light() -> None:
    code = (
        "import sys, precision_base; precision_base.OverflowStormError; "
        "print(sorted(m for m in ('torch', 'lightning', 'numpy') if m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_after_scaled_step_counts_a_fallen_scale_and_stats_report_it() -> None:
    from precision_base.kit.overflow import skipped_stats

    watch = OverflowWatch(10)
    watch.after_scaled_step(1024.0, 1024.0, "fsdp:16-mixed")
    assert watch.skipped_in_a_row == 0
    watch.after_scaled_step(1024.0, 512.0, "fsdp:16-mixed")
    assert (watch.skipped_in_a_row, watch.skipped_total) == (1, 1)
    assert watch.stats() == {"skipped_steps": 1.0, "nonfinite_grad_steps": 1.0}
    assert watch.stats(at_least=3) == skipped_stats(3) == {"skipped_steps": 3.0, "nonfinite_grad_steps": 3.0}
