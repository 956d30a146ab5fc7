"""Discovery against hostile or damaged plugins, through real distribution metadata on ``sys.path``.

Each test writes distributions with :func:`precision_testsupport.sites.add_distribution` into a fresh folder put on
``sys.path``, and uses a registry over an entry-point group of its own, so nothing else installed interferes.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from precision_base import (
    DuplicateBackendError,
    PluginInfo,
    PluginLoadError,
    PluginRequirementError,
)
from precision_base.errors import InvalidPluginInfoError, PrecisionPluginWarning, RegistrationError
from precision_base.registry import Registry
from precision_base.registry.discovery import DISABLE_ENV_VAR
from precision_testsupport.sites import PluginSite as Site
from precision_testsupport.sites import add_distribution


def statuses(reg: Registry) -> dict[str, str]:
    return {e.backend: e.status for e in reg.entries()}


# -- 1. containment ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("prelude", "words"),
    [
        ("import sys\nsys.exit(3)\n", "SystemExit: the module called sys.exit(3)"),
        ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
        ("class E(Exception):\n    def __str__(self):\n        raise ValueError\nraise E()\n", "could not be read"),
        ("raise GeneratorExit\n", "GeneratorExit"),
    ],
)
def test_any_exception_from_an_info_module_marks_only_that_plugin_broken(site: Site, prelude: str, words: str) -> None:
    site.plugin("good")
    site.plugin("bad", info_prelude=prelude)
    reg = site.registry()
    assert statuses(reg) == {"bad": "broken", "good": "ok"}
    bad = next(e for e in reg.entries() if e.backend == "bad")
    assert words in bad.reason
    assert "failed to load its info object" in bad.reason
    with pytest.raises(PluginLoadError, match="failed to load its info object"):
        reg.resolve("bad:32-true")
    assert reg.resolve("good:32-true").precision == "32-true"


def test_keyboard_interrupt_in_an_info_module_is_not_swallowed(site: Site) -> None:
    site.plugin("ctrlc", info_prelude="raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        site.registry().entries()


@pytest.mark.parametrize("value", ["ANNOUNCE", "other;announce", "x, Announce", " announce\tother "])
def test_disable_variable_is_read_before_any_plugin_code_runs(
    site: Site, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    marker = site.path / "ran.txt"
    site.plugin("announce", info_prelude=f"open({str(marker)!r}, 'w').write('ran')\nimport sys\nsys.exit(1)\n")
    site.plugin("other")
    monkeypatch.setenv(DISABLE_ENV_VAR, value)
    reg = site.registry()
    assert statuses(reg)["announce"] == "disabled"
    assert not marker.exists(), "a disabled plugin's info module must not run"
    with pytest.raises(LookupError, match="disabled"):
        reg.resolve("announce:32-true")
    assert not marker.exists()


def test_unknown_names_in_the_disable_variable_are_reported(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    site.plugin("real")
    monkeypatch.setenv(DISABLE_ENV_VAR, "REAL;fsbp deepsped")
    assert site.registry().unknown_disabled() == ["deepsped", "fsbp"]


def test_distribution_without_version_is_a_broken_row(site: Site) -> None:
    site.plugin("nover", version=None)
    site.plugin("fine")
    reg = site.registry()
    entries = {e.backend: e for e in reg.entries()}
    assert entries["nover"].status == "broken"
    assert entries["nover"].version == "?"
    assert "metadata has no Version field" in entries["nover"].reason
    assert entries["fine"].status == "ok"


def test_info_object_that_skipped_validation_is_a_broken_row(site: Site) -> None:
    prelude = (
        "from precision_base import PluginInfo\n"
        "SKIPPED = object.__new__(PluginInfo)\n"
        "object.__setattr__(SKIPPED, 'backend', 'skipped')\n"
        "object.__setattr__(SKIPPED, 'precisions', None)\n"
    )
    module = site.plugin("skipped", info_prelude=prelude, entry_points=(("skipped", "X"),))
    add_distribution(
        site.path,
        f"precision-skipped-two-{site.tag}",
        entry_points=(("skipped2", f"{module}._info:SKIPPED"),),
        group=site.group,
    )
    reg = site.registry()
    entry = next(e for e in reg.entries() if e.backend == "skipped2")
    assert entry.status == "broken"
    assert "invalid PluginInfo" in entry.reason
    assert entry.precisions == ()


def test_duplicate_entry_point_name_within_one_distribution_is_reported(site: Site) -> None:
    module = site.plugin("twice", entry_points=(("twice", "a:INFO"),))
    add_distribution(
        site.path,
        f"precision-twice2-{site.tag}",
        entry_points=(("twice2", f"{module}._info:INFO"), ("twice2", f"{module}._info:OTHER")),
        group=site.group,
    )
    entry = next(e for e in site.registry().entries() if e.backend == "twice2")
    assert entry.status == "conflict"
    assert "is declared 2 times by" in entry.reason
    assert "_info:OTHER" in entry.reason


def test_disabling_a_name_in_conflict_resolves_the_conflict(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    site.plugin("twin", dist=f"precision-twin-a-{site.tag}")
    module_b = f"plugb_{site.tag}"
    add_distribution(
        site.path,
        f"precision-twin-b-{site.tag}",
        entry_points=(("twin", f"{module_b}:INFO"),),
        files={f"{module_b}.py": "raise SystemExit"},
        group=site.group,
    )
    reg = site.registry()
    assert statuses(reg) == {"twin": "conflict"}
    monkeypatch.setenv(DISABLE_ENV_VAR, "twin")
    (entry,) = reg.entries()
    assert entry.status == "disabled"
    assert entry.reason == f"listed in {DISABLE_ENV_VAR}"


# -- threads: each info module runs once, no lock held while plugin code runs -----------------------------
COUNTER = """\
import threading, time
RUNS = []
"""


@pytest.mark.parametrize("run", range(5))
def test_many_threads_load_each_info_object_once(site: Site, run: int) -> None:
    counter = f"counter_{site.tag}"
    (site.path / f"{counter}.py").write_text(COUNTER)
    for i in range(3):
        site.plugin(f"slow{i}", info_prelude=f"import time, {counter}\n{counter}.RUNS.append({i})\ntime.sleep(0.05)\n")
    reg = site.registry()
    barrier = threading.Barrier(16)
    results: list[dict[str, str]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            results.append(statuses(reg))
        except BaseException as exc:  # re-raised by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "threads hung"
    assert errors == []
    assert results == [{"slow0": "ok", "slow1": "ok", "slow2": "ok"}] * 16
    assert sorted(sys.modules[counter].RUNS) == [0, 1, 2], "each info module must run exactly once"


REG_HOLDER = "REGISTRY = None\n"


@pytest.mark.parametrize("run", range(10))
def test_plugin_module_calling_the_registry_at_import_does_not_deadlock(site: Site, run: int) -> None:
    """The issue's reproduction: one thread resolves the plugin while another imports its module directly."""
    holder = f"holder_{site.tag}"
    (site.path / f"{holder}.py").write_text(REG_HOLDER)
    module = site.plugin(
        "selfish",
        plugin_prelude=f"import time, {holder}\ntime.sleep(0.05)\nENTRY = {holder}.REGISTRY.entry('selfish')\n",
    )
    reg = site.registry()
    __import__(holder).REGISTRY = reg
    errors: list[BaseException] = []
    done: list[str] = []

    def resolve() -> None:
        try:
            done.append(type(reg.resolve("selfish:32-true")).__name__)
        except BaseException as exc:  # re-raised by the assertion below
            errors.append(exc)

    def import_directly() -> None:
        try:
            done.append(__import__(f"{module}.plugin", fromlist=["ENTRY"]).ENTRY.status)
        except BaseException as exc:  # re-raised by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=resolve), threading.Thread(target=import_directly)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "deadlock: a thread is still waiting after 30 s"
    assert errors == []
    assert sorted(done) == ["LitePrecision", "ok"]


