from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from precision_base.registry.discovery import DISABLE_ENV_VAR
from precision_testsupport.sites import PluginSite


@pytest.fixture
def dummy_registered() -> Iterator[type]:
    """Register the dummy plugin in-process for one test."""
    import precision_base
    from precision_testsupport.dummy import INFO
    from precision_testsupport.dummy_plugin import DummyPrecision

    with precision_base.registered(INFO, distribution="precision-dummy", version="0.3.1"):
        yield DummyPrecision


pytest_plugins = ["pytester"]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginSite]:
    """A folder on sys.path with an entry-point group of its own, to write plugin distributions into."""
    monkeypatch.delenv(DISABLE_ENV_VAR, raising=False)
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    tag = uuid.uuid4().hex[:8]
    yield PluginSite(path=path, group=f"precision_base.tests.{tag}", tag=tag)
    for name in [m for m in sys.modules if tag in m]:
        del sys.modules[name]
