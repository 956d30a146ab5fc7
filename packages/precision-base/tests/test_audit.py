"""``PrecisionAudit`` in real single-process fits: deliberately wrong plugins are caught with the right row.

Each wrong plugin is a real plugin (the test dummy, :mod:`precision_testsupport.dummy_plugin`) whose behaviour or
``dtypes()`` table was changed in one place, registered in-process under a backend name of its own and resolved by
name, so the audit meets it exactly as it meets a third-party plugin. The wrong reduction (a collective in another
dtype than the table) needs a sharded run: ``tests-integration/test_audit_fits.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import pytorch_lightning
import torch

import precision_base
from precision_base import DtypeTable, PluginInfo, PrecisionAudit, PrecisionAuditError
from precision_base.audit import AuditReport, AuditRow
from precision_base.audit.callback import ENV_VARIABLE, audit_from_env
from precision_base.errors import PrecisionAuditWarning
from precision_base.namespaces import for_namespace
from precision_testsupport.dummy import INFO
from precision_testsupport.dummy_plugin import DummyPrecision
from precision_testsupport.models import QUIET, TinyRegressor


class NoAutocast(DummyPrecision):
    """``bf16-mixed`` whose table says bf16 compute under bf16 autocast, but whose forward enables no autocast."""

    backend = "no-autocast"
    precisions = ("bf16-mixed",)

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()


class CastsBuffers(DummyPrecision):
    """``bf16-true`` (the module, buffers included, cast to bfloat16) whose table says buffers stay float32."""

    backend = "casts-buffers"
    precisions = ("bf16-true",)

    def dtypes(self) -> DtypeTable:
        return dataclasses.replace(super().dtypes(), buffers="float32")


class NoFloat8(DummyPrecision):
    """Declares ``fp8-tensorwise`` (an extra precision based on ``bf16-mixed``, whose matmuls its info declares
    float8) and converts no layer to float8."""

    backend = "no-float8"
    precisions = ("bf16-mixed",)
    extra_precisions = (("fp8-tensorwise", "bf16-mixed"),)
    extra_matmuls = (("fp8-tensorwise", "float8"),)

    def __init__(self, precision: str) -> None:
        self.precision = self.canonical_precision(precision)
        self.note = ""

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device_type, dtype=torch.bfloat16)

    def convert_input(self, data: Any) -> Any:
        return data

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def dtypes(self) -> DtypeTable:
        return DtypeTable("float32", "bfloat16", "float32", "float32", "float32", "float32", "bfloat16")


class SkipsSteps(DummyPrecision):
    """``32-true`` whose first ``skipped`` optimizer steps run the closure (forward, backward) but not the optimizer,
    as a loss scaler does for inf/NaN gradients (``16-mixed``'s first steps); ``skipped=None`` never steps."""

    backend = "skips-steps"
    precisions = ("32-true",)
    skipped: Any = 1

    def __init__(self, precision: str) -> None:
        super().__init__(precision)
        self.calls = 0

    def optimizer_step(self, optimizer: Any, model: Any, closure: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.skipped is None or self.calls <= self.skipped:
            return closure()  # gradients computed, the step skipped
        return super().optimizer_step(optimizer, model, closure, **kwargs)


class NeverSteps(SkipsSteps):
    backend = "never-steps"
    skipped = None


@contextlib.contextmanager
def _registered(cls: type) -> Iterator[str]:
    """Register ``cls`` in-process; yields its plugin name."""
    precision = cls.extra_precisions[0][0] if cls.extra_precisions else cls.precisions[0]
    info = PluginInfo(
        backend=cls.backend,
        precisions=tuple(cls.precisions),
        plugin_class=f"{__name__}:{cls.__qualname__}",
        extra_precisions=tuple(cls.extra_precisions),
        extra_matmuls=tuple(getattr(cls, "extra_matmuls", ())),
    )
    with precision_base.registered(info, plugin_class=cls):
        yield f"{cls.backend}:{precision}"


def _fit(spec: str, audit: Any, steps: int = 2, trainer_class: Any = None, **kwargs: Any) -> Any:
    trainer_class = trainer_class or precision_base.Trainer
    options = {**QUIET, **kwargs}
    trainer = trainer_class(
        precision_plugin=spec, accelerator="cpu", devices=1, max_steps=steps, callbacks=[audit], **options
    )
    pl_namespace = trainer_class.__module__.split(".")[0] == "precision_base" and trainer_class.__module__.endswith(
        "pytorch_lightning"
    )
    model_class = for_namespace(TinyRegressor, "pytorch_lightning") if pl_namespace else TinyRegressor
    trainer.fit(model_class(hidden=16, optimizer="adamw"))
    return trainer


def _rows(report: AuditReport, role: str) -> list[AuditRow]:
    return [row for row in report.rows if row.role == role]


@pytest.fixture
def dummy() -> Iterator[None]:
    with precision_base.registered(INFO, distribution="precision-dummy", version="0.3.1"):
        yield


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true"])
def test_a_correct_plugin_passes_strict(dummy: None, precision: str) -> None:
    audit = PrecisionAudit(strict=True)
    _fit(f"dummy:{precision}", audit)
    assert audit.ok is True
    assert audit.report is not None
    roles = {row.role for row in audit.report.rows}
    assert {"parameters", "forward parameters", "compute", "gradients", "optimizer state", "buffers"} <= roles
    assert {"inputs", "loss scale", "autocast"} <= roles
    compute = _rows(audit.report, "compute")
    expected = "float32" if precision == "32-true" else "bfloat16"
    assert [(r.subject, r.observed) for r in compute] == [("Linear x2: net.*", expected)]


def test_bf16_compute_declared_without_autocast_is_caught() -> None:
    audit = PrecisionAudit()
    with _registered(NoAutocast) as spec, pytest.warns(PrecisionAuditWarning) as caught:
        _fit(spec, audit)
    assert audit.ok is False
    assert audit.report is not None
    mismatches = {(r.role, r.subject, r.expected, r.observed) for r in audit.report.mismatches}
    assert mismatches == {
        ("autocast", "Linear x2: net.*", "bfloat16", "off"),
        ("compute", "Linear x2: net.*", "bfloat16", "float32"),
    }
    (warning,) = [w for w in caught if issubclass(w.category, PrecisionAuditWarning)]
    message = str(warning.message)
    assert message.startswith("The precision that ran differs from no-autocast:bf16-mixed's dtypes() table:")
    assert "compute" in message
    assert "MISMATCH" in message
    assert "buffers" not in message, "only the rows that differ"


def test_buffers_declared_float32_but_cast_is_caught_and_strict_fails_the_run() -> None:
    audit = PrecisionAudit(strict=True)
    with _registered(CastsBuffers) as spec, pytest.raises(PrecisionAuditError) as raised:
        _fit(spec, audit, steps=3)
    assert audit.report is not None
    (row,) = audit.report.mismatches
    assert (row.role, row.subject, row.expected, row.observed) == (
        "buffers", "TinyRegressor x1: <root>", "float32", "bfloat16",
    )  # fmt: skip
    assert "TinyRegressor x1: <root>" in str(raised.value)


def test_fp8_declared_with_no_layer_converted_is_caught() -> None:
    audit = PrecisionAudit(strict=True)
    with _registered(NoFloat8) as spec, pytest.raises(PrecisionAuditError):
        _fit(spec, audit)
    assert audit.report is not None
    (row,) = audit.report.mismatches
    assert (row.role, row.subject, row.expected) == ("float8", "converted layers", "float8 GEMMs in at least one layer")
    assert row.observed == "no layer ran float8 GEMMs (Linear x2)"


def test_every_hook_is_removed_after_the_audited_steps(dummy: None) -> None:
    """Hooks exist during the first step only; later steps run with none, and nothing is left after fit."""
    seen: list[int] = []

    class Count(pl.Callback):
        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            modules = list(pl_module.modules())
            seen.append(sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in modules))

    audit = PrecisionAudit(steps=1)
    trainer = precision_base.Trainer(
        precision_plugin="dummy:bf16-mixed", accelerator="cpu", devices=1, max_steps=3,
        callbacks=[audit, Count()], **QUIET,
    )  # fmt: skip
    model = TinyRegressor(hidden=16, optimizer="adamw")
    trainer.fit(model)
    assert seen[0] > 0, seen
    assert seen[1:] == [0, 0], seen
    optimizer = trainer.optimizers[0]
    assert not optimizer._optimizer_step_pre_hooks
    assert not optimizer._optimizer_step_post_hooks
    assert "convert_input" not in vars(trainer.precision_plugin)
    assert audit.report is not None
    assert audit.report.steps == 1


def test_no_hook_without_the_audit(dummy: None) -> None:
    trainer = _fit("dummy:bf16-mixed", pl.Callback())
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in trainer.lightning_module.modules())


