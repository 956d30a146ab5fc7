"""The docs' generated sections (tools/docs_hooks.py) render, and every documented error is really raised."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools import docs_hooks  # noqa: E402


@pytest.mark.parametrize("page", sorted((ROOT / "docs").rglob("*.md")), ids=lambda p: p.name)
def test_every_marker_renders(page: Path) -> None:
    text = docs_hooks.render(page.read_text(encoding="utf-8"))
    assert "<!-- gen:" not in text
    assert "no error was raised" not in text, "a documented error is no longer raised: update the docs"


def test_error_sections_show_each_error_type() -> None:
    text = docs_hooks.render("<!-- gen:spec-errors -->\n<!-- gen:registry-errors -->\n<!-- gen:trainer-errors -->")
    for name in (
        "InvalidSpecError",
        "SpecTypeError",
        "UnknownBackendError",
        "UnsupportedPrecisionError",
        "BackendDisabledError",
        "PluginLoadError",
        "PluginRequirementError",
        "ContractVersionError",
        "DuplicateBackendError",
        "InvalidPluginInfoError",
        "TrainerConfigurationError",
    ):
        assert name in text, name


def test_a_missing_backend_gets_a_visible_note(monkeypatch: pytest.MonkeyPatch) -> None:
    import precision_base

    monkeypatch.setattr(precision_base, "list_plugins", lambda: [])
    text = docs_hooks.gen_dtypes(None)
    assert "`precision-fsdp` was not installed where these docs were built" in text
    assert "`precision-deepspeed` was not installed" in text


def test_generated_text_in_the_pages_is_current() -> None:
    stale = docs_hooks.stale_pages()
    assert not stale, (
        f"pages whose embedded code differs from the file: {stale}; run python -m tools.docs_hooks --write"
    )
