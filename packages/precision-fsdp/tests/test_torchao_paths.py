"""Which of torchao's training API paths this cell's torchao has, and which one each low-precision recipe took.

The version matrix crosses precision-fsdp's fp8 cells over torchao's floor and newest (``[axes.torchao]`` in
tools/matrix.toml). Each value sets ``PRECISION_FSDP_TORCHAO_PATHS`` to the paths that torchao must have (``module
swap``, ``weight wrapper``); the first test fails where the installed torchao has others. Both tests record what they
found with ``record_testsuite_property`` (in the cell's junit file, and as ``recorded`` in its report under
build/matrix/reports/): the torchao version, its paths, and the path or the refusal of each precision, measured by
converting a model.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch
from torch import nn

from precision_fsdp import FSDPPrecision, _compat
from precision_fsdp.errors import Float8UnavailableError
from precision_fsdp.float8 import config as float8_config
from precision_fsdp.float8 import recipes

pytest.importorskip("torchao.float8", reason='torchao is not installed (pip install "precision-fsdp[fp8]")')

EXPECTED = "PRECISION_FSDP_TORCHAO_PATHS"
"""Set by the cell's torchao axis value: the paths, by short name, comma-separated."""


def short(path: str) -> str:
    """``"module swap (torchao.float8...)"`` -> ``"module swap"``."""
    return path.split(" (", 1)[0]


def test_the_installed_torchao_has_the_paths_its_cell_expects(
    record_testsuite_property: Callable[[str, object], None],
) -> None:
    import torchao

    found = [short(p) for p in _compat.torchao_training_paths()]
    record_testsuite_property("torchao", torchao.__version__)
    record_testsuite_property("torchao training paths", ", ".join(found))
    assert "module swap" in found, "torchao.float8.convert_to_float8_training is what fp8 falls back to"
    expected = os.environ.get(EXPECTED)
    if expected is not None:
        assert found == [p.strip() for p in expected.split(",")], (
            f"torchao {torchao.__version__} has {found}; this cell ({EXPECTED}={expected!r}) expects otherwise"
        )


def _bias_free_model() -> nn.Sequential:
    return nn.Sequential(*(nn.Linear(64, 64, bias=False) for _ in range(4)))


def _took(layer: nn.Module) -> str:
    """Which path converted ``layer``: torchao's ``Float8Linear`` (module swap) or a wrapped weight (weight wrapper)."""
    if type(layer).__name__ == "Float8Linear":
        return short(_compat.MODULE_SWAP)
    if type(layer) is nn.Linear and "WeightWrapper" in type(layer.weight.data).__name__:
        return short(_compat.WEIGHT_WRAPPER)
    return f"not converted ({type(layer).__name__}, weight {type(layer.weight.data).__name__})"


@pytest.mark.skipif(torch.cuda.is_available(), reason="emulated recipes on a machine without FP8")
@pytest.mark.parametrize("precision", list(recipes.RECIPES))
def test_each_recipe_converts_on_the_path_it_reports(
    precision: str, record_testsuite_property: Callable[[str, object], None]
) -> None:
    """Convert a 4-Linear model (the middle two are chosen) and see which path did it; it must be the one
    ``float8.config.api_path`` names and ``describe()`` shows. MXFP8 exists only on the weight wrapper: without it, it
    is refused with what it needs."""
    spec = f"fsdp:{precision}"
    paths = _compat.torchao_training_paths()
    model = _bias_free_model()
    plugin = FSDPPrecision(precision, fp8_emulate=True)
    if float8_config.is_mx(precision) and _compat.WEIGHT_WRAPPER not in paths:
        with pytest.raises(Float8UnavailableError) as refused:
            plugin.prepare_for_sharding(model)
        record_testsuite_property(f"{spec} path", f"refused: {refused.value}")
        assert str(refused.value).startswith(f"{spec} needs torchao's MXFP8 training")
        return
    plugin.prepare_for_sharding(model)
    took = {_took(model[i]) for i in (1, 2)}
    record_testsuite_property(f"{spec} path", ", ".join(sorted(took)))
    assert plugin.fp8_converted == ["1", "2"]
    assert took == {short(float8_config.api_path(spec, precision))}
    assert [_took(model[i]) for i in (0, 3)] == [_took(nn.Linear(1, 1))] * 2, "first and last stay Linear"
    assert float8_config.describe_path(precision).startswith(float8_config.api_path(spec, precision))
    if _compat.WEIGHT_WRAPPER not in paths:
        assert took == {short(_compat.MODULE_SWAP)}, "without the weight wrapper every fp8 recipe swaps modules"
