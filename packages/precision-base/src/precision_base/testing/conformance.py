"""The checks of the conformance kit; see [`precision_base.testing`][] for how to use them.

Every check asserts with a message that names the plugin, the precision and what was expected, so a failure reads
on its own without pytest's assertion rewriting.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import fields
from typing import Any, ClassVar, Optional

import pytest

from precision_base.contract import CONTRACT_VERSION, DtypeTable, PluginInfo, PrecisionPlugin
from precision_base.errors import InvalidSpecError, UnsupportedPrecisionError
from precision_base.registry import default_registry, get_entry, resolve
from precision_base.registry.classes import lightning_before_mixin
from precision_base.registry.loading import load_class
from precision_base.spec import MIXED_PRECISIONS, PRECISIONS

PRECISION_DTYPE: dict[str, str] = {
    "32-true": "float32",
    "16-true": "float16",
    "bf16-true": "bfloat16",
    "16-mixed": "float16",
    "bf16-mixed": "bfloat16",
}
"""The dtype each precision computes in (kept torch-free here; the kit checks it against the plugin's table)."""

_NOT_A_PRECISION = ("64-true", "int8", "BF16-MIXED", "")


def _dtype(name: str) -> Any:
    import torch

    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise AssertionError(f"{name!r} is not the name of a torch dtype")
    return value


def _raises(kind: type[BaseException], call: Any, what: str) -> None:
    """Fail with a sentence unless ``call()`` raises ``kind``."""
    try:
        call()
    except kind:
        return
    except Exception as exc:
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}; expected {kind.__name__}") from exc
    raise AssertionError(f"{what} did not raise; expected {kind.__name__}")


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


