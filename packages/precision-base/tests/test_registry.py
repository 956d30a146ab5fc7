"""The registry, exercised in-process. Real installed distributions are covered in test_installed_plugins.py."""

from __future__ import annotations

import sys
import threading
from importlib import metadata
from typing import Any

import pytest

import precision_base
from precision_base import (
    BackendDisabledError,
    ContractVersionError,
    DuplicateBackendError,
    InvalidPluginInfoError,
    PluginInfo,
    PluginLoadError,
    PluginRequirementError,
    UnknownBackendError,
    UnsupportedPrecisionError,
)
from precision_base.errors import PrecisionPluginWarning
from precision_base.registry import Registry
from precision_base.registry.discovery import DISABLE_ENV_VAR

EMPTY_GROUP = "precision_base.tests.no_such_group"


def dummy_info(**changes: object) -> PluginInfo:
    from precision_testsupport.dummy import INFO

    fields = dict(
        backend=INFO.backend, precisions=INFO.precisions, plugin_class=INFO.plugin_class, strategy=INFO.strategy
    )
    fields.update(changes)
    return PluginInfo(**fields)  # type: ignore[arg-type]


@pytest.fixture
def registry() -> Registry:
    reg = Registry(group=EMPTY_GROUP)
    reg.register(dummy_info(), distribution="precision-dummy", version="0.3.1")
    return reg


def test_resolve_returns_a_ready_instance_with_options(registry: Registry) -> None:
    plugin = registry.resolve("dummy:bf16", note="from options")
    assert type(plugin).__name__ == "DummyPrecision"
    assert plugin.precision == "bf16-mixed"
    assert plugin.note == "from options"


def test_unknown_option_reaches_the_constructor_and_fails_there(registry: Registry) -> None:
    with pytest.raises(TypeError, match="no_such_option"):
        registry.resolve("dummy:32-true", no_such_option=1)


def test_unknown_backend_lists_installed_and_suggests(registry: Registry) -> None:
    with pytest.raises(UnknownBackendError) as info:
        registry.resolve("dumy:32-true")
    message = str(info.value)
    assert "'dumy'" in message
    assert "Installed backends: dummy." in message
    assert "Did you mean 'dummy'?" in message
    assert "pip install" not in message


@pytest.mark.parametrize(("backend", "dist"), [("fsdp", "precision-fsdp"), ("deepspeed", "precision-deepspeed")])
def test_unknown_published_backend_says_what_to_install(backend: str, dist: str) -> None:
    reg = Registry(group=EMPTY_GROUP)
    with pytest.raises(UnknownBackendError) as info:
        reg.resolve(f"{backend}:bf16-mixed")
    assert f"To use it, run: pip install {dist}" in str(info.value)
    assert "Installed backends: none." in str(info.value)
    assert isinstance(info.value, LookupError)


def test_typo_of_a_published_backend_suggests_it() -> None:
    with pytest.raises(UnknownBackendError, match="Did you mean 'deepspeed'"):
        Registry(group=EMPTY_GROUP).resolve("deepsped:bf16-mixed")


def test_precision_not_offered_lists_what_is(registry: Registry) -> None:
    with pytest.raises(UnsupportedPrecisionError) as info:
        registry.resolve("dummy:16-mixed")
    assert "does not offer '16-mixed'" in str(info.value)
    assert "offers 32-true, bf16-true, bf16-mixed" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_bad_spec_fails_before_any_lookup(registry: Registry) -> None:
    with pytest.raises(precision_base.InvalidSpecError):
        registry.resolve("dummy")


def test_import_failure_names_distribution_and_chains_and_isolates() -> None:
    reg = Registry(group=EMPTY_GROUP)
    reg.register(dummy_info(), distribution="precision-dummy", version="0.3.1")
    reg.register(
        dummy_info(backend="broken", plugin_class="precision_no_such_module_xyz:Plugin"),
        distribution="precision-broken",
        version="9.9",
    )
    with pytest.raises(PluginLoadError) as info:
        reg.resolve("broken:32-true")
    assert "precision-broken 9.9" in str(info.value)
    assert "precision_no_such_module_xyz:Plugin" in str(info.value)
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    # the other plugin keeps working, and the listing marks the broken one instead of crashing
    assert reg.resolve("dummy:32-true").precision == "32-true"
    status = {e.backend: e.status for e in reg.entries()}
    assert status == {"broken": "broken", "dummy": "ok"}
    with pytest.raises(PluginLoadError):  # and it keeps failing the same way
        reg.resolve("broken:32-true")


def test_class_that_is_not_a_precision_plugin_is_refused() -> None:
    reg = Registry(group=EMPTY_GROUP)
    reg.register(dummy_info(plugin_class="collections:OrderedDict"))
    with pytest.raises(InvalidPluginInfoError, match=r"not a subclass of precision_base\.PrecisionPlugin"):
        reg.resolve("dummy:32-true")