def test_the_report_goes_to_every_logger(dummy: None, tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger

    audit = PrecisionAudit()
    _fit("dummy:bf16-true", audit, logger=CSVLogger(tmp_path, name="run"))
    (metrics,) = tmp_path.rglob("metrics.csv")
    header = metrics.read_text().splitlines()[0].split(",")
    assert {"precision_audit/ok", "precision_audit/mismatches"} <= set(header)
    (text,) = tmp_path.rglob("precision_audit.txt")
    assert text.read_text().startswith("precision audit of dummy:bf16-true, rank 0, 1 optimizer step(s): ok")
    (data,) = tmp_path.rglob("precision_audit.json")
    assert AuditReport.from_dict(json.loads(data.read_text())) == audit.report


def test_pytorch_lightning_namespace(dummy: None) -> None:
    import precision_base.pytorch_lightning as ptl

    audit = ptl.PrecisionAudit(strict=True)
    assert isinstance(audit, pytorch_lightning.Callback)
    _fit("dummy:bf16-mixed", audit, trainer_class=ptl.Trainer)
    assert audit.ok is True


def test_a_plugin_without_a_table_is_refused() -> None:
    audit = PrecisionAudit()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=1, callbacks=[audit], **QUIET)
    with pytest.raises(TypeError, match="compares a run with the precision plugin's dtypes\\(\\) table"):
        trainer.fit(TinyRegressor())