class ConformanceChecks:
    """The checks both kits run (``PluginConformance``, ``FabricPluginConformance``); subclass one of those."""

    backend: ClassVar[str]
    plugin_info: ClassVar[Optional[PluginInfo]] = None
    plugin_class: ClassVar[Optional[type]] = None
    module_cast_by_strategy: ClassVar[bool] = False
    """Set True only when the strategy, not the plugin, casts the module to the compute dtype (DeepSpeed's engine
    does): the compute check then casts the module itself, standing in for the strategy."""

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
        name = getattr(plugin_cls, "__qualname__", plugin_cls)
        assert info is not None, f"backend {self.backend!r} has no PluginInfo"
        assert issubclass(plugin_cls, PrecisionPlugin), f"{name} does not derive from precision_base.PrecisionPlugin"
        assert plugin_cls.backend == info.backend == self.backend, (
            f"{name}.backend={plugin_cls.backend!r}, PluginInfo.backend={info.backend!r}, kit backend={self.backend!r}"
        )
        assert tuple(plugin_cls.precisions) == tuple(info.precisions), (
            f"{name}.precisions={tuple(plugin_cls.precisions)} but PluginInfo.precisions={tuple(info.precisions)}"
        )
        assert plugin_cls.contract_version == info.contract_version == CONTRACT_VERSION, (
            f"contract versions differ: class {plugin_cls.contract_version}, info {info.contract_version}, "
            f"precision-base {CONTRACT_VERSION}"
        )
        if self.plugin_class is None:  # installed plugin: the declared class path must lead to this very class
            module, _, qualname = info.plugin_class.partition(":")
            assert (plugin_cls.__module__, plugin_cls.__qualname__) == (module, qualname), (
                f"PluginInfo.plugin_class={info.plugin_class!r} but the class is "
                f"{plugin_cls.__module__}:{plugin_cls.__qualname__}"
            )

    def test_bases_in_order(self) -> None:
        """The PrecisionPlugin mixin must come before Lightning's Precision, or its connect() never runs."""
        cls: Any = self.plugin_class
        if cls is None:  # imported directly: resolve() would refuse a class in the wrong order before we see it
            info = get_entry(self.backend).info
            assert info is not None, f"backend {self.backend!r} has no PluginInfo"
            cls = load_class(info.plugin_class)
        assert isinstance(cls, type), f"{cls!r} is not a class"
        wrong = lightning_before_mixin(cls)
        assert wrong is None, (
            f"{cls.__qualname__} lists {wrong.__module__}.{wrong.__qualname__} before precision_base.PrecisionPlugin "
            "in its bases (MRO), so PrecisionPlugin.connect() never runs and autocast stays on the wrong device; "
            f"write class {cls.__qualname__}(<PrecisionPlugin mixin>, {getattr(wrong, '__qualname__', wrong)})"
        )

    def test_info_and_package_import_nothing_heavy(self) -> None:
        """Listing must stay cheap: the info module and the package __init__ import no torch, no Lightning and nothing
        else built on torch that the plugin's distribution requires (its backend's engine)."""
        from precision_base.registry.import_check import heavy_imports

        entry = get_entry(self.backend)
        if entry.entry_point:
            module, _, attr = entry.entry_point.partition(":")
            where = f"{self.backend} ({entry.entry_point})"
        else:  # registered in-process: its package is what a user imports
            assert entry.info is not None, f"backend {self.backend!r} has no PluginInfo"
            module, attr = entry.info.plugin_class.partition(":")[0], ""
            where = f"{self.backend} (package of {entry.info.plugin_class})"
        distribution = entry.distribution if entry.entry_point else ""  # in-process: a label, not a distribution
        problems = heavy_imports(module, attr.strip(), distribution=distribution).problems(where)
        assert not problems, "; ".join(problems)

    def test_is_a_lightning_precision(self, plugin: Any) -> None:
        from lightning.pytorch.plugins.precision import Precision

        assert isinstance(plugin, Precision), f"{type(plugin).__name__} is not a lightning.pytorch Precision"

    def test_constructs_by_name(self, plugin: Any, plugin_cls: Any, precision: str) -> None:
        assert type(plugin) is plugin_cls, f"resolve() built {type(plugin).__qualname__}, expected {plugin_cls}"
        assert plugin.precision == precision, f"resolve('{self.backend}:{precision}').precision == {plugin.precision!r}"

    def test_constructs_by_class(self, plugin_cls: Any, precision: str) -> None:
        built = plugin_cls(precision).precision
        assert built == precision, f"{plugin_cls.__qualname__}({precision!r}).precision == {built!r}"

    def test_rejects_unknown_precisions(self, plugin_cls: Any) -> None:
        name = plugin_cls.__qualname__
        for bad in _NOT_A_PRECISION:
            _raises(ValueError, lambda bad=bad: plugin_cls(bad), f"{name}({bad!r})")
        _raises(InvalidSpecError, lambda: resolve(f"{self.backend}:64"), f"resolve('{self.backend}:64')")
        for missing in sorted(set(PRECISIONS) - set(self._declared_precisions())):
            spec = f"{self.backend}:{missing}"
            _raises(UnsupportedPrecisionError, lambda spec=spec: resolve(spec), f"resolve({spec!r})")

    def test_extra_precisions(self, plugin_cls: Any) -> None:
        """Extra precisions (``PluginInfo.extra_precisions``, e.g. ``fp8-tensorwise``): the class declares the same
        ones, each resolves by name to an instance of that precision, and its dtype table names torch dtypes with the
        compute dtype of its base precision (the extra feature is described by ``describe()``)."""
        info = get_entry(self.backend).info
        assert info is not None
        declared = tuple(getattr(plugin_cls, "extra_precisions", ()))
        assert declared == tuple(info.extra_precisions), (
            f"{plugin_cls.__qualname__}.extra_precisions={declared} but PluginInfo.extra_precisions="
            f"{tuple(info.extra_precisions)}"
        )
        for name, base in info.extra_precisions:
            plugin = resolve(f"{self.backend}:{name}")
            assert plugin.precision == name, f"resolve('{self.backend}:{name}').precision == {plugin.precision!r}"
            table = plugin.dtypes()
            for role, dtype in table.rows():
                if not (role == "autocast" and dtype == "-"):
                    _dtype(dtype)
            assert table.compute == PRECISION_DTYPE[base], (
                f"{self.backend}:{name} dtypes() computes in {table.compute}; its base {base} computes in "
                f"{PRECISION_DTYPE[base]}"
            )

    def test_dtype_table_names_torch_dtypes(self, table: DtypeTable) -> None:
        for role, name in table.rows():
            if role == "autocast" and name == "-":
                continue
            _dtype(name)

    def test_dtype_table_is_consistent(self, table: DtypeTable, precision: str) -> None:
        """What any plugin's table must say for ``precision``, whatever the backend."""
        want = PRECISION_DTYPE[precision]
        where = f"{self.backend}:{precision} dtypes()"
        problems = []
        if table.compute != want:
            problems.append(f"compute is {table.compute}, but {precision} computes in {want}")
        if table.autocast is not None and table.autocast != table.compute:
            problems.append(f"autocast is {table.autocast} but compute is {table.compute}")
        if precision in MIXED_PRECISIONS:
            if table.parameters != "float32":
                problems.append(f"parameters are {table.parameters}; {precision} keeps float32 parameters")
            if table.autocast is None and not self.module_cast_by_strategy:
                problems.append(
                    f"autocast is None, so nothing makes {precision} compute in {want} (set the kit's "
                    "module_cast_by_strategy only if the strategy casts the module, as DeepSpeed's engine does)"
                )
        else:
            if table.autocast is not None:
                problems.append(f"autocast is {table.autocast}, but {precision} does not autocast")
            if table.init != want:
                problems.append(f"init (parameters after convert_module) is {table.init}; {precision} means {want}")
        for role in ("reduction", "buffers", "inputs"):
            if getattr(table, role) not in ("float32", want):
                problems.append(f"{role} is {getattr(table, role)}; expected float32 or {want}")
        assert not problems, f"{where}: " + "; ".join(problems)

    def test_convert_input(self, plugin: Any, table: DtypeTable) -> None:
        import torch

        batch = {"x": torch.ones(2, dtype=torch.float32), "index": torch.arange(2)}
        out = plugin.convert_input(batch)
        assert out["x"].dtype == _dtype(table.inputs), (
            f"convert_input turned a float32 tensor into {out['x'].dtype}; the table says inputs={table.inputs}"
        )
        assert out["index"].dtype == torch.int64, "convert_input must leave integer tensors alone"

    def test_convert_output(self, plugin: Any, table: DtypeTable) -> None:
        import torch

        out = plugin.convert_output({"y": torch.ones(2, dtype=_dtype(table.compute)), "n": torch.arange(2)})
        assert out["y"].dtype == torch.get_default_dtype(), (
            f"convert_output left a {table.compute} tensor as {out['y'].dtype}; expected the default dtype"
        )
        assert out["n"].dtype == torch.int64, "convert_output must leave integer tensors alone"

    def test_convert_module(self, plugin: Any, table: DtypeTable) -> None:
        import torch

        module = plugin.convert_module(torch.nn.Linear(4, 4))
        found = {p.dtype for p in module.parameters()}
        assert found == {_dtype(table.init)}, (
            f"parameters after convert_module are {sorted(map(str, found))}; the table says init={table.init}"
        )

    def test_compute_dtype_of_a_real_matmul(self, plugin: Any, table: DtypeTable, precision: str) -> None:
        """convert_module, convert_input, then a Linear layer under forward_context: its output is the compute dtype."""
        import torch

        module = plugin.convert_module(torch.nn.Linear(8, 8))
        if self.module_cast_by_strategy and table.autocast is None:
            module = module.to(_dtype(table.compute))  # stands in for the strategy (e.g. DeepSpeed's engine)
        x = plugin.convert_input(torch.randn(4, 8))
        try:
            with plugin.forward_context():
                y = module(x)
        except RuntimeError as exc:
            raise AssertionError(
                f"{self.backend}:{precision}: a Linear layer after convert_module/convert_input failed under "
                f"forward_context: {exc}"
            ) from exc
        assert y.dtype == _dtype(table.compute), (
            f"{self.backend}:{precision}: a matmul under forward_context computed in {y.dtype}; the table says "
            f"compute={table.compute}"
        )

    def test_init_contexts(self, plugin: Any, table: DtypeTable) -> None:
        import torch

        default = torch.get_default_dtype()
        with plugin.module_init_context():
            module = torch.nn.Linear(4, 4)
        with plugin.tensor_init_context():
            tensor = torch.empty(3)
        assert module.weight.dtype == _dtype(table.init), (
            f"a module made under module_init_context has {module.weight.dtype} weights; table init={table.init}"
        )
        assert tensor.dtype == _dtype(table.init), (
            f"a tensor made under tensor_init_context is {tensor.dtype}; table init={table.init}"
        )
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
            assert autocast_dtype == _dtype(table.autocast), (
                f"forward_context autocasts to {autocast_dtype}; the table says autocast={table.autocast}"
            )
            assert product.dtype == _dtype(table.compute), (
                f"a float32 matmul under forward_context computed in {product.dtype}; table compute={table.compute}"
            )
        assert not torch.is_autocast_enabled("cpu"), "forward_context must leave autocast as it found it"

    def test_state_dict_round_trip(self, plugin: Any, plugin_cls: Any, precision: str) -> None:
        state = plugin.state_dict()
        assert isinstance(state, dict), f"state_dict() returned {type(state).__name__}, expected a dict"
        fresh = plugin_cls(precision)
        fresh.load_state_dict(state)
        _assert_same_state(fresh.state_dict(), state)

    def test_pickles(self, plugin: Any, table: DtypeTable) -> None:
        clone = pickle.loads(pickle.dumps(plugin))
        assert type(clone) is type(plugin), f"unpickled as {type(clone)}, expected {type(plugin)}"
        assert clone.precision == plugin.precision, f"unpickled precision {clone.precision!r} != {plugin.precision!r}"
        assert clone.dtypes() == table, "dtypes() differ after pickling"
        _assert_same_state(clone.state_dict(), plugin.state_dict())


