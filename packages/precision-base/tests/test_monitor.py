"""``PrecisionMonitor`` in real single-process fits: plugins that report nothing log nothing; both namespaces."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import pytorch_lightning

import precision_base
from precision_base.callbacks.monitor import PrecisionMonitorImpl
from precision_base.namespaces import for_namespace
from precision_testsupport.models import QUIET, TinyRegressor


def _csv_header(root: Path) -> list[str]:
    paths = list(root.rglob("metrics.csv"))
    if not paths:
        return []
    with paths[0].open() as f:
        return next(csv.reader(f))


class _Reporting(pl.plugins.precision.Precision):
    """A real Lightning precision plugin that reports a loss scale that grows by one each step."""

    def __init__(self) -> None:
        self.calls = 0

    def precision_stats(self, strategy: Any = None) -> dict[str, float]:
        assert type(strategy).__name__ == "SingleDeviceStrategy", "the monitor passes the Trainer's strategy"
        self.calls += 1
        return {"loss_scale": float(self.calls)}


def _fit(trainer_class: Any, tmp_path: Path, plugins: list[Any], monitor: Any, steps: int = 4) -> None:
    kwargs = {k: v for k, v in QUIET.items() if k != "logger"}
    pl_ns = trainer_class.__module__.split(".")[0] == "pytorch_lightning"
    loggers = pytorch_lightning.loggers if pl_ns else pl.loggers
    trainer = trainer_class(
        **kwargs,
        logger=loggers.CSVLogger(tmp_path, name="run"),
        callbacks=[monitor],
        plugins=plugins,
        max_steps=steps,
        accelerator="cpu",
        devices=1,
    )
    model_class = for_namespace(TinyRegressor, "pytorch_lightning") if pl_ns else TinyRegressor
    trainer.fit(model_class(samples=128))


def test_plugin_without_stats_logs_nothing(tmp_path: Path) -> None:
    _fit(pl.Trainer, tmp_path, [], precision_base.PrecisionMonitor())
    assert not [c for c in _csv_header(tmp_path) if c.startswith("precision/")]


def test_reported_numbers_reach_the_logger_every_n_steps(tmp_path: Path) -> None:
    plugin = _Reporting()
    _fit(pl.Trainer, tmp_path, [plugin], precision_base.PrecisionMonitor(logging_interval=2), steps=5)
    (path,) = tmp_path.rglob("metrics.csv")
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["precision/loss_scale"]) for r in rows] == [("2", "1.0"), ("4", "2.0")]


def test_pytorch_lightning_build(tmp_path: Path) -> None:
    from precision_base.pytorch_lightning import PrecisionMonitor

    assert issubclass(PrecisionMonitor, pytorch_lightning.Callback)
    assert issubclass(PrecisionMonitor, PrecisionMonitorImpl)
    plugin = for_namespace(_Reporting, "pytorch_lightning")()
    _fit(pytorch_lightning.Trainer, tmp_path, [plugin], PrecisionMonitor(), steps=2)
    assert _csv_header(tmp_path) == ["precision/loss_scale", "step"]


def test_no_logger_is_refused() -> None:
    trainer = pl.Trainer(**QUIET, callbacks=[precision_base.PrecisionMonitor()], max_steps=1, accelerator="cpu")
    with pytest.raises(pl.utilities.exceptions.MisconfigurationException, match="has no logger"):
        trainer.fit(TinyRegressor(samples=32))


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_bad_interval(bad: Any) -> None:
    with pytest.raises(ValueError, match="logging_interval must be a positive int"):
        precision_base.PrecisionMonitor(logging_interval=bad)
