"""The checks of the conformance kit; see :mod:`precision_base.testing` for how to use them."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any, ClassVar, Optional

import pytest

from precision_base.contract import CONTRACT_VERSION, DtypeTable, PluginInfo, PrecisionPlugin
from precision_base.errors import InvalidSpecError, UnsupportedPrecisionError
from precision_base.registry import default_registry, get_entry, resolve
from precision_base.spec import PRECISIONS

_NOT_A_PRECISION = ("64-true", "fp8", "BF16-MIXED", "")


def _dtype(name: str) -> Any:
    import torch

    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise AssertionError(f"{name!r} is not the name of a torch dtype")
    return value


def _assert_same_state(left: Any, right: Any, where: str = "state") -> None:
    import torch

    if isinstance(left, torch.Tensor):
        assert isinstance(right, torch.Tensor), f"{where}: tensor vs {type(right).__name__}"
        assert torch.equal(left, right), f"{where}: tensors differ"
    elif isinstance(left, dict):
        assert isinstance(right, dict), f"{where}: dict vs {type(right).__name__}"
        assert set(left) == set(right), f"{where}: keys {set(left)} vs {set(right)}"
        for key in left:
            _assert_same_state(left[key], right[key], f"{where}[{key!r}]")
    else:
        assert left == right, f"{where}: {left!r} != {right!r}"


class PluginConformance:
    """Subclass this in a test module and set ``backend``; pytest collects the checks below."""

    backend: ClassVar[str]
    plugin_info: ClassVar[Optional[PluginInfo]] = None
    plugin_class: ClassVar[Optional[type]] = None

    # -- collection -------------------------------------------------------------------------------------
    @classmethod
    def _declared_precisions(cls) -> tuple[str, ...]:
        if cls.plugin_info is not None:
            return cls.plugin_info.precisions
        return get_entry(cls.backend).precisions

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "precision" in metafunc.fixturenames:
            metafunc.parametrize("precision", self._declared_precisions())

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _in_process_registration(cls) -> Iterator[None]:
        if cls.plugin_info is None:
            yield
            return
        registry = default_registry()
        registry.register(cls.plugin_info, plugin_class=cls.plugin_class, replace=True)
        try:
            yield
        finally:
            registry.unregister(cls.plugin_info.backend)

    @pytest.fixture
    def plugin_cls(self) -> Any:
        from precision_base.registry import get_plugin_class

        return get_plugin_class(self.backend)

    @pytest.fixture
    def plugin(self, precision: str) -> Any:
        instance = resolve(f"{self.backend}:{precision}")
        instance.bind_device("cpu")
        return instance

    @pytest.fixture
    def table(self, plugin: Any) -> DtypeTable:
        table = plugin.dtypes()
        assert isinstance(table, DtypeTable), f"dtypes() must return a DtypeTable, got {type(table).__name__}"
        return table

    # -- the checks -------------------------------------------------------------------------------------
    def test_declared_info_matches_class(self, plugin_cls: Any) -> None:
        info = get_entry(self.backend).info
        assert info is not None
        assert issubclass(plugin_cls, PrecisionPlugin)
        assert plugin_cls.backend == info.backend == self.backend
        assert tuple(plugin_cls.precisions) == tuple(info.precisions)
        assert plugin_cls.contract_version == info.contract_version == CONTRACT_VERSION
        if self.plugin_class is None:  # installed plugin: the declared class path must lead to this very class
            module, _, qualname = info.plugin_class.partition(":")
            assert (plugin_cls.__module__, plugin_cls.__qualname__) == (module, qualname)

    def test_is_a_lightning_precision(self, plugin: Any) -> None:
        from lightning.pytorch.plugins.precision import Precision

        assert isinstance(plugin, Precision), f"{type(plugin).__name__} is not a lightning.pytorch Precision"

    def test_constructs_by_name(self, plugin: Any, plugin_cls: Any, precision: str) -> None:
        assert type(plugin) is plugin_cls
        assert plugin.precision == precision

    def test_constructs_by_class(self, plugin_cls: Any, precision: str) -> None:
        assert plugin_cls(precision).precision == precision

    def test_rejects_unknown_precisions(self, plugin_cls: Any) -> None:
        for bad in _NOT_A_PRECISION:
            with pytest.raises(ValueError):
                plugin_cls(bad)
        with pytest.raises(InvalidSpecError):
            resolve(f"{self.backend}:64")
        for missing in set(PRECISIONS) - set(self._declared_precisions()):
            with pytest.raises(UnsupportedPrecisionError, match=self.backend):
                resolve(f"{self.backend}:{missing}")

    def test_dtype_table_names_torch_dtypes(self, table: DtypeTable) -> None:
        for role, name in table.rows():
            if role == "autocast" and name == "-":
                continue
            _dtype(name)

    def test_convert_input(self, plugin: Any, table: DtypeTable) -> None:
        import torch

        batch = {"x": torch.ones(2, dtype=torch.float32), "index": torch.arange(2)}
        out = plugin.convert_input(batch)
        assert out["x"].dtype == _dtype(table.inputs)
        assert out["index"].dtype == torch.int64, "convert_input must leave integer tensors alone"

    def test_convert_output(self, plugin: Any, table: DtypeTable) -> None:
        import torch

        out = plugin.convert_output({"y": torch.ones(2, dtype=_dtype(table.compute)), "n": torch.arange(2)})
        assert out["y"].dtype == torch.get_default_dtype()
        assert out["n"].dtype == torch.int64

    def test_convert_module(self, plugin: Any, table: DtypeTable) -> None:
        import torch

        module = plugin.convert_module(torch.nn.Linear(4, 4))
        assert {p.dtype for p in module.parameters()} == {_dtype(table.init)}

    def test_init_contexts(self, plugin: Any, table: DtypeTable) -> None:
        import torch

        default = torch.get_default_dtype()
        with plugin.module_init_context():
            module = torch.nn.Linear(4, 4)
        with plugin.tensor_init_context():
            tensor = torch.empty(3)
        assert module.weight.dtype == _dtype(table.init)
        assert tensor.dtype == _dtype(table.init)
        assert torch.get_default_dtype() == default, "init contexts must restore the default dtype"

    def test_forward_context(self, plugin: Any, table: DtypeTable) -> None:
        import torch

        a = torch.randn(8, 8)
        with plugin.forward_context():
            enabled = torch.is_autocast_enabled("cpu")
            product = a @ a
            autocast_dtype = torch.get_autocast_dtype("cpu") if enabled else None
        assert enabled == (table.autocast is not None), (
            f"forward_context autocast on cpu: enabled={enabled}, table says autocast={table.autocast}"
        )
        if table.autocast is not None:
            assert autocast_dtype == _dtype(table.autocast)
            assert product.dtype == _dtype(table.compute)
        assert not torch.is_autocast_enabled("cpu"), "forward_context must leave autocast as it found it"

    def test_state_dict_round_trip(self, plugin: Any, plugin_cls: Any, precision: str) -> None:
        state = plugin.state_dict()
        assert isinstance(state, dict)
        fresh = plugin_cls(precision)
        fresh.load_state_dict(state)
        _assert_same_state(fresh.state_dict(), state)

    def test_pickles(self, plugin: Any, table: DtypeTable) -> None:
        clone = pickle.loads(pickle.dumps(plugin))
        assert type(clone) is type(plugin)
        assert clone.precision == plugin.precision
        assert clone.dtypes() == table
        _assert_same_state(clone.state_dict(), plugin.state_dict())
