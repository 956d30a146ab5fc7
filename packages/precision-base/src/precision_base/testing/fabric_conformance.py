"""The conformance kit for a backend's Fabric class (``PluginInfo.fabric_class``).

Usage, in a plugin package's tests, next to `PluginConformance`::

    from precision_base.testing import FabricPluginConformance

    class TestMyFabricConformance(FabricPluginConformance):
        backend = "mybackend"

Every shared check ([`ConformanceChecks`][precision_base.testing.conformance.ConformanceChecks], which
`PluginConformance` runs too) runs against the Fabric class built by
[`precision_base.resolve_fabric`][] (conversions, contexts, the dtype table, state and pickling), with the
Trainer-specific checks replaced by their Fabric counterparts (the Trainer kit's audited ``Trainer.fit`` is not
inherited), plus checks that the two classes are one
implementation (the same dtype table and ``describe()``) and that each door refuses the other's class.
"""

from __future__ import annotations

from typing import Any

import pytest

from precision_base.contract import PrecisionPlugin
from precision_base.doors.fabric import fabric_class, resolve_fabric
from precision_base.doors.identity import door_of
from precision_base.errors import WrongDoorError
from precision_base.registry import get_entry, resolve
from precision_base.registry.classes import lightning_before_mixin
from precision_base.registry.loading import load_class
from precision_base.testing.conformance import ConformanceChecks


class FabricPluginConformance(ConformanceChecks):
    """Subclass this in a test module and set ``backend``; pytest collects the checks below, once per precision.

    It shares the checks of [`ConformanceChecks`][precision_base.testing.conformance.ConformanceChecks] with the Trainer
    kit, not
    the Trainer kit's audited ``Trainer.fit`` (that one is `PluginConformance`'s)."""

    @pytest.fixture
    def plugin_cls(self) -> Any:
        return fabric_class(self.backend)

    @pytest.fixture
    def plugin(self, precision: str) -> Any:
        instance = resolve_fabric(f"{self.backend}:{precision}")
        instance.bind_device("cpu")
        return instance

    def _declared_fabric_class(self) -> str:
        info = get_entry(self.backend).info
        assert info is not None, f"backend {self.backend!r} has no PluginInfo"
        assert info.fabric_class, (
            f"backend {self.backend!r}: PluginInfo.fabric_class is empty, so Fabric doors refuse it; declare the "
            "plugin's Fabric class as 'package.module:ClassName', or do not run the Fabric kit for this backend"
        )
        return info.fabric_class

    def test_declared_info_matches_class(self, plugin_cls: Any) -> None:
        ref = self._declared_fabric_class()
        info = get_entry(self.backend).info
        assert info is not None
        name = plugin_cls.__qualname__
        assert issubclass(plugin_cls, PrecisionPlugin), f"{name} does not derive from precision_base.PrecisionPlugin"
        assert plugin_cls.backend == info.backend, f"{name}.backend={plugin_cls.backend!r} != {info.backend!r}"
        assert tuple(plugin_cls.precisions) == tuple(info.precisions), (
            f"{name}.precisions={tuple(plugin_cls.precisions)} but PluginInfo.precisions={tuple(info.precisions)}"
        )
        module, _, qualname = ref.partition(":")
        assert (plugin_cls.__module__, plugin_cls.__qualname__) == (module, qualname), (
            f"PluginInfo.fabric_class={ref!r} but the class is {plugin_cls.__module__}:{plugin_cls.__qualname__}"
        )

    def test_bases_in_order(self) -> None:
        """The PrecisionPlugin mixin must come before Fabric's Precision in the Fabric class's bases too."""
        cls: Any = load_class(self._declared_fabric_class())
        wrong = lightning_before_mixin(cls)
        assert wrong is None, (
            f"{cls.__qualname__} lists {wrong.__module__}.{wrong.__qualname__} before precision_base.PrecisionPlugin"
        )

    def test_is_a_lightning_precision(self, plugin: Any) -> None:
        from lightning.fabric.plugins.precision import Precision as FabricPrecision
        from lightning.pytorch.plugins.precision import Precision as TrainerPrecision

        name = type(plugin).__name__
        assert isinstance(plugin, FabricPrecision), f"{name} is not a lightning.fabric Precision"
        assert not isinstance(plugin, TrainerPrecision), f"{name} is a Trainer Precision: that is the Trainer class"
        assert door_of(plugin) == "Fabric", f"{name} belongs to {door_of(plugin)!r}, not Fabric"

    def test_one_implementation_with_the_trainer_class(self, plugin: Any, precision: str) -> None:
        trainer_plugin = resolve(f"{self.backend}:{precision}")
        assert plugin.dtypes() == trainer_plugin.dtypes(), "the Fabric and Trainer classes state different dtypes"
        assert dict(plugin.describe()) == dict(trainer_plugin.describe()), "describe() differs between the doors"
        assert plugin.spec == trainer_plugin.spec

    def test_lightnings_fabric_refuses_the_trainer_class_at_setup(self, precision: str) -> None:
        import lightning.fabric as lf
        import torch

        trainer_plugin = resolve(f"{self.backend}:{precision}")
        fabric = lf.Fabric(plugins=[trainer_plugin], accelerator="cpu", devices=1)
        refused = ""
        try:
            fabric.setup(torch.nn.Linear(4, 4))
        except WrongDoorError as exc:
            refused = str(exc)
        assert refused, (
            f"lightning.fabric.Fabric(plugins=[{trainer_plugin!r}]).setup(...) accepted the Trainer class; its "
            "convert_module should call precision_base.doors.identity.check_caller(self)"
        )
        assert self._declared_fabric_class().replace(":", ".") in refused, f"the message names no class: {refused}"

    def test_trainer_door_refuses_the_fabric_class(self, plugin: Any) -> None:
        from precision_base.doors.trainer import prepare_trainer_kwargs

        try:
            prepare_trainer_kwargs(plugin, {"accelerator": "cpu"})
        except WrongDoorError:
            return
        raise AssertionError(f"precision_base.Trainer(precision_plugin={plugin!r}) accepted the Fabric class")


__all__ = ["FabricPluginConformance"]
