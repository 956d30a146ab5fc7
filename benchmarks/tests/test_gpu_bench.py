"""gpu_bench.py's plumbing on a CPU: arguments, the plan, the MFU arithmetic, the refusal without CUDA, the step-time
measurement of a real Lightning fit of a tiny model, the report and index it writes. No speed is asserted."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import gpu_bench
from bench import report
from precision_testsupport.launch import run_ranks
from precision_testsupport.models import TinyGPT
from tools.docgen import benchmark_index

TINY = {"vocab": 32, "d_model": 16, "layers": 2, "heads": 2, "seq": 8, "batch": 2}
HERE = Path(__file__).resolve()


def test_arguments_and_plan(capsys: pytest.CaptureFixture[str]) -> None:
    args = gpu_bench.parse([])
    assert (args.sections, args.setups, args.rounds) == (list(gpu_bench.SECTIONS), list(gpu_bench.SETUPS), 1)
    p = gpu_bench.plan(args)
    per_round = sum(len(gpu_bench.precisions_for(s, True)) for s in gpu_bench.SETUPS) * len(gpu_bench.VARIANTS)
    assert per_round == (5 + 5 + 3 + 3) * 2
    assert len(p["fits"]) == per_round
    assert len(gpu_bench.plan(gpu_bench.parse(["--rounds", "2"]))["fits"]) == 2 * per_round
    first = [(f["setup"], f["precision"]) for f in p["fits"][:8:2]]  # bf16-mixed on every setup first
    assert first == [("fsdp1", "bf16-mixed"), ("fsdp2", "bf16-mixed"), ("zero2", "bf16-mixed"), ("zero3", "bf16-mixed")]
    assert [(f["spec"], f["compile"]) for f in p["fp8"]][:3] == [(s, False) for s in gpu_bench.FP8_SPECS]
    assert sum(p["budget_s"].values()) == pytest.approx(args.budget_s)
    no_bf16 = gpu_bench.plan(args, bf16=False)
    assert not [f for f in no_bf16["fits"] if f["precision"].startswith("bf16")]
    only_fp8 = gpu_bench.plan(gpu_bench.parse(["--sections", "fp8", "--layers", "4"]))
    assert (only_fp8["fits"], only_fp8["budget_s"], only_fp8["fp8_model"]["layers"]) == ([], {"fp8": 400.0}, 4)
    assert gpu_bench.parse(["--update-docs"]).out == report.DOCS
    with pytest.raises(SystemExit) as exc:  # a bad choice says what is allowed
        gpu_bench.parse(["--setups", "fsdp3"])
    assert exc.value.code == 2
    assert "unknown setup(s) fsdp3; choose from fsdp1, fsdp2, zero2, zero3" in capsys.readouterr().err


def test_gpu_math() -> None:
    assert gpu_bench.peak_tflops("NVIDIA H200") == 989.0
    assert gpu_bench.peak_tflops("NVIDIA L40S") == 362.0  # the longer key wins over "L40" and "L4"
    assert gpu_bench.peak_tflops("mystery", 100.0) == 100.0
    assert gpu_bench.peak_tflops("mystery") is None
    m = {"vocab": 10, "d_model": 4, "layers": 1, "heads": 1, "seq": 2, "batch": 1}
    assert gpu_bench.flops_per_token(m) == 6.0 * (12 * 16 + 40) + 6.0 * 1 * 2 * 4
    assert gpu_bench.mfu(1000.0, m, 1.0, 1) == 1000.0 * gpu_bench.flops_per_token(m) / 1e12
    assert gpu_bench.mfu(1000.0, m, None, 1) is None


def test_dry_run_prints_the_plan_and_without_cuda_it_exits_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_bench.main(["--dry-run", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu_bench plan: 32 fits (setups fsdp1, fsdp2, zero2, zero3; 1 round(s);")
    assert out.splitlines()[1].startswith("  fit  fsdp1  bf16-mixed")
    assert "  fit  zero3  bf16-mixed" in out
    assert "  fp8  fsdp:fp8-rowwise     compile on" in out
    if not torch.cuda.is_available():  # the refusal, on a machine without a GPU
        assert gpu_bench.main([]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gpu_bench.py needs a CUDA GPU and none is visible (torch.cuda.is_available() is False")
        assert "--dry-run" in err


def rank_fit(args: dict[str, Any]) -> dict[str, Any]:
    """In a 1-rank process: a real Lightning fit through the plugin (the fp8 section's path) on the CPU, measured."""
    net = TinyGPT(**{k: v for k, v in TINY.items() if k != "batch"})
    fit = gpu_bench.lightning_fit("single", "ours", args["spec"], net, gpu_bench.tokens(TINY, 5, 0), "cpu")
    return gpu_bench.measure(fit, 1, "cpu")


def test_measure_times_every_step_after_warmup_of_a_real_lightning_fit() -> None:
    r = run_ranks(f"{HERE}:rank_fit", {"spec": "fsdp:32-true"}, world=1, threads=1, timeout=300, cwd=HERE.parents[1])
    assert len(r["times"]) == 4
    assert all(t > 0 for t in r["times"])
    assert r["step_s"]["n"] == 4
    assert r["step_s"]["median"] > 0
    assert r["final_loss"] == r["losses"][-1]
    assert len(r["losses"]) == 5
    assert math.isfinite(r["final_loss"])
    assert r["peak_memory_bytes"] is None
    assert r["fit_s"] >= sum(r["times"])


def test_report_and_index_from_journal_records(tmp_path: Path) -> None:
    benchmark_index.write(tmp_path)
    assert "## GPU\n\nNot run yet" in (tmp_path / "index.md").read_text()
    args = gpu_bench.parse(["--out", str(tmp_path)])
    p = gpu_bench.plan(args)
    step = {"times": [0.01, 0.011, 0.012], "losses": [9.0, 8.5], "final_loss": 8.5, "peak_memory_bytes": 2**30}
    recs: list[dict[str, Any]] = [
        {"kind": "fit", "round": r, "setup": "fsdp2", "precision": "bf16-mixed", "variant": v, **step,
         "step_s": report.summarize(step["times"])} for r in (0, 1) for v in ("ours", "builtin")
    ]  # fmt: skip
    recs += [{"kind": "fp8", "spec": s, "compile": False, **step, "step_s": report.summarize(step["times"]),
              "parameters": 10**9, "converted_linears": 72} for s in gpu_bench.FP8_SPECS[:2]]  # fmt: skip
    recs.append({"kind": "fit", "round": 0, "setup": "zero3", "precision": "16-mixed", "variant": "ours",
                 "error": "RuntimeError: boom"})  # fmt: skip
    recs.append({"kind": "fp8", "spec": "fsdp:fp8-rowwise", "compile": True, "skipped": "time budget spent"})
    results = gpu_bench.analyse(recs, p["fp8_model"], 989.0)
    assert results["fits"]["fsdp2|bf16-mixed"]["ratios"]["ours/builtin"]["ratio"] == 1.0
    assert results["fits"]["fsdp2|bf16-mixed"]["memory_ours/builtin"] == 1.0
    assert results["fp8"][1]["tokens_per_s_vs_bf16_mixed"] == 1.0
    config = {"plan": p, "rounds": 2, "peak_tflops": 989.0, "fp8_problem": None, "gpus": 1}
    machine = {**report.machine_info(), "gpu": "NVIDIA Test GPU"}
    paths = report.save(tmp_path, "gpu", 0.0, quick=False, machine=machine, config=config, results=results)
    benchmark_index.write(tmp_path)
    assert [x.name for x in paths] == ["gpu.json", "gpu.md", "gpu.png"]
    md = paths[1].read_text()
    assert "| fsdp2 | bf16-mixed | ours | 11.00 |" in md
    assert "Failed: zero3 16-mixed ours (round 1): RuntimeError: boom" in md
    assert "Not run (time budget spent): fsdp:fp8-rowwise, compile on" in md
    assert json.loads(paths[0].read_text())["benchmark"] == "gpu"
    page = (tmp_path / "index.md").read_text()
    assert "## GPU\n\nNVIDIA Test GPU, commit" in page
    assert "[the full report](gpu.md)" in page
    assert "Not run yet" not in page