class PluginConformance(ConformanceChecks):
    """Subclass this in a test module and set ``backend``; pytest collects the checks below (those of
    ``ConformanceChecks``, run on the backend's Trainer class) and the opt-in audited Trainer fit."""

    audit_fit: ClassVar[bool] = False
    """Set True to run ``test_strict_audit_of_a_real_two_process_fit`` (2 CPU processes, 20-60 s); off by default so
    that the kit's other checks stay fast (the check then reports itself skipped, saying so)."""
    audit_fit_precisions: ClassVar[tuple[str, ...]] = ()
    """The precisions the audited 2-process fit runs; ``()`` (the default): every declared one."""

    @pytest.mark.slow
    def test_strict_audit_of_a_real_two_process_fit(self) -> None:
        """Every declared precision (``audit_fit_precisions`` narrows them) fits 2 steps in 2 CPU processes under
        ``PrecisionAudit(strict=True)``: what runs must match ``dtypes()``. A precision the plugin itself refuses on
        this machine (a ``PrecisionPluginError`` while the Trainer is built) is reported, not failed; at least one
        precision must run."""
        if not self.audit_fit:
            pytest.skip("the audited 2-process fit is opt-in: set audit_fit = True on the kit class to run it")
        import os
        import sys

        from precision_base.testing.ranks import run_ranks

        precisions = self.audit_fit_precisions or self._declared_precisions()
        args: dict[str, Any] = {"backend": self.backend, "precisions": list(precisions)}
        env = {"PYTHONWARNINGS": "ignore"}
        if self.plugin_info is not None:
            cls = self.plugin_class
            ref = f"{cls.__module__}:{cls.__qualname__}" if cls is not None else self.plugin_info.plugin_class
            args["register"] = {
                **{f.name: getattr(self.plugin_info, f.name) for f in fields(PluginInfo)},
                "class_ref": ref,
            }
            module = sys.modules.get(ref.partition(":")[0])
            if module is not None and getattr(module, "__file__", None):
                folder = os.path.dirname(os.path.abspath(module.__file__ or ""))
                env["PYTHONPATH"] = os.pathsep.join([folder, *filter(None, [os.environ.get("PYTHONPATH")])])
        results = run_ranks("precision_base.testing.audit_fit:fit_each", args, world=2, threads=1, timeout=900, env=env)
        failed = {p: r["error"] for p, r in results.items() if "error" in r}
        assert not failed, "the strict audit failed:\n" + "\n".join(f"{p}:\n{e}" for p, e in failed.items())
        ran = [p for p, r in results.items() if "report" in r]
        refused = {p: r["refused"] for p, r in results.items() if "refused" in r}
        assert ran, f"no precision could run on this machine; the plugin refused each: {refused}"
        for precision in ran:
            report = results[precision]
            assert report["report"]["ok"], f"{self.backend}:{precision}:\n{report['text']}"


__all__ = ["ConformanceChecks", "PluginConformance"]
