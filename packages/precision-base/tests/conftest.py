from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
DUMMY_SRC = FIXTURES / "dummy_plugin" / "src"

# The dummy plugin's code is importable in-process (for in-process registration and pickling); its
# distribution metadata is not installed here, so entry-point discovery does not see it in this interpreter.
if str(DUMMY_SRC) not in sys.path:
    sys.path.insert(0, str(DUMMY_SRC))


@pytest.fixture
def dummy_registered() -> Iterator[type]:
    """Register the dummy plugin in-process for one test."""
    from precision_dummy._info import INFO
    from precision_dummy.plugin import DummyPrecision

    import precision_base

    with precision_base.registered(INFO, distribution="precision-dummy", version="0.3.1"):
        yield DummyPrecision


pytest_plugins = ["pytester"]
