"""The hand-written loop and the Lightning AMP variant do the work ours does: on 2 gloo ranks, a few real steps of
each give ours' losses, step for step (FSDP2 and DeepSpeed on the BatchNorm ResNet, FSDP2 16-mixed on the MLP with
its loss scaling, FSDP2 on the Llama decoder, there also ours sharded by ``FSDP2Strategy``'s block set). No time is
measured; the pages' "same work" comparisons rest on this."""

from typing import Any

import pytest

from bench import runs

pytest.importorskip("transformers")
pytest.importorskip("deepspeed")

CASES = {
    "fsdp resnet bf16-mixed": ("fsdp", "resnet", "bf16-mixed", ["ours", "hand"]),
    "deepspeed resnet bf16-mixed": ("deepspeed", "resnet", "bf16-mixed", ["ours", "hand"]),
    "fsdp mlp 16-mixed": ("fsdp", "mlp", "16-mixed", ["ours", "amp", "hand"]),
    # the decoder: FSDP2Strategy's block set gives the units configure_model makes by hand
    "fsdp llama bf16-mixed": ("fsdp", "llama", "bf16-mixed", ["ours", "ours-blocks", "amp", "hand"]),
}


def losses(args: dict[str, Any]) -> dict[str, Any]:
    """In each rank: every variant of every case for 4 steps; the per-step losses, or the error."""
    out: dict[str, Any] = {}
    for name, (backend, model, precision, variants) in args["cases"].items():
        task = runs.Task(width=128) if model == "mlp" else runs.Task(model=model, batch=8)
        for variant in variants:
            out[f"{name}|{variant}"] = runs.run(backend, variant, precision, task, 4, 0)["losses"]
    return out


def test_hand_written_and_lightning_amp_train_exactly_like_ours() -> None:
    got = runs.in_ranks("tests/test_same_work.py:losses", {"cases": CASES})
    for name, (_backend, _model, _precision, variants) in CASES.items():
        ours = got[f"{name}|ours"]
        assert len(ours) == 4
        assert all(loss > 0 for loss in ours)
        for variant in variants[1:]:
            assert got[f"{name}|{variant}"] == pytest.approx(ours, rel=1e-6), f"{name}: {variant} vs ours"
