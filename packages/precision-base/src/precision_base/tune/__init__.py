"""Measure, don't guess: [`tune_precision`][precision_base.tune.search.tune_precision] tries precision plugins on
the user's own model, each in a fresh process, and picks the fastest whose loss stays close to ``32-true``'s
(``precision-plugins recommend --measure`` from the command line)."""

from precision_base.tune.search import DEFAULT_TOLERANCE, STATUSES, Trial, TuneResult, tune_precision

__all__ = ["DEFAULT_TOLERANCE", "STATUSES", "Trial", "TuneResult", "tune_precision"]
