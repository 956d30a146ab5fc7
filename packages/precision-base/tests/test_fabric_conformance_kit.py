"""The Fabric conformance kit passes a sound Fabric class and fails each defect, run through pytester.

The plugins under test are built from the dummy plugin's implementation mixin: a Trainer class and a Fabric class
sharing it, each guarding ``convert_module`` with ``precision_base.doors.identity.check_caller``; the defects drop the
guard, build the "Fabric class" on a Trainer base, or declare no Fabric class at all.
"""

from __future__ import annotations

import pytest

# imported here so that pytester's in-process runs find them in sys.modules instead of importing them again
pytest.importorskip("lightning.fabric")
pytest.importorskip("precision_base.testing.fabric_conformance")
pytest.importorskip("precision_testsupport.dummy_plugin")

PLUGINS = """
import lightning.fabric as lf
import lightning.pytorch as pl

from precision_base.doors.identity import check_caller
from precision_testsupport.dummy_plugin import DummyPrecisionImpl


class GuardedImpl(DummyPrecisionImpl):
    def convert_module(self, module):
        check_caller(self)
        return super().convert_module(module)


class GuardedTrainer(GuardedImpl, pl.plugins.precision.Precision):
    pass


class UnguardedTrainer(DummyPrecisionImpl, pl.plugins.precision.Precision):
    pass


class FabricPlugin(GuardedImpl, lf.plugins.precision.Precision):
    pass


class NotFabric(GuardedImpl, pl.plugins.precision.Precision):
    pass
"""

KIT = """
import dataclasses

import fabric_dummy
from precision_testsupport.dummy import INFO
from precision_base.testing.fabric_conformance import FabricPluginConformance


class TestKit(FabricPluginConformance):
    backend = "dummy"
    plugin_info = dataclasses.replace(INFO, plugin_class="fabric_dummy:{trainer}", fabric_class="{fabric}")
    plugin_class = fabric_dummy.{trainer}
"""


def _run(pytester: pytest.Pytester, trainer: str, fabric: str) -> pytest.RunResult:
    pytester.makepyfile(fabric_dummy=PLUGINS)
    pytester.makepyfile(test_kit=KIT.format(trainer=trainer, fabric=fabric))
    pytester.syspathinsert()
    # the package-import check is the Trainer kit's and is proven in test_conformance_kit.py; fabric_dummy is heavy
    return pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-k", "not nothing_heavy")


def test_sound_fabric_class_passes(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "GuardedTrainer", "fabric_dummy:FabricPlugin")
    assert result.ret == 0, result.stdout.str()
    assert result.parseoutcomes()["passed"] >= 3 * 15, "every check ran for the dummy's three precisions"


def test_a_trainer_class_without_the_guard_fails_the_setup_check(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "UnguardedTrainer", "fabric_dummy:FabricPlugin")
    failed = [line for line in result.outlines if line.startswith("FAILED")]
    assert failed, result.stdout.str()
    assert all("test_lightnings_fabric_refuses_the_trainer_class_at_setup" in line for line in failed), failed
    assert len(failed) == 3, failed
    result.stdout.fnmatch_lines(["*accepted the Trainer class; its convert_module should call*check_caller*"])


def test_a_fabric_class_on_a_trainer_base_fails(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "GuardedTrainer", "fabric_dummy:NotFabric")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*fabric_class fabric_dummy:NotFabric is not a precision_base.PrecisionPlugin built*"])


def test_a_backend_without_a_fabric_class_fails_with_the_reason(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "GuardedTrainer", "")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*PluginInfo.fabric_class is empty, so Fabric doors refuse it*"])
