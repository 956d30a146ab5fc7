"""The conformance kit runs against the dummy plugin, and fails a plugin that breaks the contract."""

from __future__ import annotations

import pytest

pytest.importorskip("lightning")

from precision_base.testing import PluginConformance
from precision_testsupport.dummy import INFO
from precision_testsupport.dummy_plugin import DummyPrecision


class TestDummyConformance(PluginConformance):
    backend = "dummy"
    plugin_info = INFO
    plugin_class = DummyPrecision


BROKEN_PLUGIN = """
import contextlib
import dataclasses
from precision_base.testing import PluginConformance
from precision_testsupport.dummy import INFO
from precision_testsupport.dummy_plugin import DummyPrecision


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
    # issue 13: a table that says bf16 compute with no autocast, and nothing implemented
    "bf16 compute without autocast": (
        "def forward_context(self):\n        return contextlib.nullcontext()\n"
        "    def dtypes(self):\n        t = super().dtypes()\n"
        "        return dataclasses.replace(t, autocast=None) if self.precision == 'bf16-mixed' else t",
        "test_compute_dtype_of_a_real_matmul",
    ),
    # issue 13: a declared precision with no implementation, its table saying float32 everywhere and autocast=None
    "declared precision not implemented": (
        "def forward_context(self):\n        return contextlib.nullcontext()\n"
        "    def dtypes(self):\n        t = super().dtypes()\n"
        "        if self.precision != 'bf16-mixed':\n            return t\n"
        "        return dataclasses.replace(t, compute='float32', autocast=None)",
        "test_dtype_table_is_consistent",
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


def _failures(result: pytest.RunResult) -> dict[str, str]:
    """Failed test name (without parameters) -> the crash message of its first failure."""
    out: dict[str, str] = {}
    for report in result.reprec.getreports("pytest_runtest_logreport"):  # type: ignore[attr-defined]
        if report.failed:
            name = report.nodeid.split("::")[-1].split("[")[0]
            out.setdefault(name, report.longrepr.reprcrash.message)
    return out


WRONG_ORDER = """
from lightning.pytorch.plugins.precision import Precision
from precision_base import PrecisionPlugin
from precision_base.testing import PluginConformance
from precision_testsupport.dummy import INFO
from precision_testsupport.dummy_plugin import DummyPrecision

NAMES = ("__init__", "dtypes", "convert_module", "convert_input", "forward_context", "module_init_context",
         "tensor_init_context", "state_dict", "load_state_dict")


class WrongOrder(Precision, PrecisionPlugin):
    backend = "dummy"
    precisions = INFO.precisions
    locals().update({n: DummyPrecision.__dict__[n] for n in NAMES if n in DummyPrecision.__dict__})


class TestWrongOrder(PluginConformance):
    backend = "dummy"
    plugin_info = INFO
    plugin_class = WrongOrder
"""


def test_kit_and_resolve_refuse_bases_in_the_wrong_order(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_wrong=WRONG_ORDER)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-k", "bf16-mixed or not [")
    failures = _failures(result)
    assert "test_bases_in_order" in failures, result.stdout.str()[-2000:]
    assert failures["test_bases_in_order"].startswith(
        "AssertionError: WrongOrder lists lightning.pytorch.plugins.precision.precision.Precision before "
        "precision_base.PrecisionPlugin in its bases (MRO), so PrecisionPlugin.connect() never runs"
    ), failures["test_bases_in_order"]
    assert "InvalidPluginInfoError" in result.stdout.str(), "resolve() refuses the class too"


HEAVY_PACKAGE = {
    "heavy_pkg_abc/__init__.py": "import torch\n",
    "heavy_pkg_abc/plugin.py": "from precision_testsupport.dummy_plugin import DummyPrecision as Heavy\n",
}
HEAVY_TEST = """
import dataclasses
from precision_base.testing import PluginConformance
from precision_testsupport.dummy import INFO
from heavy_pkg_abc.plugin import Heavy


class TestHeavy(PluginConformance):
    backend = "dummy"
    plugin_info = dataclasses.replace(INFO, plugin_class="heavy_pkg_abc.plugin:Heavy")
    plugin_class = Heavy
"""


def test_kit_catches_a_plugin_package_that_imports_torch(pytester: pytest.Pytester) -> None:
    for path, text in HEAVY_PACKAGE.items():
        (pytester.path / path).parent.mkdir(exist_ok=True)
        (pytester.path / path).write_text(text)
    pytester.makepyfile(test_heavy=HEAVY_TEST)
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-k", "heavy")
    failures = _failures(result)
    assert set(failures) == {"test_info_and_package_import_nothing_heavy"}, result.stdout.str()[-2000:]
    assert failures["test_info_and_package_import_nothing_heavy"] == (
        "AssertionError: the package __init__ of dummy (package of heavy_pkg_abc.plugin:Heavy) imports torch; "
        "import it lazily"
    )


INSTALLED_HEAVY_TEST = """
from precision_base.testing import PluginConformance


class TestInstalledHeavy(PluginConformance):
    backend = "heavyinfo"
"""


def test_kit_catches_an_info_module_that_imports_torch(pytester: pytest.Pytester) -> None:
    """An installed plugin (real metadata in the default entry-point group) whose info module imports torch."""
    import precision_base
    from precision_testsupport.sites import PluginSite

    site = PluginSite(path=pytester.path / "site", group="precision_base.plugins", tag="kit")
    site.path.mkdir()
    site.plugin("heavyinfo", info_prelude="import torch\n")
    pytester.makepyfile(test_installed=INSTALLED_HEAVY_TEST)
    pytester.syspathinsert(site.path)
    precision_base.clear_cache()
    try:
        result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-k", "nothing_heavy")
    finally:
        precision_base.clear_cache()
    failures = _failures(result)
    assert set(failures) == {"test_info_and_package_import_nothing_heavy"}, result.stdout.str()[-2000:]
    assert failures["test_info_and_package_import_nothing_heavy"] == (
        "AssertionError: the info module of heavyinfo (plug_heavyinfo_kit._info:INFO) imports torch "
        "(listing plugins then pays for it)"
    )


EVERYTHING_BROKEN = """
import contextlib
from precision_base import DtypeTable
from precision_base.testing import PluginConformance
from precision_testsupport.dummy import INFO
from precision_testsupport.dummy_plugin import DummyPrecision


class Hopeless(DummyPrecision):
    def __init__(self, precision, **kw):
        self.precision = precision
    def convert_module(self, module):
        return module.double()
    def convert_input(self, data):
        return data
    def forward_context(self):
        return contextlib.nullcontext()
    def state_dict(self):
        return {"id": id(self)}
    def dtypes(self):
        return DtypeTable("float16", "float16", "int8", "float32", "float16", "float16", autocast="float32")


class TestHopeless(PluginConformance):
    backend = "dummy"
    plugin_info = INFO
    plugin_class = Hopeless
"""


def test_every_kit_failure_carries_a_message(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_hopeless=EVERYTHING_BROKEN)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    failures = _failures(result)
    assert len(failures) >= 8, failures
    for name, message in failures.items():
        kind, _, text = message.partition(": ")
        assert kind == "AssertionError", f"{name}: {message!r}"
        assert len(text) > 20, f"{name}: {message!r}"
        assert not text.startswith("assert "), f"{name} failed with a bare assert: {message!r}"
