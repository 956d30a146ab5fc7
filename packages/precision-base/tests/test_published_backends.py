"""The backends this project publishes are read from the file every build writes (``registry/published.json``, from
the repository's package list), never from precision-base's code: the install line for a backend that is not
installed, the recommendation on a machine without a backend and the empty listing all follow that file, and say
nothing they could not know without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precision_base import cli, registry
from precision_base.registry import statuses
from precision_base.registry.discovery import ENTRY_POINT_GROUP
from precision_base.tune.recommend import MachineFacts, recommend
from precision_testsupport.sites import PluginSite


@pytest.fixture
def fourth(monkeypatch: pytest.MonkeyPatch) -> None:
    """A package list with one more published plugin, as a build would write it."""
    monkeypatch.setattr(statuses, "_published_file", lambda: (("tpu", "precision-tpu"),))


def test_the_installed_precision_base_carries_the_file_its_build_wrote() -> None:
    path = Path(statuses.__file__).with_name("published.json")
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written, "the build wrote no published plugin"
    assert statuses.published_distributions() == written
    assert all(dist.startswith("precision-") for dist in written.values())


def test_a_newly_published_backend_gets_its_install_line_without_a_code_change(fourth: None) -> None:
    assert statuses.unknown_backend_message("tpu", []) == (
        "no precision plugin is registered for backend 'tpu'. Installed backends: none. "
        "To use it, run: pip install precision-tpu"
    )
    assert "Did you mean 'tpu'?" in statuses.unknown_backend_message("tpv", ["lite"])
    assert recommend(MachineFacts(cpu_bf16=True)).reasons[-1] == (
        "backend: none installed that can be used; pip install precision-tpu"
    )


def test_without_the_file_no_install_line_is_promised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statuses, "_published_file", lambda: ())
    assert statuses.unknown_backend_message("fsdp", []) == (
        "no precision plugin is registered for backend 'fsdp'. Installed backends: none."
    )
    assert recommend(MachineFacts(cpu_bf16=True)).reasons[-1] == "backend: none installed that can be used"


def test_an_empty_listing_names_the_published_plugins(
    site: PluginSite, fourth: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(registry, "_default", site.registry())
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == (
        f"no precision plugins installed (entry-point group {ENTRY_POINT_GROUP!r}); try: pip install precision-tpu"
    )
