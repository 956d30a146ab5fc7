"""The docs' generated text (tools/docgen/, between cog markers in the pages) is current, and every documented
error is really raised."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.docgen import benchmarks, errors, plugins  # noqa: E402
from tools.docgen.__main__ import pages  # noqa: E402


def test_generated_text_in_the_pages_is_current() -> None:
    """``python -m tools.docgen --check`` (``cog --check`` over the pages with a block): what CI runs."""
    done = subprocess.run(
        [sys.executable, "-m", "tools.docgen", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"stale generated text; run python -m tools.docgen\n{done.stdout}{done.stderr}"
    )


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_no_documented_error_went_missing(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "no error was raised" not in text, (
        "a documented error is no longer raised: update the docs"
    )


def test_error_sections_show_each_error_type() -> None:
    text = errors.spec_errors() + errors.registry_errors() + errors.trainer_errors()
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
    text = plugins.dtypes()
    assert "`precision-fsdp` was not installed where these docs were built" in text
    assert "`precision-deepspeed` was not installed" in text


def test_the_benchmarks_summary_leads_with_its_charts() -> None:
    page = (ROOT / "docs" / "benchmarks" / "index.md").read_text(encoding="utf-8")
    shown = benchmarks.on_site(page)
    title = page.partition("\n")[0]
    assert shown.startswith(f"{title}\n\n## At a glance\n")
    assert "- Details: [overhead-fsdp](overhead-fsdp.md)" in shown
    assert shown.endswith(page.partition("\n")[2])
