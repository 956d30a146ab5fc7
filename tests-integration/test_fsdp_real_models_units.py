"""Real 2-process FSDP2 fits on CPU by name (``precision_base.Trainer(precision_plugin=SPEC, devices=2)``, no
strategy, no ``configure_model``) of the models issue 18 found failing:

* a BatchNorm CNN (transformers' ``ResNetForImageClassification`` from a tiny ``ResNetConfig``) under
  ``fsdp:bf16-mixed`` and ``fsdp:16-mixed``: it failed at the first forward with ``RuntimeError: expected scalar type
  BFloat16 but found Float`` (``Half`` for 16-mixed); now each BatchNorm2d is kept in float32 by default;
* a LightningModule whose direct child is an ``nn.ModuleList`` of blocks: it failed in setup with ``ValueError:
  fully_shard does not support containers that do not implement forward: ModuleList(...)``; now its blocks are the
  units.

Rank code: ``_fsdp_real_models_units_runs.py``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import cpu_precisions, needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

pytestmark = [pytest.mark.slow, pytest.mark.nightly, needs_fsdp2_on_cpu()]  # nightly; the zoo slice on every change

RUNS = Path(__file__).with_name("_fsdp_real_models_units_runs.py")
F32 = "torch.float32"
LOW = {"fsdp:bf16-mixed": "torch.bfloat16", "fsdp:16-mixed": "torch.float16"}


@pytest.fixture(scope="module")
def batchnorm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("transformers")
    specs = [spec for spec in LOW if spec.removeprefix("fsdp:") in cpu_precisions()]
    result: dict[str, Any] = run_ranks(
        f"{RUNS}:fit_batchnorm", {"specs": specs}, world=2, threads=1, timeout=480,
        cwd=tmp_path_factory.mktemp("bn"), env={"PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    return result


@pytest.mark.parametrize("spec", list(LOW))
def test_batchnorm_cnn_trains_with_float32_norms_and_low_precision_convs(batchnorm: dict[str, Any], spec: str) -> None:
    if spec not in batchnorm:
        pytest.skip(f"{spec} does not run on this CPU (no fp16 matmul)")
    run = batchnorm[spec]
    losses = run["losses"]
    assert len(losses) == 8
    assert all(math.isfinite(x) for x in losses)
    assert sum(losses[-3:]) / 3 < losses[0], losses
    assert run["conv_out"] == [LOW[spec]], "convolutions compute in the low dtype (autocast + FSDP2 param_dtype)"
    # (weight while computing, input, output, autocast on inside): float32 throughout, autocast off
    assert run["bn_seen"] == [[F32, F32, F32, False]]
    assert run["running_stats_dtypes"] == [F32]
    assert run["running_mean_moved"] > 0.0
    assert run["batches_tracked"] == 8
    assert run["bn_weight_stored"] == [F32]
    assert run["bn_units"] == run["bn_count"] == 8, "each BatchNorm2d is an FSDP2 unit of its own (float32 policy)"
    assert any(note.startswith("layers whose running statistics are float buffers") for note in run["notes"])


def test_direct_module_list_trains_with_its_blocks_as_units(tmp_path: Path) -> None:
    run: dict[str, Any] = run_ranks(
        f"{RUNS}:fit_module_list", {"spec": "fsdp:bf16-mixed"}, world=2, threads=1, timeout=300, cwd=tmp_path,
        env={"PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    assert run["units"] == ["<root>", "blocks.0", "blocks.1", "blocks.2", "embed", "head"]
    assert all(math.isfinite(x) for x in run["losses"])
    assert run["losses"][-1] < run["losses"][0]
