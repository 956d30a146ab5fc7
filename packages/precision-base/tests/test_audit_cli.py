"""``precision-plugins audit SCRIPT [ARGS]``: an unchanged training script, audited; the report printed at rank 0."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from precision_base.audit.callback import ENV_VARIABLE
from precision_base.cli import main

SCRIPT = textwrap.dedent(
    """
    import sys, contextlib, dataclasses
    import precision_base
    from precision_testsupport.dummy import INFO
    from precision_testsupport.dummy_plugin import DummyPrecision
    from precision_testsupport.models import QUIET, TinyRegressor

    class WrongBuffers(DummyPrecision):
        backend = "wrong-buffers"
        precisions = ("bf16-true",)

        def dtypes(self):
            return dataclasses.replace(super().dtypes(), buffers="float32")

    wrong = precision_base.PluginInfo(backend="wrong-buffers", precisions=("bf16-true",), plugin_class="x:WrongBuffers")
    spec = sys.argv[1]
    with precision_base.registered(INFO), precision_base.registered(wrong, plugin_class=WrongBuffers):
        trainer = precision_base.Trainer(precision_plugin=spec, accelerator="cpu", devices=1, max_steps=2, **QUIET)
        trainer.fit(TinyRegressor(hidden=8))
    print("script finished")
    """
)


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(ENV_VARIABLE, "0")  # restored after the test: the command sets it
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def test_audit_prints_the_report_of_an_unchanged_script(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--strict", str(script), "dummy:bf16-mixed"]) == 0
    out = capsys.readouterr().out
    assert "precision audit of dummy:bf16-mixed, rank 0, 1 optimizer step(s): ok" in out
    assert re.search(r"^compute +Linear x2: net\.\* +bfloat16 +bfloat16 +ok$", out, re.MULTILINE), out
    assert out.rstrip().endswith("script finished")


def test_a_strict_mismatch_exits_1_with_the_rows(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--strict", "--steps", "2", str(script), "wrong-buffers:bf16-true"]) == 1
    captured = capsys.readouterr()
    assert "precision audit of wrong-buffers:bf16-true, rank 0, 2 optimizer step(s): 1 mismatch(es)" in captured.out
    assert captured.err.startswith(
        "precision-plugins audit: The precision that ran differs from wrong-buffers:bf16-true's dtypes() table:"
    )
    assert "buffers  TinyRegressor x1: <root>  float32   bfloat16  MISMATCH" in captured.err
    assert "script finished" not in captured.out


def test_without_strict_the_script_runs_on_and_warns(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from precision_base.errors import PrecisionAuditWarning

    with pytest.warns(PrecisionAuditWarning, match="buffers"):
        assert main(["audit", str(script), "wrong-buffers:bf16-true"]) == 0
    assert "script finished" in capsys.readouterr().out


def test_steps_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["audit", "--steps", "0", "train.py"])
    assert exited.value.code == 2
    assert "steps must be a positive int, got '0'" in capsys.readouterr().err
