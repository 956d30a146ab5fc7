"""``fsdp:fp8-tensorwise`` / ``fsdp:fp8-rowwise`` in real 2-process FSDP2 fits through ``precision_base.Trainer`` on
CPU (torchao's emulation, ``fp8_emulate=True``), against ``fsdp:bf16-mixed`` on the same model and data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

pytest.importorskip("torchao.float8", reason='torchao is not installed (pip install "precision-fsdp[fp8]")')


pytestmark = [
    pytest.mark.slow,
    needs_fsdp2_on_cpu(),
]

STEPS = 6


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fp8")
    args = {"specs": ["fsdp:bf16-mixed", "fsdp:fp8-tensorwise", "fsdp:fp8-rowwise"], "steps": STEPS}
    result: dict[str, Any] = run_ranks(
        f"{Path(__file__).with_name('_fp8_runs.py')}:fit", args, world=2, threads=1, timeout=300, cwd=root,
        env={"PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    return result


def test_middle_linears_converted_first_and_last_kept(runs: dict[str, Any]) -> None:
    for spec in ("fsdp:fp8-tensorwise", "fsdp:fp8-rowwise"):
        assert runs[spec]["converted"] == ["net.2", "net.4", "net.6"]
        float8 = runs[spec]["float8"]
        assert float8 == {"0": False, "2": True, "4": True, "6": True, "8": False}, "first and last Linear kept"
        # the default policy: each Linear of the Sequential (repeated same-class children) is its own FSDP2 unit
        assert set(runs[spec]["types"].values()) == {"FSDPLinear", "FSDPFloat8Linear"}
    assert runs["fsdp:bf16-mixed"]["converted"] == []


def test_tensorwise_all_gathers_float8_at_about_half_the_bytes(runs: dict[str, Any]) -> None:
    bf16, fp8 = runs["fsdp:bf16-mixed"], runs["fsdp:fp8-tensorwise"]
    assert bf16["dtypes"] == ["torch.bfloat16"]
    # the default policy makes each Linear of `net` an FSDP2 unit: a Float8Linear unit is all-gathered as one byte
    # buffer (float8 weight, bf16 bias), the first and last Linear (kept out of fp8) in bfloat16
    assert fp8["dtypes"] == ["torch.bfloat16", "torch.uint8"]
    ratio = fp8["bytes_per_step"] / bf16["bytes_per_step"]
    assert ratio <= 0.55, f"fp8/bf16-mixed all-gather bytes per step (whole model) = {ratio:.3f}"
    by_dtype = fp8["bytes_per_step_by_dtype"]
    middle_in_bf16 = bf16["bytes_per_step"] - by_dtype["torch.bfloat16"]  # the same three layers under bf16-mixed
    middle = by_dtype["torch.uint8"] / middle_in_bf16
    assert middle <= 0.55, f"fp8/bf16-mixed all-gather bytes per step of the Float8Linear layers = {middle:.3f}"
    rowwise = runs["fsdp:fp8-rowwise"]
    assert rowwise["dtypes"] == ["torch.bfloat16"], "torchao's rowwise recipe has no float8 all-gather"
    assert rowwise["bytes_per_step"] == bf16["bytes_per_step"]


def test_loss_within_one_percent_of_bf16_mixed(runs: dict[str, Any]) -> None:
    bf16 = runs["fsdp:bf16-mixed"]["losses"]
    assert bf16[-1] < bf16[0]
    for spec in ("fsdp:fp8-tensorwise", "fsdp:fp8-rowwise"):
        final = runs[spec]["losses"][-1]
        assert abs(final - bf16[-1]) / bf16[-1] < 0.01, f"{spec}: final loss {final} vs bf16-mixed {bf16[-1]}"


def test_resume_equals_uninterrupted_and_fp8_checkpoint_loads_into_bf16_mixed(tmp_path: Path) -> None:
    result: dict[str, Any] = run_ranks(
        f"{Path(__file__).with_name('_fp8_runs.py')}:resume", {"root": str(tmp_path)}, world=2, threads=1,
        timeout=300, cwd=tmp_path, env={"PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    full, resumed, as_bf16 = result["full"], result["resumed"], result["as_bf16"]
    assert len(full) == 4
    assert resumed == full[2:], "steps 3-4 after resuming from step 2 equal the uninterrupted run's"
    assert len(as_bf16) == 2
    assert abs(as_bf16[0] - full[2]) / full[2] < 0.01, "the fp8 weights loaded into bf16-mixed give the same loss"
