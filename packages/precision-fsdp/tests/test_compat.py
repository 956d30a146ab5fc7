"""The fence: each private or undocumented torch / Lightning symbol precision_fsdp touches still exists with the shape
``precision_fsdp._compat`` expects. Runs in milliseconds; a failure is one line naming the symbol."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from precision_fsdp import _compat

PACKAGE = Path(_compat.__file__).parent.parent  # _compat is a package inside precision_fsdp


@pytest.mark.parametrize("fenced", _compat.FENCED, ids=lambda f: f.where)
def test_fenced_symbol_is_as_expected(fenced: _compat.Fenced) -> None:
    problem = fenced.problem()  # precision_base.kit.fence: "<module.name>: <what changed>; needed for: <why>"
    if problem is not None:
        pytest.fail(problem, pytrace=False)


def _private_touches(path: Path) -> list[str]:
    """Underscore attributes of other objects (``x._foo``) and imports from private modules, outside ``_compat``."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls", "_compat")):
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
        private_module = (
            isinstance(node, ast.ImportFrom)
            and node.module is not None
            and node.module.startswith(("torch", "lightning"))
            and any(part.startswith("_") for part in node.module.split("."))
        )
        if private_module:
            found.append(f"{path.name}:{node.lineno} from {node.module}")
    return found


def test_no_private_symbol_outside_the_fence() -> None:
    outside = [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] != "_compat"]
    assert outside, f"no module found under {PACKAGE}"
    touches = [t for p in outside for t in _private_touches(p)]
    assert touches == [], "private torch/Lightning symbols must go through precision_fsdp._compat"


def test_every_lightning_override_is_marked() -> None:
    """typing_extensions.override on every method the plugin (each of its mixins included, both doors) and the
    strategy override from Lightning."""
    import lightning.fabric as lf
    import lightning.pytorch as pl

    from precision_fsdp.fabric import FabricFSDPPrecisionImpl
    from precision_fsdp.implementation import FSDPPrecisionImpl
    from precision_fsdp.sharding.strategy import FSDP2StrategyImpl

    checked = 0
    for impl, lightning_base in (
        (FSDPPrecisionImpl, pl.plugins.precision.FSDPPrecision),
        (FabricFSDPPrecisionImpl, lf.plugins.precision.FSDPPrecision),
        (FSDP2StrategyImpl, pl.strategies.ModelParallelStrategy),
    ):
        ours = [cls for cls in impl.__mro__ if cls.__module__.startswith("precision_fsdp.")]
        for cls in ours:
            for name, member in vars(cls).items():
                func = member.fget if isinstance(member, property) else member
                if not callable(func) or name.startswith("__") or not hasattr(lightning_base, name):
                    continue
                checked += 1
                assert getattr(func, "__override__", False), (
                    f"{cls.__name__}.{name} overrides Lightning without @override"
                )
    assert checked > 20


def test_fully_shard_location_is_feature_detected() -> None:
    import importlib

    module = importlib.import_module(_compat.FSDP2_MODULE)
    assert module.fully_shard is _compat.fully_shard
    assert inspect.isclass(_compat.DTensor)
    assert _compat.DTensor.__module__.startswith(_compat.DTENSOR_MODULE)


def test_fsdp2_cpu_detection_agrees_with_a_real_fsdp2_step(world_of_one: None) -> None:
    """fsdp2_cpu_problem() says None exactly where a real fully_shard forward/backward runs on CPU."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    problem = _compat.fsdp2_cpu_problem()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    mesh = init_device_mesh("cpu", (1,))
    try:
        _compat.fully_shard(model[0], mesh=mesh)
        _compat.fully_shard(model, mesh=mesh)
        model(torch.randn(2, 4)).sum().backward()
        failure = None
    except Exception as exc:  # any failure means FSDP2 does not run on CPU here
        failure = f"{type(exc).__name__}: {exc}"
    if problem is None:
        assert failure is None, f"detection says FSDP2 runs on CPU, but it failed: {failure}"
    else:
        assert failure is not None, f"detection says {problem!r}, but FSDP2 ran on CPU"
