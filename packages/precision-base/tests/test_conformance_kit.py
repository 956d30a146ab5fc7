"""The conformance kit runs against the dummy plugin, and fails a plugin that breaks the contract."""

from __future__ import annotations

import pytest

pytest.importorskip("lightning")

from precision_base.testing import PluginConformance
from precision_base.testing.dummy import INFO
from precision_base.testing.dummy_plugin import DummyPrecision


class TestDummyConformance(PluginConformance):
    backend = "dummy"
    plugin_info = INFO
    plugin_class = DummyPrecision


BROKEN_PLUGIN = """
import contextlib
from precision_base.testing import PluginConformance
from precision_base.testing.dummy import INFO
from precision_base.testing.dummy_plugin import DummyPrecision


class {name}(DummyPrecision):
    {body}


class TestBroken(PluginConformance):
    backend = "dummy"
    plugin_info = INFO
    plugin_class = {name}
"""

DEFECTS = {
    # the built-in FSDPPrecision's defect: mixed precision autocasts CUDA only, so nothing happens on CPU
    "forward_context": ("def forward_context(self):\n        return contextlib.nullcontext()", "test_forward_context"),
    "convert_input": ("def convert_input(self, data):\n        return data", "test_convert_input"),
    "state": ("def state_dict(self):\n        return {'calls': id(self)}", "test_state_dict_round_trip"),
    "unknown precision": (
        "def __init__(self, precision, **kw):\n        self.precision = precision",
        "test_rejects_unknown_precisions",
    ),
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_kit_catches_a_defect(pytester: pytest.Pytester, defect: str) -> None:
    body, failing_test = DEFECTS[defect]
    pytester.makepyfile(test_broken=BROKEN_PLUGIN.format(name="DummyPrecision", body=body))
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    failed = {
        line.split("::")[-1].split("[")[0].split(" ")[0] for line in result.outlines if line.startswith("FAILED ")
    }
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert failing_test in failed, result.stdout.str()[-2000:]