@pytest.mark.parametrize("steps", [0, -1, 1.5, True])
def test_steps_must_be_a_positive_int(steps: Any) -> None:
    with pytest.raises(ValueError, match="steps must be a positive int"):
        PrecisionAudit(steps=steps)


def test_the_environment_variable_adds_the_callback(dummy: None, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setenv(ENV_VARIABLE, "strict,steps=2")
    trainer = precision_base.Trainer(precision_plugin="dummy:bf16-mixed", accelerator="cpu", devices=1, max_steps=2,
                                     **QUIET)  # fmt: skip
    (audit,) = [c for c in trainer.callbacks if isinstance(c, PrecisionAudit)]
    assert (audit.steps, audit.strict, audit.print_report) == (2, True, True)
    trainer.fit(TinyRegressor(hidden=16))
    assert "precision audit of dummy:bf16-mixed, rank 0, 2 optimizer step(s): ok" in capsys.readouterr().out


def test_the_environment_variable_for_the_other_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VARIABLE, "1")
    callback = audit_from_env("pytorch_lightning")
    assert isinstance(callback, pytorch_lightning.Callback)
    assert not callback.strict
    monkeypatch.setenv(ENV_VARIABLE, "0")
    assert audit_from_env() is None
    monkeypatch.setenv(ENV_VARIABLE, "loud")
    with pytest.raises(ValueError, match="PRECISION_PLUGINS_AUDIT='loud' is not understood"):
        audit_from_env()


def test_the_class_is_built_for_each_namespace() -> None:
    built = for_namespace(PrecisionAudit, "pytorch_lightning")
    assert built is precision_base.pytorch_lightning.PrecisionAudit  # type: ignore[attr-defined]


def test_no_warning_from_a_correct_run(dummy: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionAuditWarning)
        _fit("dummy:bf16-mixed", PrecisionAudit())


def test_a_skipped_first_step_is_waited_for_and_the_next_applied_step_audited() -> None:
    """A loss scaler's skipped step shows no gradients: the audit observes the next applied one (strict passes)."""
    audit = PrecisionAudit(strict=True)
    with _registered(SkipsSteps) as spec:
        _fit(spec, audit, steps=4)
    assert audit.ok is True
    assert audit.report is not None
    assert audit.report.steps == 1
    assert [r.observed for r in _rows(audit.report, "gradients")] == ["float32"]


def test_a_run_whose_optimizer_never_steps_is_a_mismatch() -> None:
    from precision_base.audit.callback import SKIPPED_STEPS_WAITED

    audit = PrecisionAudit()
    with _registered(NeverSteps) as spec, pytest.warns(PrecisionAuditWarning):
        _fit(spec, audit, steps=SKIPPED_STEPS_WAITED + 3)
    assert audit.ok is False
    assert audit.report is not None
    assert [r.observed for r in _rows(audit.report, "gradients") if not r.ok] == ["no optimizer step ran"]


def test_float8_is_what_the_plugin_declares_and_its_payload_is_found() -> None:
    """A precision is audited for float8 GEMMs when its backend's PluginInfo declares float8 matmuls for it
    (``extra_matmuls``), whatever its name; torchao's MXTensor keeps its float8 data in ``qdata``
    (Float8TrainingTensor in ``_data``): the watch finds either (the real MXFP8 fit: test_precision_schedule_fp8)."""
    from precision_base.audit.compare import declares_float8
    from precision_base.audit.observe import _float8_payload
    from precision_base.registry import registered

    info = PluginInfo(
        backend="eightish", precisions=("bf16-mixed",), plugin_class="eightish.plugin:Plugin",
        extra_precisions=(("fp8-blocks", "bf16-mixed"), ("mx6-any", "bf16-mixed")),
        extra_matmuls=(("fp8-blocks", "float8"),),
    )  # fmt: skip

    class Plugin:
        backend, precision = "eightish", "fp8-blocks"

    with registered(info):
        assert declares_float8(Plugin())
        Plugin.precision = "mx6-any"
        assert not declares_float8(Plugin()), "a name alone says nothing"
    Plugin.precision = "fp8-blocks"
    assert not declares_float8(Plugin()), "no registered backend: no declaration"

    class Holder(torch.Tensor):
        pass

    for name in ("qdata", "_data"):
        holder = torch.zeros(4).as_subclass(Holder)
        setattr(holder, name, torch.zeros(4, dtype=torch.float8_e4m3fn))
        assert _float8_payload(holder) is getattr(holder, name)
    plain8 = torch.zeros(4, dtype=torch.float8_e4m3fn)
    assert _float8_payload(plain8) is plain8
    assert _float8_payload(torch.zeros(4)) is None
    assert _float8_payload("not a tensor") is None
