"""``PrecisionAudit(strict=True)`` on real 2-process fits of a real architecture (transformers' Llama from a tiny
config) for each backend and precision this machine runs, and a deliberately wrong plugin caught by its row.

Cost: each backend's fits run one after another in one 2-process launch (a launch costs 10-30 s here). The CI slice
runs a covering subset per backend: one precision per kind of table (float32; bf16 autocast; fp16 autocast with its
loss scaler; fp8, emulated; keep_fp32 modules; a true-precision liar). ``PRECISION_AUDIT_SWEEP=1`` adds every
other precision the machine runs to the same launches (the full sweep; the issue 19 report has its result).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import cpu_precisions, needs_fsdp2_on_cpu

from precision_testsupport.launch import run_ranks

RUNS = Path(__file__).with_name("_audit_runs.py")
SWEEP = os.environ.get("PRECISION_AUDIT_SWEEP", "") == "1"


def _launch(runs: list[dict[str, Any]], tmp_path: Path, deepspeed: bool = False) -> dict[str, Any]:
    env = {"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    if deepspeed:
        from _deepspeed_helpers import extensions_dir

        env |= {"TORCH_EXTENSIONS_DIR": extensions_dir(), "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"}
    result: dict[str, Any] = run_ranks(
        f"{RUNS}:fits", {"runs": runs}, world=2, threads=1, timeout=900, cwd=tmp_path, env=env
    )
    return result


def _assert_passed(label: str, result: dict[str, Any]) -> None:
    assert result["error"] is None, f"{label}: strict audit failed:\n{result['error']}"
    report = result["report"]
    assert report["ok"], f"{label}:\n{result['text']}"
    assert report["steps"] == 1
    roles = {row["role"] for row in report["rows"]}
    for role in ("parameters", "forward parameters", "compute", "gradients", "optimizer state", "reduction"):
        assert role in roles, f"{label}: no {role!r} row:\n{result['text']}"
    compared = [row for row in report["rows"] if row["role"] == "reduction" and row["ok"] is not None]
    assert compared, f"{label}: no gradient reduction was observed:\n{result['text']}"


def _rows(result: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [row for row in result["report"]["rows"] if row["role"] == role]


def _fsdp_runs() -> list[dict[str, Any]]:
    here = cpu_precisions()
    chosen = ["32-true", "bf16-mixed", "16-mixed"]
    precisions = [p for p in here if SWEEP or p in chosen]
    runs: list[dict[str, Any]] = [{"label": p, "spec": f"fsdp:{p}"} for p in precisions]
    fp8 = ["fp8-tensorwise", "fp8-rowwise"] if SWEEP else ["fp8-tensorwise"]
    runs += [{"label": p, "spec": f"fsdp:{p}", "options": {"fp8_emulate": True}} for p in fp8]
    runs.append({"label": "keep", "spec": "fsdp:bf16-mixed", "options": {"keep_fp32": ("lm_head",)}})
    runs.append({"label": "liar", "liar": "liar-reduction"})
    return runs


@pytest.fixture(scope="module")
def fsdp_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The FSDP2 fits' audit results: one 2-process launch shared by the tests below."""
    pytest.importorskip("transformers")
    return _launch(_fsdp_runs(), tmp_path_factory.mktemp("audit-fsdp"))


@pytest.mark.slow
@needs_fsdp2_on_cpu()
def test_fsdp2_fits_pass_the_strict_audit_and_a_lying_table_fails_it(fsdp_results: dict[str, Any]) -> None:
    runs = _fsdp_runs()
    results = fsdp_results
    assert sorted(results) == sorted(run["label"] for run in runs)
    for label, result in results.items():
        if label != "liar":
            _assert_passed(label, result)
    for label in [r["label"] for r in runs if r["label"].startswith("fp8")]:
        (row,) = [r for r in _rows(results[label], "float8") if r["ok"] is not None]
        assert row["subject"].startswith("Float8Linear x"), results[label]["text"]
        assert row["observed"].startswith("float8 GEMM ("), results[label]["text"]
    kept = [r for r in _rows(results["keep"], "compute") if "lm_head" in r["subject"]]
    assert [(r["expected"], r["observed"]) for r in kept] == [("float32", "float32")], results["keep"]["text"]
    scale = _rows(results["16-mixed"], "loss scale") if "16-mixed" in results else []
    if scale:
        assert scale[0]["observed"] == "65536", results["16-mixed"]["text"]
        assert scale[0]["ok"], results["16-mixed"]["text"]

    liar = results["liar"]
    assert liar["error"] is not None, "strict mode must fail the run"
    assert liar["global_step"] == 1, "the run stops at the audited step"
    (row,) = [r for r in liar["report"]["rows"] if r["ok"] is False]
    assert (row["role"], row["expected"], row["observed"]) == ("reduction", "float32", "bfloat16")
    assert row["subject"].startswith(("reduce_scatter_single x", "reduce_scatter_tensor x")), row
    assert "rank 1: reduction | reduce_scatter" in liar["error"], "rank 1's row is in the message too"


@pytest.mark.slow
@needs_fsdp2_on_cpu()
def test_fsdp2_bf16_mixed_reduces_gradients_in_float32_in_the_collective(fsdp_results: dict[str, Any]) -> None:
    """What the home page claims: under ``fsdp:bf16-mixed`` the gradient reduce-scatter a real 2-process FSDP2 run
    issues carries float32 tensors (observed by the audit's collective tap, not read from a config)."""
    result = fsdp_results["bf16-mixed"]
    observed = [r for r in _rows(result, "reduction") if r["ok"] is not None]
    assert observed, f"no gradient reduction was observed:\n{result['text']}"
    for row in observed:
        assert row["subject"].startswith(("reduce_scatter_single x", "reduce_scatter_tensor x")), result["text"]
        assert (row["expected"], row["observed"]) == ("float32", "float32"), result["text"]
    forward = {r["observed"] for r in _rows(result, "forward parameters")}
    assert forward == {"bfloat16"}, f"the same run computes in bf16:\n{result['text']}"


@pytest.mark.slow
def test_deepspeed_zero2_fits_pass_the_strict_audit(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from precision_deepspeed import _compat

    chosen = ["bf16-mixed", "bf16-true"]
    precisions = ["32-true", "bf16-mixed", "bf16-true"]
    if _compat.cpu_supports_fp16():
        precisions += ["16-mixed", "16-true"]
        chosen.append("16-mixed")
    runs: list[dict[str, Any]] = [{"label": p, "spec": f"deepspeed:{p}"} for p in precisions if SWEEP or p in chosen]
    runs.append({"label": "fabric", "spec": "deepspeed:bf16-mixed", "door": "fabric"})
    results = _launch(runs, tmp_path, deepspeed=True)
    for label, result in results.items():
        _assert_passed(label, result)
    updated = _rows(results["bf16-mixed"], "parameters")
    assert [(r["subject"], r["observed"]) for r in updated] == [("AdamW (what it updates)", "float32")], (
        "the optimizer inside DeepSpeed's ZeRO optimizer updates the float32 master partitions"
    )
    forward = {r["observed"] for r in _rows(results["bf16-mixed"], "forward parameters")}
    assert forward == {"bfloat16"}, results["bf16-mixed"]["text"]
    gathered = [r for r in _rows(results["bf16-true"], "gathering") if r["ok"] is not None]
    assert gathered, f"ZeRO-2 all-gathers the updated partitions:\n{results['bf16-true']['text']}"
