"""Issue 23: ``fsdp:mxfp8-rceil`` (torchao's emulated MXFP8 recipe, ``fp8_emulate=True``) in real 2-process FSDP2
fits through ``precision_base.Trainer`` on CPU, against ``fsdp:bf16-mixed`` on the same model and data. The model,
data and all-gather counter are those of ``tests-integration/_fp8_runs.py`` (the fp8 fits)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from precision_fsdp import _compat
from precision_fsdp._compat import fsdp2_cpu_problem
from precision_testsupport.launch import run_ranks

pytest.importorskip("torchao.float8", reason='torchao is not installed (pip install "precision-fsdp[fp8]")')

RUNS = Path(__file__).resolve().parents[3] / "tests-integration" / "_fp8_runs.py"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(fsdp2_cpu_problem() is not None, reason=f"FSDP2 on CPU: {fsdp2_cpu_problem()}"),
    pytest.mark.skipif(
        _compat.WEIGHT_WRAPPER not in _compat.torchao_training_paths(), reason="torchao has no MXFP8 training (< 0.17)"
    ),
    pytest.mark.skipif(not RUNS.exists(), reason=f"needs the checkout's {RUNS}"),
]
STEPS = 6


def _runs_module() -> Any:
    sys.path.insert(0, str(RUNS.parent))
    import _fp8_runs

    return _fp8_runs


def rank_fit(args: dict[str, Any]) -> dict[str, Any] | None:
    """Rank code: the fp8 fits' run (``_fp8_runs.fit``) under each spec with bias-free middle layers."""
    result: dict[str, Any] | None = _runs_module().fit({**args, "bias_free": True})
    return result


def rank_resume(args: dict[str, Any]) -> dict[str, Any] | None:
    """Rank code: 2 epochs of 2 steps under mxfp8-rceil uninterrupted (checkpoint after step 2), then epoch 1 resumed
    from that checkpoint under mxfp8-rceil and under bf16-mixed."""
    import torch
    from lightning.pytorch import seed_everything
    from lightning.pytorch.callbacks import ModelCheckpoint

    from precision_testsupport.launch import world_size

    runs = _runs_module()
    torch.set_num_threads(1)
    root = args["root"]
    world_size()
    seed_everything(2)
    full = runs.bias_free(runs.Student(samples=128))
    ckpt = ModelCheckpoint(dirpath=f"{root}/ckpt", every_n_epochs=1, save_top_k=-1, save_on_train_epoch_end=True)
    trainer = runs._trainer("fsdp:mxfp8-rceil", 2, root, [ckpt])
    trainer.fit(full)
    out: dict[str, Any] = {
        "full": full.losses,
        "wrapped": sorted(
            name
            for name, p in full.named_parameters()
            if type(getattr(p, "_local_tensor", p)).__name__ == "MXFP8TrainingWeightWrapperTensor"
        ),
    }
    for name, spec in (("resumed", "fsdp:mxfp8-rceil"), ("as_bf16", "fsdp:bf16-mixed")):
        world_size()
        seed_everything(2)
        model = runs.bias_free(runs.Student(samples=128))
        runs._trainer(spec, 2, root, []).fit(model, ckpt_path=f"{root}/ckpt/epoch=0-step=2.ckpt")
        out[name] = model.losses
    return out if trainer.global_rank == 0 else None


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mxfp8")
    args = {"specs": ["fsdp:bf16-mixed", "fsdp:mxfp8-rceil"], "steps": STEPS}
    result: dict[str, Any] = run_ranks(
        f"{Path(__file__).resolve()}:rank_fit", args, world=2, threads=1, timeout=600, cwd=root,
        env={"PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    return result


def test_mxfp8_converts_the_middle_linears(runs: dict[str, Any]) -> None:
    assert runs["fsdp:mxfp8-rceil"]["converted"] == ["net.2", "net.4", "net.6"]
    types = runs["fsdp:mxfp8-rceil"]["types"]
    assert types == runs["fsdp:bf16-mixed"]["types"], "the weight wrapper keeps the modules (FSDP2's FSDPLinear)"


def test_mxfp8_all_gathers_bfloat16_like_bf16_mixed(runs: dict[str, Any]) -> None:
    bf16, mx = runs["fsdp:bf16-mixed"], runs["fsdp:mxfp8-rceil"]
    assert mx["dtypes"] == bf16["dtypes"] == ["torch.bfloat16"], "torchao's MXFP8 weight wrapper has no MX all-gather"
    assert mx["bytes_per_step"] == bf16["bytes_per_step"]


def test_mxfp8_loss_decreases_and_stays_near_bf16_mixed(runs: dict[str, Any]) -> None:
    bf16, mx = runs["fsdp:bf16-mixed"]["losses"], runs["fsdp:mxfp8-rceil"]["losses"]
    print(f"final loss: mxfp8-rceil {mx[-1]:.4f}, bf16-mixed {bf16[-1]:.4f}")  # shown with -s
    assert len(mx) == len(bf16) == STEPS
    assert mx[-1] < mx[0]
    assert abs(mx[-1] - bf16[-1]) / bf16[-1] < 0.1, f"mxfp8 final loss {mx[-1]} vs bf16-mixed {bf16[-1]}"
    assert mx != bf16, "MXFP8 rounding changes the losses"


def test_mxfp8_resume_equals_uninterrupted_and_loads_into_bf16_mixed(tmp_path: Path) -> None:
    result: dict[str, Any] = run_ranks(
        f"{Path(__file__).resolve()}:rank_resume", {"root": str(tmp_path)}, world=2, threads=1, timeout=600,
        cwd=tmp_path, env={"PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    full, resumed, as_bf16 = result["full"], result["resumed"], result["as_bf16"]
    assert result["wrapped"] == ["net.2.weight", "net.4.weight", "net.6.weight"]
    assert len(full) == 4
    assert resumed == full[2:], "steps 3-4 after resuming from step 2 equal the uninterrupted run's"
    assert len(as_bf16) == 2
    assert abs(as_bf16[0] - full[2]) / full[2] < 0.05, "the MXFP8 run's weights loaded into bf16-mixed"
