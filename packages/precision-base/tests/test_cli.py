"""The precision-plugins command in-process (the installed-venv tests cover list/doctor across statuses)."""

from __future__ import annotations

import pytest

from precision_base import cli


def test_show_prints_dtypes_and_strategy(dummy_registered: type, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", "dummy:bf16"]) == 0
    out = capsys.readouterr().out
    assert "plugin:       precision_testsupport.dummy_plugin.DummyPrecision" in out
    assert "spec:         dummy:bf16-mixed" in out
    assert "distribution: precision-dummy (in-process) 0.3.1" in out
    assert "strategy:     any non-sharded Lightning strategy" in out
    rows = {
        line.split()[0]: line.split()[1]
        for line in out.splitlines()
        if line.startswith("  ") and len(line.split()) == 2
    }
    assert rows["parameters"] == "float32"
    assert rows["compute"] == "bfloat16"
    assert rows["autocast"] == "bfloat16"
    assert rows["inputs"] == "float32"


@pytest.mark.parametrize(
    ("argv", "words"),
    [(["show", "dummy:16-mixed"], "does not offer '16-mixed'"), (["show", ""], "empty precision plugin name")],
)
def test_show_bad_input_is_one_line_and_exit_2(
    dummy_registered: type, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert words in captured.err


def test_list_json_includes_in_process_plugin(dummy_registered: type, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert cli.main(["list", "--json"]) == 0
    entries = {e["backend"]: e for e in json.loads(capsys.readouterr().out)}
    assert entries["dummy"]["status"] == "ok"
    assert entries["dummy"]["precisions"] == ["32-true", "bf16-true", "bf16-mixed"]


def test_unknown_command_exits_nonzero() -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["frobnicate"])
    assert info.value.code == 2
