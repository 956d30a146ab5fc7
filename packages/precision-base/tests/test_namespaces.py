"""precision_base.namespaces: plugin classes rebuilt for pytorch_lightning from the same code, with real classes."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from typing import Any

import pytest

L = pytest.importorskip("lightning.pytorch")
PL = pytest.importorskip("pytorch_lightning")
import lightning_fabric  # noqa: E402
import torch  # noqa: E402

from precision_base import PrecisionPlugin  # noqa: E402
from precision_base.namespaces import NAMESPACES, for_namespace, namespace_of  # noqa: E402


class _ImplMixin(PrecisionPlugin):
    """All the code of the test plugin; no Lightning base (zero-argument super() reaches Lightning's methods)."""

    backend = "ns"
    precisions = ("32-true", "bf16-mixed")

    def __init__(self, precision: object, *, scale: float = 1.0) -> None:
        self.precision = self.canonical_precision(precision)
        self.scale = scale
        self.scaler = None  # read by Lightning's FSDPPrecision.state_dict
        self._desired_input_dtype = torch.bfloat16  # read by Lightning's FSDPPrecision.convert_input

    def convert_input(self, data: Any) -> Any:
        self.seen = super().convert_input(data)  # Lightning's Precision.convert_input, whichever namespace
        return self.seen

    def fsdp_strategy_class(self) -> type:
        return self.lightning.strategies.FSDPStrategy  # type: ignore[no-any-return]


class NsPrecision(_ImplMixin, L.plugins.precision.Precision):
    """The concrete class: bases only."""


class NsFSDPPrecision(_ImplMixin, L.plugins.precision.FSDPPrecision):
    """Same mixin over Lightning's FSDPPrecision, with one method of its own calling zero-argument super()."""

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "scale": self.scale}


def test_namespace_of_reads_the_mro() -> None:
    assert namespace_of(L.Trainer) == "lightning.pytorch"
    assert namespace_of(PL.strategies.DDPStrategy()) == "pytorch_lightning"
    assert namespace_of(PL.accelerators.CPUAccelerator) == "pytorch_lightning"
    assert namespace_of(NsPrecision) == "lightning.pytorch"  # its own module is this test file
    assert namespace_of(lightning_fabric.plugins.Precision()) == "lightning_fabric"
    assert namespace_of(_ImplMixin) is None
    assert namespace_of(3) is None


def test_rebuilt_class_derives_from_the_other_namespace() -> None:
    built = for_namespace(NsPrecision, "pytorch_lightning")
    assert built is not NsPrecision
    assert issubclass(built, PL.plugins.precision.Precision)
    assert not issubclass(built, L.plugins.precision.Precision)
    assert issubclass(built, _ImplMixin)  # the code is the same object, not a copy
    assert namespace_of(built) == "pytorch_lightning"
    assert (built.__name__, built.__qualname__) == ("NsPrecision", "NsPrecision")
    assert built.__module__ == f"precision_base.namespaces.pytorch_lightning.{__name__}"


def test_rebuilt_classes_are_cached_and_map_back() -> None:
    built = for_namespace(NsFSDPPrecision, "pytorch_lightning")
    assert for_namespace(NsFSDPPrecision, "pytorch_lightning") is built
    assert for_namespace(built, "pytorch_lightning") is built
    assert for_namespace(built, "lightning.pytorch") is NsFSDPPrecision
    assert for_namespace(NsFSDPPrecision, "lightning.pytorch") is NsFSDPPrecision
    assert for_namespace(_ImplMixin, "pytorch_lightning") is _ImplMixin  # nothing to swap
    assert NAMESPACES == ("lightning.pytorch", "pytorch_lightning")
    with pytest.raises(ValueError, match="namespace must be one of"):
        for_namespace(NsPrecision, "lightning")


def test_super_and_the_lightning_root_work_in_the_rebuilt_class() -> None:
    built = for_namespace(NsFSDPPrecision, "pytorch_lightning")
    plugin = built("bf16", scale=2.0)
    assert plugin.precision == "bf16-mixed"
    assert plugin.spec == "ns:bf16-mixed"
    assert plugin.lightning is PL
    assert built.lightning is PL
    assert NsFSDPPrecision.lightning is L
    assert plugin.fsdp_strategy_class() is PL.strategies.FSDPStrategy
    batch = torch.ones(2, dtype=torch.float64)
    assert plugin.convert_input(batch).dtype is torch.bfloat16  # the mixin's super() reached PL's FSDPPrecision
    assert plugin.state_dict() == {"scale": 2.0}  # the concrete class's own zero-argument super() still works


def test_a_pytorch_lightning_trainer_accepts_the_rebuilt_plugin() -> None:
    plugin = for_namespace(NsPrecision, "pytorch_lightning")("32")
    trainer = PL.Trainer(plugins=[plugin], accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    assert trainer.precision_plugin is plugin
    with pytest.raises(PL.utilities.exceptions.MisconfigurationException, match="Found invalid type for plugin"):
        PL.Trainer(plugins=[NsPrecision("32")], accelerator="cpu", devices=1, logger=False)


def test_rebuilt_class_and_instance_pickle_in_process() -> None:
    built = for_namespace(NsFSDPPrecision, "pytorch_lightning")
    assert pickle.loads(pickle.dumps(built)) is built
    copy = pickle.loads(pickle.dumps(built("bf16-mixed", scale=3.0)))
    assert type(copy) is built
    assert copy.scale == 3.0
    assert copy.precision == "bf16-mixed"


def test_rebuilt_instance_unpickles_in_a_fresh_process() -> None:
    """The fresh interpreter has not rebuilt anything: unpickling imports the virtual module, which rebuilds."""
    from precision_testsupport.dummy_plugin import DummyPrecision

    data = pickle.dumps(for_namespace(DummyPrecision, "pytorch_lightning")("bf16-true"))
    script = textwrap.dedent("""
        import pickle, sys
        import pytorch_lightning
        plugin = pickle.loads(sys.stdin.buffer.read())
        print(type(plugin).__module__, type(plugin).__qualname__, plugin.precision,
              isinstance(plugin, pytorch_lightning.plugins.precision.Precision))
    """)
    out = subprocess.run([sys.executable, "-c", script], input=data, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout.decode().split() == [
        "precision_base.namespaces.pytorch_lightning.precision_testsupport.dummy_plugin",
        "DummyPrecision",
        "bf16-true",
        "True",
    ]


def test_the_helper_modules_import_nothing_heavy() -> None:
    code = (
        "import sys, precision_base.namespaces, precision_base.kit.plugin_support; "
        "print([m for m in ('torch', 'lightning', 'pytorch_lightning') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
