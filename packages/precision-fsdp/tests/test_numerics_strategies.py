"""The numerics warnings of ``fsdp:16-true`` under every strategy a user can pass, once per run (issue 30, item 5).

Real one-process fits on CPU (gloo), Adam with ``eps=1e-8`` (0 in float16), 3 optimizer steps each, every warning
recorded (``simplefilter("always")``, so Python's once-per-location registry hides nothing): the Trainer with the
default strategy (``FSDP2Strategy``), with the user's ``ModelParallelStrategy`` whose ``configure_model`` calls torch's
``fully_shard`` or the plugin's, and Fabric with the same three. Each run gives exactly one "eps ... is 0 in float16"
warning and exactly one "FSDP with `16-true` enables computation in lower precision" warning, and its optimizer steps
float16 parameters. ``FSDPStrategy`` (FSDP1) needs a GPU (the plugin refuses FSDP1 on CPU): those tests run on CUDA.

Before the fix, torch's ``fully_shard`` in a ``configure_model`` under ``16-true`` left the sharded parameters float32
(the default keep-float32 rules sent ``convert_module`` to a cast that skips sharded parameters): the run was not
16-true and neither warning came; Fabric had no numerics check at all. The unit tests below pin the cast itself on a
one-rank mesh, and its refusal where torch's public API cannot cast a unit without casting a kept module inside it.
The 2-process runs are in ``tests-integration/test_numerics_strategies.py``; DeepSpeed's are there too.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import lightning.fabric as lf
import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import precision_base
from precision_base import PrecisionPluginWarning, get_plugin_class
from precision_fsdp import FSDPPrecision
from precision_fsdp._compat import DTensor, fsdp2_cpu_problem, fully_shard
from precision_fsdp.errors import KeepFP32Error
from precision_testsupport.models import QUIET, dtype_name, mlp, regression_data

needs_fsdp2_on_cpu = pytest.mark.skipif(
    fsdp2_cpu_problem() is not None, reason=f"FSDP2 on CPU needs a newer torch: {fsdp2_cpu_problem()}"
)
_NO_GPU = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="FSDPStrategy (FSDP1) needs a GPU: precision-fsdp refuses FSDP1 on CPU, and no CUDA device is visible",
)


def needs_gpu_for_fsdp1(test: Callable[..., None]) -> Callable[..., None]:
    """``gpu``-marked, skipped (with the reason) where torch sees no CUDA device."""
    return pytest.mark.gpu(_NO_GPU(test))


SPEC = "fsdp:16-true"
STEPS = 3
UNDERFLOW = "fsdp:16-true: Adam parameter group 0 has eps=1e-08, which is 0 in float16"
LOWER = "FSDP with `16-true` enables computation in lower precision."


def _counts(caught: list[warnings.WarningMessage]) -> dict[str, int]:
    underflows = [w for w in caught if issubclass(w.category, PrecisionPluginWarning)]
    return {
        "underflow": sum(str(w.message).startswith(UNDERFLOW) for w in underflows),
        "lower precision": sum(str(w.message).startswith(LOWER) for w in caught),
    }


def _adam(parameters: Iterator[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(parameters, lr=1e-3, eps=1e-8)


def _stepped_dtypes(optimizer: Any) -> set[str]:
    return {dtype_name(p.dtype) for group in optimizer.param_groups for p in group["params"]}


# -- the Trainer ---------------------------------------------------------------------------------------------------
class Regression(pl.LightningModule):
    """An MLP; its forward feeds the first layer inputs in that layer's dtype (as a token embedding does), so a model
    left float32 trains instead of failing: the test sees the dtypes, not a crash. It records the dtypes of the
    parameters its optimizer holds at every step."""

    def __init__(self, sharding: str | None = None) -> None:
        super().__init__()
        self.net = mlp(features=8, hidden=16, out=1, seed=3)
        self.sharding = sharding
        self.stepped: list[set[str]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.stepped.append(_stepped_dtypes(self.trainer.optimizers[0]))
        return nn.functional.mse_loss(self.net(x.to(self.net[0].weight.dtype)).float(), y.float())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return _adam(self.parameters())


class ShardedRegression(Regression):
    """``configure_model`` shards ``net[0]`` then ``net`` with torch's ``fully_shard`` (``sharding="torch"``) or the
    plugin's (``"plugin"``), on the ``ModelParallelStrategy``'s data-parallel mesh."""

    def configure_model(self) -> None:
        mesh = self.device_mesh["data_parallel"]
        shard: Callable[..., Any] = (
            fully_shard if self.sharding == "torch" else self.trainer.precision_plugin.fully_shard
        )
        shard(self.net[0], mesh=mesh)
        shard(self.net, mesh=mesh)


def _trainer_strategy(name: str) -> Any:
    if name == "default":
        return "auto"
    if name == "fsdp1":
        return pl.strategies.FSDPStrategy()
    return pl.strategies.ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=1)


TRAINER_RUNS = {  # strategy the user passes, sharding done by configure_model
    "default": ("default", None),
    "user ModelParallelStrategy, torch's fully_shard": ("model_parallel", "torch"),
    "user ModelParallelStrategy, the plugin's fully_shard": ("model_parallel", "plugin"),
}


def _fit(strategy: str, sharding: str | None, accelerator: str = "cpu", **options: Any) -> tuple[Regression, Any]:
    plugin = precision_base.resolve(SPEC, **options) if options else SPEC
    trainer = precision_base.Trainer(
        precision_plugin=plugin,
        strategy=_trainer_strategy(strategy),
        accelerator=accelerator,
        devices=1,
        max_steps=STEPS,
        **QUIET,
    )
    model = Regression() if sharding is None else ShardedRegression(sharding)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, DataLoader(regression_data(8, samples=96, seed=5), batch_size=32))
    return model, _counts(caught)


@needs_fsdp2_on_cpu
@pytest.mark.parametrize("run", list(TRAINER_RUNS))
def test_trainer_warns_once_per_run_under_each_strategy(run: str) -> None:
    model, counts = _fit(*TRAINER_RUNS[run])
    assert model.stepped == [{"float16"}] * STEPS, "the optimizer steps float16 parameters: the run is 16-true"
    assert counts == {"underflow": 1, "lower precision": 1}


@needs_fsdp2_on_cpu
def test_torch_fully_shard_without_the_default_keep_rules_warns_too() -> None:
    model, counts = _fit("model_parallel", "torch", keep_fp32_defaults=False)
    assert model.stepped == [{"float16"}] * STEPS
    assert counts == {"underflow": 1, "lower precision": 1}


@needs_fsdp2_on_cpu
def test_each_run_warns_once() -> None:
    """The once-per-optimizer guard does not hide the next run: a second fit (a new optimizer) warns again."""
    assert [_fit("default", None)[1] for _ in range(2)] == [{"underflow": 1, "lower precision": 1}] * 2


@needs_gpu_for_fsdp1
def test_trainer_fsdp1_warns_once() -> None:
    model, counts = _fit("fsdp1", None, accelerator="cuda")
    assert model.stepped == [{"float16"}] * STEPS
    assert counts == {"underflow": 1, "lower precision": 1}


# -- Fabric --------------------------------------------------------------------------------------------------------
def _fabric_strategy(name: str, plugin: Any) -> Any:
    if name == "default":
        return "auto"
    if name == "fsdp1":
        return lf.strategies.FSDPStrategy()

    def parallelize(module: nn.Module, device_mesh: Any) -> nn.Module:
        shard: Callable[..., Any] = fully_shard if name == "torch" else plugin.fully_shard
        shard(module[0], mesh=device_mesh["data_parallel"])
        shard(module, mesh=device_mesh["data_parallel"])
        return module

    return lf.strategies.ModelParallelStrategy(parallelize, data_parallel_size=1, tensor_parallel_size=1)


FABRIC_RUNS = {
    "default": "default",
    "user ModelParallelStrategy, torch's fully_shard": "torch",
    "user ModelParallelStrategy, the plugin's fully_shard": "plugin",
}


def _fabric_fit(strategy: str, accelerator: str = "cpu") -> tuple[list[set[str]], dict[str, int]]:
    plugin = precision_base.resolve_fabric(SPEC)
    fabric = precision_base.Fabric(
        precision_plugin=plugin, strategy=_fabric_strategy(strategy, plugin), accelerator=accelerator, devices=1
    )
    fabric.launch()
    data = regression_data(8, samples=96, seed=5)
    stepped = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = fabric.setup_module(mlp(features=8, hidden=16, out=1, seed=3))
        optimizer = fabric.setup_optimizers(_adam(model.parameters()))
        for step in range(STEPS):
            x, y = fabric.to_device(data[step * 32 : (step + 1) * 32])
            fabric.backward(nn.functional.mse_loss(model(x).float(), y))
            stepped.append(_stepped_dtypes(optimizer))
            optimizer.step()
            optimizer.zero_grad()
    return stepped, _counts(caught)


@needs_fsdp2_on_cpu
@pytest.mark.parametrize("run", list(FABRIC_RUNS))
def test_fabric_warns_once_per_run_under_each_strategy(run: str) -> None:
    stepped, counts = _fabric_fit(FABRIC_RUNS[run])
    assert stepped == [{"float16"}] * STEPS
    assert counts == {"underflow": 1, "lower precision": 1}


@needs_gpu_for_fsdp1
def test_fabric_fsdp1_warns_once() -> None:
    stepped, counts = _fabric_fit("fsdp1", accelerator="cuda")
    assert stepped == [{"float16"}] * STEPS
    assert counts == {"underflow": 1, "lower precision": 1}


# -- the cast of units torch's fully_shard made (one-rank mesh) ------------------------------------------------------
def _dtypes(model: nn.Module) -> dict[str, str]:
    assert all(isinstance(p, DTensor) for p in model.parameters())
    return {name: dtype_name(p.dtype) for name, p in model.named_parameters()}


def test_units_torch_sharded_are_cast_to_float16(cpu_mesh: Any) -> None:
    model = mlp()
    fully_shard(model[0], mesh=cpu_mesh)
    fully_shard(model, mesh=cpu_mesh)
    plugin = FSDPPrecision("16-true")  # the default keep-float32 rules are on
    assert plugin.convert_module(model) is model
    assert set(_dtypes(model).values()) == {"float16"}
    assert model(torch.randn(4, 8, dtype=torch.float16)).dtype == torch.float16


class DeclaresHead(nn.Module):
    """A Hugging Face-style model declaring ``head`` float32 under float16 (``_keep_in_fp32_modules``)."""

    _keep_in_fp32_modules: ClassVar[list[str]] = ["head"]

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def test_a_declared_module_inside_a_torch_unit_is_named_and_cast_with_its_unit(cpu_mesh: Any) -> None:
    model = DeclaresHead()
    fully_shard(model, mesh=cpu_mesh)  # one unit: head cannot have its own float32 policy
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        FSDPPrecision("16-true").convert_module(model)
    (message,) = [str(w.message) for w in caught if issubclass(w.category, PrecisionPluginWarning)]
    assert message.startswith(
        "fsdp:16-true: module 'head' (FSDPDeclaresHead._keep_in_fp32_modules 'head') would be kept in float32 by "
        "default, but FSDP2 sharded it without the plugin"
    )
    assert "so it computes as that unit does" in message
    assert set(_dtypes(model).values()) == {"float16"}, "as the warning says: the whole unit is float16"


def test_torch_units_beside_a_kept_unit_are_cast_and_the_kept_unit_stays_float32(cpu_mesh: Any) -> None:
    model = mlp()
    plugin = FSDPPrecision("16-true", keep_fp32="2")
    plugin.mark_keep_fp32(model)
    plugin.fully_shard(model[2], mesh=cpu_mesh)  # kept: its own float32 unit
    fully_shard(model[0], mesh=cpu_mesh)
    fully_shard(model, mesh=cpu_mesh)  # the root holds no parameter of its own
    plugin.convert_module(model)
    assert _dtypes(model) == {"0.weight": "float16", "0.bias": "float16", "2.weight": "float32", "2.bias": "float32"}
    assert model(torch.randn(4, 8, dtype=torch.float16)).dtype == torch.float16


@pytest.mark.parametrize(
    ("door", "names"),
    [
        ("Trainer", "trainer.precision_plugin.fully_shard(...) (it casts"),
        ("Fabric", "plugin.fully_shard(...) (it casts"),
    ],
)
def test_a_torch_unit_around_a_kept_unit_with_float32_parameters_is_refused(
    door: str, names: str, cpu_mesh: Any
) -> None:
    """Casting the root unit (which holds ``0``'s parameters) would cast the kept ``2`` inside it too."""
    model = mlp()
    plugin = get_plugin_class("fsdp", door=door)("16-true", keep_fp32="2")
    plugin.mark_keep_fp32(model)
    plugin.fully_shard(model[2], mesh=cpu_mesh)
    fully_shard(model, mesh=cpu_mesh)
    with pytest.raises(KeepFP32Error) as info:
        plugin.convert_module(model)
    message = str(info.value)
    assert message.startswith(
        "fsdp:16-true: the FSDP2 unit of the whole model was sharded without the plugin, so its parameters "
        "(0.weight, 0.bias) are still float32, and it holds a module kept in float32: casting the unit to float16 "
        "would cast the kept module too, so as sharded the run cannot be 16-true. Shard it through "
    )
    assert names in message
    if door == "Fabric":
        assert "trainer" not in message.lower()


def test_the_check_remembers_optimizers_it_warned_about_and_a_pickled_plugin_none() -> None:
    model = mlp().half()
    optimizer = _adam(model.parameters())
    plugin = FSDPPrecision(SPEC.partition(":")[2])

    def underflows(connected: Any) -> int:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            connected.connect(model, [optimizer], [])
        return _counts(caught)["underflow"]

    assert underflows(plugin) == 1
    assert underflows(plugin) == 0, "the same optimizer: checked once"
    assert underflows(pickle.loads(pickle.dumps(plugin))) == 1, "a pickled plugin remembers no optimizer"
