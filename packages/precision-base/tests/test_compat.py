"""Every private Lightning symbol precision_base._compat touches exists, in both namespaces, with the signature used."""

from __future__ import annotations

import importlib
import inspect

import pytest

from precision_base import _compat
from precision_base.namespaces import NAMESPACES


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_parse_env_variables(namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip(namespace)
    function = importlib.import_module(f"{namespace}.utilities.argparse")._parse_env_variables
    assert list(inspect.signature(function).parameters)[:1] == ["cls"]

    class Probe:
        def __init__(self, *, alpha: int = 0, beta: str = "", gamma: int = 0) -> None: ...

    monkeypatch.setenv("PL_PROBE_ALPHA", "3")
    monkeypatch.setenv("PL_PROBE_BETA", "fsdp:bf16-mixed")
    monkeypatch.setenv("PL_PROBE_GAMMA", "")
    assert vars(_compat.parse_env_variables(namespace, Probe)) == {"alpha": 3, "beta": "fsdp:bf16-mixed"}


def test_caller_frames_are_the_calling_functions_innermost_first() -> None:
    """``sys._getframe`` (CPython) behind the fence: what ``precision_base.doors.identity.check_caller`` reads."""

    def inner() -> list[tuple[str, str]]:
        return _compat.caller_frames(0, 2)

    def outer() -> list[tuple[str, str]]:
        return inner()

    assert outer() == [(__name__, "inner"), (__name__, "outer")]
    assert _compat.caller_frames(0, 1) == [(__name__, "test_caller_frames_are_the_calling_functions_innermost_first")]
    assert _compat.caller_frames(10_000, 3) == []
