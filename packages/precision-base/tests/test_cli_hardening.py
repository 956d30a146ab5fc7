"""The precision-plugins command against damaged, hostile and heavy plugins (real metadata on sys.path)."""

from __future__ import annotations

import json

import pytest

from precision_base import cli, registry
from precision_base.registry.discovery import DISABLE_ENV_VAR
from precision_testsupport.sites import PluginSite, add_distribution

SKIPPED_VALIDATION = (
    "from precision_base import PluginInfo\n"
    "SKIPPED = object.__new__(PluginInfo)\n"
    "object.__setattr__(SKIPPED, 'backend', 'skipped')\n"
)


@pytest.fixture
def site_registry(site: PluginSite, monkeypatch: pytest.MonkeyPatch) -> PluginSite:
    """Make the CLI's (process-wide) registry read the test's site."""
    monkeypatch.setattr(registry, "_default", site.registry())
    return site


def test_list_shows_every_row_and_exits_1_when_a_plugin_is_not_ok(
    site_registry: PluginSite, capsys: pytest.CaptureFixture[str]
) -> None:
    site = site_registry
    site.plugin("good", summary="a fine plugin")
    site.plugin("exits", info_prelude="import sys\nsys.exit(3)\n")
    site.plugin("nover", version=None)
    module = site.plugin("skipped", info_prelude=SKIPPED_VALIDATION, entry_points=(("skipped", "nowhere:X"),))
    add_distribution(
        site.path, f"skipped-two-{site.tag}", entry_points=(("skipped2", f"{module}._info:SKIPPED"),), group=site.group
    )
    assert cli.main(["list"]) == 1
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[1 : out.splitlines().index("")]}
    assert out.splitlines()[0].split() == ["BACKEND", "DISTRIBUTION", "VERSION", "PRECISIONS", "STATUS", "SUMMARY"]
    assert rows["good"].split() == ["good", f"precision-good-{site.tag}", "1.0", "32-true", "ok", "a", "fine", "plugin"]
    assert rows["exits"].split()[-2:] == ["broken", "-"]
    assert rows["nover"].split()[2:] == ["?", "-", "broken", "-"]
    assert rows["skipped2"].split()[-3:] == ["-", "broken", "-"]
    assert "exits: precision plugin 'exits' from precision-exits-" in out
    assert "SystemExit: the module called sys.exit(3)" in out
    assert "its distribution's metadata has no Version field" in out
    assert cli.main(["list", "--json"]) == 1
    listed = {e["backend"]: e for e in json.loads(capsys.readouterr().out)}
    assert listed["good"]["summary"] == "a fine plugin"
    assert listed["exits"]["status"] == "broken"


def test_list_exits_0_when_every_plugin_is_ok_or_disabled(
    site_registry: PluginSite, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    site_registry.plugin("good")
    site_registry.plugin("bad", info_prelude="raise ImportError('nope')\n")
    assert cli.main(["list"]) == 1
    monkeypatch.setenv(DISABLE_ENV_VAR, "BAD")
    assert cli.main(["list"]) == 0
    assert "bad     " in capsys.readouterr().out


def test_unknown_disable_name_is_a_note_in_list_and_a_problem_in_doctor(
    site_registry: PluginSite, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    site_registry.plugin("good")
    monkeypatch.setenv(DISABLE_ENV_VAR, "fsbp;GOOD")
    assert cli.main(["list"]) == 0
    assert "note: PRECISION_PLUGINS_DISABLE names no registered backend: fsbp (a typo?)" in capsys.readouterr().out
    assert cli.main(["doctor", "--skip-import-check"]) == 1
    out = capsys.readouterr().out
    assert "[disabled] good: listed in PRECISION_PLUGINS_DISABLE" in out
    assert "[problem] PRECISION_PLUGINS_DISABLE names no registered backend: fsbp (a typo?)" in out
    assert cli.main(["doctor", "--json", "--skip-import-check"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["problems"] == ["PRECISION_PLUGINS_DISABLE names no registered backend: fsbp (a typo?)"]


def test_doctor_catches_an_info_module_or_package_importing_heavy_modules(
    site_registry: PluginSite, capsys: pytest.CaptureFixture[str]
) -> None:
    site_registry.plugin("heavyinfo", info_prelude="import torch\n")
    site_registry.plugin("heavyinit", init="import lightning\n")
    site_registry.plugin("light")
    assert cli.main(["doctor", "--json"]) == 1
    reports = {r["backend"]: r for r in json.loads(capsys.readouterr().out)["plugins"]}
    (info_problem,) = reports["heavyinfo"]["problems"]
    assert "the info module of heavyinfo" in info_problem
    assert "imports torch (listing plugins then pays for it)" in info_problem
    (init_problem,) = reports["heavyinit"]["problems"]
    assert "the package __init__ of heavyinit" in init_problem
    assert "imports torch, lightning; import it lazily" in init_problem
    assert reports["light"]["problems"] == []
    assert reports["light"]["status"] == "ok"


def test_doctor_counts_what_the_plugin_requires_that_is_built_on_torch_as_heavy(
    site_registry: PluginSite, capsys: pytest.CaptureFixture[str]
) -> None:
    """No engine is named in precision-base: a backend's engine is heavy because the plugin requires it and it
    requires torch; a light dependency of the plugin may be imported."""
    site, tag = site_registry, site_registry.tag
    for name, requires in ((f"engine_{tag}", ["torch>=2"]), (f"helper_{tag}", [])):
        info = add_distribution(site.path, name.replace("_", "-"), files={f"{name}/__init__.py": ""}, requires=requires)
        (info / "top_level.txt").write_text(name + "\n")
    site.plugin(
        "engined",
        init=f"import engine_{tag}\nimport helper_{tag}\n",
        requires=(f"engine-{tag}>=1", f"helper-{tag}"),
    )
    assert cli.main(["doctor", "--json"]) == 1
    reports = {r["backend"]: r for r in json.loads(capsys.readouterr().out)["plugins"]}
    assert reports["engined"]["problems"] == [
        f"the package __init__ of engined (plug_engined_{tag}._info:INFO) imports engine_{tag}; import it lazily"
    ]


def test_show_json(dummy_registered: type, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", "dummy:bf16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["spec"] == "dummy:bf16-mixed"
    assert data["dtypes"]["compute"] == "bfloat16"
    assert data["distribution"] == "precision-dummy (in-process) 0.3.1"
    assert set(data) >= {"plugin", "strategy", "summary", "notes", "describe"}


@pytest.mark.parametrize(
    "rows",
    [[["a", None, 3]], [["a"]], [[]], [["multi\nline", "", object()]]],
)
def test_table_renders_missing_and_odd_cells(rows: list[list[object]]) -> None:
    text = cli.render_table(["A", "B", "C"], rows)
    lines = text.splitlines()
    assert lines[0].split() == ["A", "B", "C"]
    assert len(lines[1].split()) >= 3
    assert len(lines) == 2
