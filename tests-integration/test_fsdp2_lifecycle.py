"""The Lightning lifecycle and idioms under the default ``FSDP2Strategy``, in real 2-process gloo runs on CPU.

Every run is ``precision_base.Trainer(precision_plugin="fsdp:<p>", accelerator="cpu", devices=2)`` with no strategy
(or the named ``FSDP2Strategy`` option); the rank code is ``_fsdp2_lifecycle.py``. Three launches: the lifecycle
under ``32-true`` (compared with the plain model in this process), the other precisions' fit -> validate/test/predict,
and the idioms (two optimizers against DDP, activation checkpointing, a ``configure_model`` that shards itself, fp8
with it). Measured on 2 cores shared with other jobs: lifecycle 53 s, idioms 68-130 s; the file 590 s at the worst.

Tolerances: the resumed run and the checkpoint round trips are exact (``==`` on Python floats: the same operations
in the same order). Sharded ``32-true`` against the plain model in one process, and FSDP2 against DDP, are ``1e-5``
relative (the same math; reduce-scatter and all-reduce may sum in another order).
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from _fsdp_helpers import cpu_precisions, needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

pytestmark = needs_fsdp2_on_cpu()

HERE = Path(__file__).parent
RANKS = HERE / "_fsdp2_lifecycle.py"
TIMEOUT_S = 600


def _run(function: str, out: Path, **args: Any) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = run_ranks(
        f"{RANKS}:{function}", {"out": str(out), **args}, world=2, threads=1, timeout=TIMEOUT_S, cwd=out,
        env={"PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    return result


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run("lifecycle", tmp_path_factory.mktemp("lifecycle"), precision="32-true")


@pytest.fixture(scope="module")
def idioms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    try:
        import torchao.float8  # noqa: F401

        fp8 = True
    except ImportError:
        fp8 = False
    return _run("idioms", tmp_path_factory.mktemp("idioms"), fp8=fp8)


def _plain(params: dict[str, list[float]]) -> Any:
    """The plain :class:`Net` in this process, with ``params``."""
    sys.path.insert(0, str(HERE))
    from _fsdp2_lifecycle import Net

    model = Net()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.tensor(params[name]).view_as(p))
    return model


def _reference(params: dict[str, list[float]]) -> tuple[float, dict[str, float]]:
    """Mean loss over the data set and the prediction of every sample, computed by the plain model."""
    from _fsdp2_lifecycle import dataset

    model = _plain(params)
    x, y, index = dataset().tensors
    with torch.no_grad():
        out = model(x).float()
    return float(torch.nn.functional.mse_loss(out, y)), {
        str(int(i)): float(v) for i, v in zip(index, out.flatten(), strict=True)
    }


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)


# -- 1. fit, then validate / test / predict; each alone on a fresh Trainer -------------------------------------------
def test_fit_then_validate_test_predict_on_the_same_trainer(lifecycle: dict[str, Any]) -> None:
    """Before: ``TypeError: When using the FSDP2Strategy, you are required to override the `configure_model()` hook
    in the LightningModule and apply parallelization there.`` for each of the three after ``fit``."""
    assert lifecycle["strategy"] == "FSDP2Strategy"
    losses = {int(k): v for k, v in lifecycle["losses"].items()}
    assert losses[max(losses)] < losses[0], "training lowered the loss"
    loss, predictions = _reference(lifecycle["final_params"])
    same = lifecycle["same"]
    assert _close(same["validate"]["val_loss"], loss), "validate evaluates the trained weights"
    assert _close(same["test"]["test_loss"], loss)
    assert same["predict"], "rank 0 predicted its samples"
    for index, value in same["predict"].items():
        assert _close(value, predictions[index]), f"sample {index}"


def test_each_stage_alone_on_a_fresh_trainer_without_and_with_ckpt_path(lifecycle: dict[str, Any]) -> None:
    """A fresh model is evaluated as initialised; with ``ckpt_path`` (the distributed checkpoint of the last epoch)
    exactly as the Trainer that trained it evaluated it."""
    fresh, same = lifecycle["fresh"], lifecycle["same"]
    untrained_loss, untrained = _reference(lifecycle["initial_params"])
    assert _close(fresh["validate-untrained"]["val_loss"], untrained_loss)
    assert _close(fresh["test-untrained"]["test_loss"], untrained_loss)
    assert fresh["predict-untrained"].keys() == same["predict"].keys()
    for index, value in fresh["predict-untrained"].items():
        assert _close(value, untrained[index]), f"sample {index}"
    assert fresh["validate-ckpt"] == same["validate"]
    assert fresh["test-ckpt"] == same["test"]
    assert fresh["predict-ckpt"] == same["predict"]
    assert not _close(untrained_loss, same["validate"]["val_loss"]), "the checkpoint's weights are the trained ones"


# -- 2. resume and export ----------------------------------------------------------------------------------------------
def test_resume_at_an_epoch_boundary_equals_the_uninterrupted_run(lifecycle: dict[str, Any]) -> None:
    full = {int(k): v for k, v in lifecycle["losses"].items()}
    resumed = {int(k): v for k, v in lifecycle["resumed_losses"].items()}
    k = lifecycle["resume_step"]
    assert sorted(resumed) == [s for s in sorted(full) if s >= k], "the resumed run starts at the checkpoint's step"
    assert resumed == {s: full[s] for s in resumed}
    assert lifecycle["resumed_final_params"] == lifecycle["final_params"]


def test_lightnings_consolidation_loads_into_the_plain_model(lifecycle: dict[str, Any], tmp_path: Path) -> None:
    """``python -m lightning.fabric.utilities.consolidate_checkpoint <dir>``: one file that ``torch.load`` reads and
    the plain model (one process, no FSDP) loads strictly, with the trained weights."""
    out = tmp_path / "consolidated.ckpt"
    tool = "lightning.fabric.utilities.consolidate_checkpoint"
    done = subprocess.run(
        [sys.executable, "-m", tool, lifecycle["last_ckpt"], "--output_file", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    checkpoint = torch.load(out, weights_only=False)
    sys.path.insert(0, str(HERE))
    from _fsdp2_lifecycle import Net

    model = Net()
    model.load_state_dict(checkpoint["state_dict"], strict=True)
    loaded = {name: p.detach().flatten().tolist() for name, p in model.named_parameters()}
    assert loaded == lifecycle["final_params"]
    assert checkpoint["epoch"] == 2
    assert checkpoint["global_step"] == 6


def test_the_trainer_packages_consolidation_tool_refuses_model_parallel_checkpoints(
    lifecycle: dict[str, Any], tmp_path: Path
) -> None:
    """What docs/guides/fsdp.md says: ``python -m lightning.pytorch.utilities.consolidate_checkpoint`` expects the
    ``"model"`` key of ``FSDPStrategy`` (FSDP1) checkpoints; ``ModelParallelStrategy`` writes ``"state_dict"``. When a
    Lightning release fixes it, this fails: then the guide can name either tool."""
    done = subprocess.run(
        [sys.executable, "-m", "lightning.pytorch.utilities.consolidate_checkpoint", lifecycle["last_ckpt"],
         "--output_file", str(tmp_path / "out.ckpt")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "KeyError: 'model'" in done.stderr, done.stderr[-2000:]


# -- every precision -------------------------------------------------------------------------------------------------
def test_fit_then_validate_test_predict_under_every_precision(tmp_path: Path) -> None:
    """One launch, one fit per precision this CPU runs (``32-true`` is the lifecycle test's)."""
    wanted = [p for p in ("bf16-mixed", "bf16-true", "16-mixed", "16-true") if p in cpu_precisions()]
    results = _run("precisions", tmp_path, precisions=wanted)
    assert sorted(results) == sorted(wanted)
    stored = {"bf16-mixed": ["float32"], "16-mixed": ["float32"], "bf16-true": ["bfloat16"], "16-true": ["float16"]}
    for precision, entry in results.items():
        assert entry["strategy"] == "FSDP2Strategy"
        assert all(math.isfinite(v) for v in entry["losses"].values()), precision
        assert entry["param_dtypes"] == stored[precision], precision
        for name, key in (("validate", "val_loss"), ("test", "test_loss")):
            assert "error" not in entry[name], f"{precision} {name}: {entry[name]}"
            assert math.isfinite(entry[name][key]), f"{precision} {name}"
        assert entry["validate"]["val_loss"] == entry["test"]["test_loss"], "the same data, the same weights"
        assert "error" not in entry["predict"], f"{precision} predict: {entry['predict']}"
        assert len(entry["predict"]) == 16, "rank 0's half of the samples"
        assert all(math.isfinite(v) for v in entry["predict"].values())


# -- 3. two optimizers -------------------------------------------------------------------------------------------------
def _equal_to_ddp(run: dict[str, Any], ddp: dict[str, Any]) -> None:
    assert "error" not in run, run.get("error")
    assert "error" not in ddp, ddp.get("error")
    assert len(run["losses"]) == len(ddp["losses"]) == 4
    for ours, theirs in zip(run["losses"], ddp["losses"], strict=True):
        assert all(_close(a, b) for a, b in zip(ours, theirs, strict=True)), (ours, theirs)
    for name, values in ddp["params"].items():
        assert all(_close(a, b) for a, b in zip(run["params"][name], values, strict=True)), name


def test_toggle_optimizer_gan_equals_ddp(idioms: dict[str, Any]) -> None:
    """Lightning's GAN pattern (``toggle_optimizer`` around a generator and a discriminator step). Before, with the
    networks as FSDP2 roots: ``RuntimeError: element 0 of tensors does not require grad and does not have a
    grad_fn`` in the second step's ``manual_backward`` (the generator, run frozen in the discriminator step, kept its
    unsharded parameters with ``requires_grad=False``)."""
    _equal_to_ddp(idioms["gan-toggle"], idioms["gan-ddp"])
    _equal_to_ddp(idioms["gan-toggle-configure_model"], idioms["gan-ddp"])


def test_two_optimizers_without_toggle_equal_ddp(idioms: dict[str, Any]) -> None:
    """Several optimizers without toggling (each zeroes its gradients before its loss's backward): the same update
    as the toggled run under DDP."""
    _equal_to_ddp(idioms["gan-no-toggle"], idioms["gan-ddp"])


# -- 4. activation checkpointing ---------------------------------------------------------------------------------------
def test_activation_checkpointing_recomputes_each_block_and_changes_no_number(idioms: dict[str, Any]) -> None:
    on, off = idioms["checkpointing-on"], idioms["checkpointing-off"]
    assert on["checkpointed"] == ["blocks.0", "blocks.1"]
    assert off["checkpointed"] == []
    assert on["calls"] == [[2, 2]] * 2, "forward, then the recompute in backward, per block and step"
    assert off["calls"] == [[1, 1]] * 2
    assert on["losses"] == off["losses"]
    assert on["params"] == off["params"]


# -- 5. a configure_model that shards itself -------------------------------------------------------------------------
def test_configure_model_that_shards_itself_keeps_working_with_strategy_auto(idioms: dict[str, Any]) -> None:
    run = idioms["self-sharded"]
    assert "error" not in run, run.get("error")
    assert run["strategy"] == "FSDP2Strategy"
    losses = {int(k): v for k, v in run["losses"].items()}
    assert losses[1] < losses[0]
    assert math.isfinite(run["validate"]["val_loss"])


def test_fp8_converts_the_linears_of_a_configure_model_that_shards_itself(idioms: dict[str, Any]) -> None:
    """``fsdp:fp8-tensorwise`` (torchao's emulation on CPU) and a ``configure_model`` that shards each block first,
    without ``prepare_for_sharding``. Before: nothing converted, and setup refused with "fsdp:fp8-tensorwise: no
    Linear layer of the model was converted to float8 (converted: none)..."."""
    if "self-sharded-fp8" not in idioms:
        pytest.skip('torchao is not installed (pip install "precision-fsdp[fp8]")')
    run = idioms["self-sharded-fp8"]
    assert "error" not in run, run.get("error")
    assert run["converted"] == ["blocks.0.fc1", "blocks.0.fc2", "blocks.1.fc1", "blocks.1.fc2"], "not embed, head"
    assert "Float8Linear" in run["linear_classes"]
    assert all(math.isfinite(v) for v in run["losses"].values())
