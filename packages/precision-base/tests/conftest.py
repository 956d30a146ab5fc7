from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def dummy_registered() -> Iterator[type]:
    """Register the dummy plugin in-process for one test."""
    import precision_base
    from precision_base.testing.dummy import INFO
    from precision_base.testing.dummy_plugin import DummyPrecision

    with precision_base.registered(INFO, distribution="precision-dummy", version="0.3.1"):
        yield DummyPrecision


pytest_plugins = ["pytester"]
