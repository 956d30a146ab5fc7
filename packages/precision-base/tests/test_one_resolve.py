"""One resolve for both doors: every spec `precision-plugins list` shows resolves at the Trainer and the Fabric door,
or fails at both with the same error (type and message); the Fabric door has no lookup of its own."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

pytest.importorskip("lightning.fabric")
pytest.importorskip("lightning.pytorch")

import precision_base
from precision_base.doors import fabric
from precision_base.doors.fabric import resolve_fabric
from precision_base.errors import FabricNotSupportedError, PluginLoadError, PrecisionPluginError
from precision_base.registry.discovery import DISABLE_ENV_VAR


def _listed_specs() -> list[str]:
    """What `precision-plugins list` shows: each backend's precisions and extra precisions (fp8, mxfp8, ...)."""
    return [
        f"{entry.backend}:{precision}"
        for entry in precision_base.list_plugins()
        for precision in (*entry.precisions, *entry.extra_precisions)
    ]


def _outcome(call: Any) -> tuple[Any, ...]:
    try:
        plugin = call()
    except PrecisionPluginError as exc:
        return ("raised", type(exc).__name__, str(exc))
    return ("built", type(plugin).__name__, plugin.spec, plugin.precision, plugin.dtypes())


SPECS = _listed_specs()


def test_the_installed_plugins_list_extra_precisions_too() -> None:
    """The comparison below covers the extras (fsdp's fp8 and mxfp8 names) where precision-fsdp is installed."""
    entries = {e.backend: e for e in precision_base.list_plugins()}
    if "fsdp" not in entries:
        pytest.skip("precision-fsdp is not installed here")
    assert entries["fsdp"].extra_precisions, entries["fsdp"]
    assert all(f"fsdp:{name}" in SPECS for name in entries["fsdp"].extra_precisions)


@pytest.mark.parametrize("disabled", ["", "fsdp,deepspeed"])
@pytest.mark.parametrize("spec", SPECS)
def test_every_listed_spec_gets_the_same_answer_at_both_doors(
    spec: str, disabled: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DISABLE_ENV_VAR, disabled)
    backend = spec.partition(":")[0]
    info = precision_base.get_entry(backend).info if not disabled else None
    trainer = _outcome(lambda: precision_base.resolve(spec))
    at_fabric = _outcome(lambda: resolve_fabric(spec))
    if info is not None and not info.fabric_class:
        assert at_fabric[:2] == ("raised", "FabricNotSupportedError")
        return
    if trainer[0] == "built":
        assert at_fabric[0] == "built", f"{spec}: the Trainer door builds it, the Fabric door says {at_fabric}"
        assert trainer[1] == at_fabric[1], "the two classes share their name (checkpoints name the class)"
        assert trainer[2:] == at_fabric[2:], f"{spec}: the doors state different spec, precision or dtypes"
    else:
        assert at_fabric == trainer, f"{spec}: the doors answer differently"
    if disabled:
        assert trainer[:2] == ("raised", "BackendDisabledError")


def test_extra_precision_resolves_at_both_doors() -> None:
    """The issue's drift: resolve_fabric checked `info.precisions`, resolve `info.all_precisions`."""
    entry = {e.backend: e for e in precision_base.list_plugins()}.get("fsdp")
    if entry is None or entry.status != "ok" or not entry.extra_precisions:
        pytest.skip("precision-fsdp with extra precisions is not installed here")
    available = [p for p in entry.extra_precisions if p not in dict(entry.unavailable)]
    if not available:
        pytest.skip(f"no extra precision is available here: {entry.unavailable}")
    spec = f"fsdp:{available[0]}"
    assert precision_base.resolve(spec).precision == resolve_fabric(spec).precision == available[0]


def test_the_fabric_door_has_no_lookup_of_its_own() -> None:
    """resolve_fabric and fabric_class are the registry's resolve / class lookup at door="Fabric"."""
    for function in (fabric.resolve_fabric, fabric.fabric_class):
        source = inspect.getsource(function)
        for own in ("import_module", "getattr(", "check_precision", "get_entry", "for_namespace", "parse_spec"):
            assert own not in source, f"{function.__name__} does {own} itself"


def test_a_broken_fabric_class_is_the_plugins_load_error() -> None:
    from precision_testsupport.dummy import INFO
    from precision_testsupport.dummy_plugin import DummyPrecision

    broken = precision_base.PluginInfo(
        **{**_fields(INFO), "fabric_class": "precision_testsupport.dummy_plugin:NoSuchFabricClass"}
    )
    with precision_base.registered(broken, plugin_class=DummyPrecision, distribution="precision-dummy", version="0.3"):
        assert precision_base.resolve("dummy:bf16-mixed").precision == "bf16-mixed"
        with pytest.raises(PluginLoadError) as raised:
            resolve_fabric("dummy:bf16-mixed")
    assert str(raised.value).startswith(
        "precision plugin 'dummy' from precision-dummy 0.3 failed to import "
        "'precision_testsupport.dummy_plugin:NoSuchFabricClass': AttributeError"
    )


def test_a_backend_without_a_fabric_class_resolves_at_the_trainer_door_only() -> None:
    from precision_testsupport.dummy import INFO
    from precision_testsupport.dummy_plugin import DummyPrecision

    with precision_base.registered(INFO, plugin_class=DummyPrecision, distribution="precision-dummy", version="0.3"):
        assert precision_base.resolve("dummy:32-true", door="Trainer").precision == "32-true"
        with pytest.raises(FabricNotSupportedError, match="offers no plugin class for Lightning Fabric"):
            precision_base.resolve("dummy:32-true", door="Fabric")


def test_unknown_door_and_wrong_namespace_are_refused() -> None:
    with pytest.raises(ValueError, match=r"door must be one of \('Trainer', 'Fabric'\), got 'Tráiner'"):
        precision_base.resolve("fsdp:32-true", door="Tráiner")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"namespace must be one of \('lightning.fabric', 'lightning_fabric'\)"):
        resolve_fabric("fsdp:32-true", namespace="lightning.pytorch")


def _fields(info: precision_base.PluginInfo) -> dict[str, Any]:
    from dataclasses import fields

    return {f.name: getattr(info, f.name) for f in fields(info)}