def test_info_module_asking_for_itself_gets_an_error_not_a_hang(site: Site) -> None:
    holder = f"holder_{site.tag}"
    (site.path / f"{holder}.py").write_text(REG_HOLDER)
    site.plugin("loop", info_prelude=f"import {holder}\n{holder}.REGISTRY.entry('loop')\n")
    reg = site.registry()
    __import__(holder).REGISTRY = reg
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(reg.entries()))
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "deadlock"
    (entry,) = result[0]
    assert entry.status == "broken"
    assert "an import cycle in the plugin" in entry.reason


def test_two_info_modules_asking_for_each_other_from_two_threads_do_not_deadlock(site: Site) -> None:
    holder = f"holder_{site.tag}"
    (site.path / f"{holder}.py").write_text(REG_HOLDER)
    for me, other in (("ping", "pong"), ("pong", "ping")):
        prelude = (
            f"import time, {holder}\ntime.sleep(0.1)\n"
            f"try:\n    {holder}.REGISTRY.entry({other!r})\nexcept Exception:\n    pass\n"
        )
        site.plugin(me, info_prelude=prelude)
    reg = site.registry()
    __import__(holder).REGISTRY = reg
    out: dict[str, str] = {}
    threads = [threading.Thread(target=lambda b=b: out.update({b: reg._entry(b).status})) for b in ("ping", "pong")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert out == {"ping": "ok", "pong": "ok"}


# -- 2. identity -----------------------------------------------------------------------------------------
def test_in_process_registration_cannot_claim_an_installed_distribution(site: Site) -> None:
    site.plugin("real", dist=f"precision-real-{site.tag}")
    reg = site.registry()
    info = PluginInfo(backend="real", precisions=("32-true",), plugin_class="x:Y")
    with pytest.raises(RegistrationError) as raised:
        reg.register(info, distribution=f"Precision_Real-{site.tag}", version="1.0", replace=True)
    assert "cannot pose as an installed one" in str(raised.value)
    assert isinstance(raised.value, ValueError)
    assert statuses(reg) == {"real": "ok"}


def test_replacing_a_backend_warns_naming_old_and_new_and_is_listed_in_process(site: Site) -> None:
    site.plugin("real", dist=f"precision-real-{site.tag}")
    reg = site.registry()
    info = PluginInfo(backend="real", precisions=("32-true",), plugin_class="x:Y")
    with pytest.warns(PrecisionPluginWarning) as record:
        reg.register(info, distribution="my-notebook", version="0.1", replace=True)
    (warning,) = record
    assert str(warning.message) == (
        f"precision backend 'real': precision-real-{site.tag} 1.0 (installed) is replaced by my-notebook 0.1 "
        "(in-process) (in-process registration with replace=True)"
    )
    (entry,) = reg.entries()
    assert (entry.origin, entry.distribution) == ("<in-process>", "my-notebook")


@pytest.mark.parametrize("backend", ["fsdp", "deepspeed"])
def test_published_backend_from_a_third_party_distribution_is_not_used(site: Site, backend: str) -> None:
    marker = site.path / "ran.txt"
    site.plugin(backend, dist=f"evil-{backend}", info_prelude=f"open({str(marker)!r}, 'w').write('ran')\n")
    reg = site.registry()
    (entry,) = reg.entries()
    assert entry.status == "unofficial"
    assert f"is published by precision-{backend}, but this one comes from the third-party distribution" in entry.reason
    assert not marker.exists(), "an unofficial plugin's code must not run"
    with pytest.raises(DuplicateBackendError, match=f"install precision-{backend}"):
        reg.resolve(f"{backend}:32-true")


def test_published_backend_from_its_own_distribution_is_ok(site: Site) -> None:
    site.plugin("fsdp", dist="precision-fsdp")
    assert statuses(site.registry()) == {"fsdp": "ok"}


def test_register_refuses_an_info_object_that_skipped_validation() -> None:
    info = object.__new__(PluginInfo)
    object.__setattr__(info, "backend", "x")
    with pytest.raises(InvalidPluginInfoError, match="invalid PluginInfo"):
        Registry(group="precision_base.tests.none").register(info)


# -- requirements from the distribution's own metadata --------------------------------------------------
def test_requirements_come_from_the_distributions_requires_dist(site: Site) -> None:
    module = site.plugin(
        "needy",
        requires=(
            "precision-no-such-dist-xyz>=1.0",
            'precision-other-xyz>=2; extra == "docs"',
            'packaging>=1; python_version >= "3"',
        ),
    )
    reg = site.registry()
    (entry,) = reg.entries()
    assert entry.status == "requirement missing"
    assert entry.reason == "needs precision-no-such-dist-xyz>=1.0, which is not installed"
    with pytest.raises(PluginRequirementError, match=r"cannot load: it needs precision-no-such-dist-xyz>=1\.0"):
        reg.resolve("needy:32-true")
    assert f"{module}.plugin" not in sys.modules, "requirements are checked before the plugin's code is imported"


# -- 5. what runs at list time ----------------------------------------------------------------------------
def test_listing_runs_the_info_module_but_not_the_package_init(site: Site) -> None:
    init_marker = site.path / "init-ran.txt"
    info_marker = site.path / "info-ran.txt"
    module = site.plugin(
        "sidefx",
        init=f"open({str(init_marker)!r}, 'a').write('init')\n",
        info_prelude=f"open({str(info_marker)!r}, 'a').write('info')\n",
    )
    reg = site.registry()
    assert statuses(reg) == {"sidefx": "ok"}
    assert info_marker.read_text() == "info"
    assert not init_marker.exists(), "listing must not run the plugin package's __init__"
    assert module not in sys.modules
    assert statuses(reg) == {"sidefx": "ok"}
    assert info_marker.read_text() == "info", "the info module runs once per discovery"
    reg.resolve("sidefx:32-true")  # resolving imports the plugin class the normal way: its package runs
    assert init_marker.read_text() == "init"


def test_the_issues_impostor_registration_is_refused() -> None:
    """Issue 13: code in any installed plugin calling register(fsdp, distribution="precision-fsdp", replace=True)."""
    pytest.importorskip(
        "precision_fsdp", reason="needs precision-fsdp installed: runs in its cells (tools/matrix.toml [tests])"
    )
    reg = Registry()  # the real entry-point group, where precision-fsdp is installed
    impostor = PluginInfo(backend="fsdp", precisions=("bf16-mixed",), plugin_class="evil.plugin:Evil")
    with pytest.raises(RegistrationError) as raised:
        reg.register(impostor, distribution="precision-fsdp", version="0.1.0", replace=True)
    assert str(raised.value).startswith(
        "register(): distribution='precision-fsdp' names the installed distribution precision-fsdp "
    )
    assert reg.entry("fsdp").origin == "installed"


def test_resolve_refuses_bases_in_the_wrong_order() -> None:
    lightning = pytest.importorskip("lightning.pytorch.plugins.precision")
    from precision_base import PrecisionPlugin

    class WrongOrder(lightning.Precision, PrecisionPlugin):  # type: ignore[misc]
        backend = "wrong"
        precisions = ("32-true",)

        def __init__(self, precision: str) -> None:
            self.precision = precision

    reg = Registry(group="precision_base.tests.none")
    reg.register(PluginInfo(backend="wrong", precisions=("32-true",), plugin_class="x:Y"), plugin_class=WrongOrder)
    with pytest.raises(InvalidPluginInfoError) as raised:
        reg.resolve("wrong:32-true")
    assert "WrongOrder lists lightning.pytorch.plugins.precision.precision.Precision before " in str(raised.value)
    assert "so the mixin's connect() never runs" in str(raised.value)
    assert [e.status for e in reg.entries()] == ["broken"]
