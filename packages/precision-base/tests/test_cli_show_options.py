"""``precision-plugins show SPEC --option KEY=VALUE``: plugin options reach resolve() (real installed fsdp plugin)."""

from __future__ import annotations

import json

import pytest

from precision_base.cli import main


def test_show_with_keep_fp32_option(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip(
        "precision_fsdp", reason="needs precision-fsdp installed: runs in its cells (tools/matrix.toml [tests])"
    )
    assert main(["show", "fsdp:bf16-mixed", "--json", "--option", "keep_fp32=('lm_head', 'layers.*.norm')"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["describe"]["keep_fp32 (FSDP2 only)"]["modules"] == "'lm_head', 'layers.*.norm'"
    assert any("keep_fp32" in note for note in data["notes"])


def test_malformed_option_is_refused() -> None:
    with pytest.raises(SystemExit, match="--option expects KEY=VALUE"):
        main(["show", "dummy:32-true", "--option", "no-equals-sign"])