def test_two_registrations_of_one_name_name_both(registry: Registry) -> None:
    with pytest.raises(DuplicateBackendError) as info:
        registry.register(dummy_info(), distribution="precision-dummy-fork", version="1.0")
    assert "precision-dummy 0.3.1" in str(info.value)
    assert "precision-dummy-fork 1.0" in str(info.value)
    with pytest.warns(PrecisionPluginWarning, match=r"'dummy': precision-dummy 0\.3\.1 \(in-process\) is replaced by"):
        registry.register(dummy_info(strategy="replaced"), replace=True)
    assert registry.entry("dummy").info.strategy == "replaced"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("requires", "words"),
    [
        (("torch>=99",), ["needs torch>=99, found torch 2."]),
        (("precision-no-such-dist-xyz>=1.0",), ["needs precision-no-such-dist-xyz>=1.0, which is not installed"]),
        (("not a requirement !!",), ["is not valid PEP 508"]),
    ],
)
def test_unmet_requirements_are_refused_before_the_code_runs(requires: tuple[str, ...], words: list[str]) -> None:
    reg = Registry(group=EMPTY_GROUP)
    module = "precision_base_tests_never_imported"
    reg.register(
        dummy_info(requires=requires, plugin_class=f"{module}:Plugin"), distribution="precision-dummy", version="0.3.1"
    )
    with pytest.raises(PluginRequirementError) as info:
        reg.resolve("dummy:32-true")
    assert "precision-dummy 0.3.1" in str(info.value)
    for word in words:
        assert word in str(info.value)
    assert module not in sys.modules
    (entry,) = reg.entries()
    assert entry.status == "requirement missing"


def test_requirement_with_inapplicable_marker_is_ignored(registry: Registry) -> None:
    reg = Registry(group=EMPTY_GROUP)
    reg.register(dummy_info(requires=('torch>=99; python_version < "3.0"',)))
    assert reg.resolve("dummy:32-true").precision == "32-true"


def test_incompatible_contract_is_refused_before_the_code_runs() -> None:
    reg = Registry(group=EMPTY_GROUP)
    reg.register(
        dummy_info(contract_version=2, plugin_class="precision_base_tests_never_imported:Plugin"),
        distribution="precision-dummy",
        version="0.3.1",
    )
    with pytest.raises(ContractVersionError) as info:
        reg.resolve("dummy:32-true")
    message = str(info.value)
    assert "contract version 2" in message
    assert f"implements contract version {precision_base.CONTRACT_VERSION}" in message
    assert "precision-dummy 0.3.1" in message
    assert "precision_base_tests_never_imported" not in sys.modules
    assert reg.entries()[0].status == "incompatible contract"


def test_environment_variable_disables_named_plugins(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    registry.register(dummy_info(backend="other"))
    monkeypatch.setenv(DISABLE_ENV_VAR, "dummy, unrelated")
    with pytest.raises(BackendDisabledError) as info:
        registry.resolve("dummy:32-true")
    assert DISABLE_ENV_VAR in str(info.value)
    assert "installed but disabled" in str(info.value)
    assert registry.resolve("other:32-true").precision == "32-true"
    assert {e.backend: e.status for e in registry.entries()} == {"dummy": "disabled", "other": "ok"}
    monkeypatch.delenv(DISABLE_ENV_VAR)
    assert registry.resolve("dummy:32-true").precision == "32-true"


def test_concurrent_first_use_discovers_once_and_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = metadata.distributions

    def counting(**kwargs: object) -> Any:
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(metadata, "distributions", counting)
    reg = Registry(group=EMPTY_GROUP)
    reg.register(dummy_info())
    barrier = threading.Barrier(8)
    results: list[object] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            results.append(type(reg.resolve("dummy:bf16-true")))
            reg.backends()
        except BaseException as exc:  # collected and re-raised by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 8
    assert len(set(results)) == 1
    assert len(calls) == 1, "discovery must run once, however many threads ask at the same time"
    reg.clear_cache()
    reg.backends()
    assert len(calls) == 2, "clear_cache() must make the next call discover again"


def test_unregister_and_registered_context_manager() -> None:
    info = dummy_info(backend="temporary")
    with precision_base.registered(info):
        assert "temporary" in [e.backend for e in precision_base.list_plugins()]
    assert "temporary" not in [e.backend for e in precision_base.list_plugins()]
    with pytest.raises(UnknownBackendError, match="not registered in-process"):
        precision_base.unregister("temporary")


def test_register_refuses_non_info() -> None:
    with pytest.raises(InvalidPluginInfoError):
        Registry(group=EMPTY_GROUP).register({"backend": "x"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"backend": "Bad Name"}, "backend must be a lowercase name"),
        ({"precisions": ()}, "precisions must be a non-empty tuple"),
        ({"precisions": ["32-true"]}, "precisions must be a non-empty tuple"),
        ({"precisions": ("fp8",)}, "are not canonical"),
        ({"plugin_class": "no_colon.Class"}, "plugin_class must look like"),
        ({"requires": "torch"}, "requires must be a tuple"),
        ({"contract_version": "1"}, "contract_version must be an int"),
    ],
)
def test_plugin_info_schema_is_checked(changes: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidPluginInfoError, match=words):
        dummy_info(**changes)


def test_module_level_api_uses_the_default_registry(dummy_registered: type) -> None:
    assert isinstance(precision_base.resolve("dummy:32"), dummy_registered)
    assert precision_base.get_plugin_class("dummy") is dummy_registered
    assert precision_base.get_entry("dummy").distribution == "precision-dummy"


def test_installed_versions_are_read_once_per_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = metadata.version

    def counting(name: str) -> str:
        calls.append(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", counting)
    reg = Registry(group=EMPTY_GROUP)
    reg.clear_cache()
    for i in range(5):
        reg.register(dummy_info(backend=f"needs{i}", requires=("packaging>=20",)))
    assert [e.status for e in reg.entries()] == ["ok"] * 5
    assert [e.status for e in reg.entries()] == ["ok"] * 5
    assert calls == ["packaging"], "one metadata read for five plugins listed twice"
    reg.clear_cache()
    reg.entries()
    assert calls == ["packaging", "packaging"], "clear_cache() forgets installed versions"
