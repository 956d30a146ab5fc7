"""The analysis and plotting code paths on synthetic samples (no training, no timing)."""

import gpu_bench
from bench import overhead
from bench.machine import machine_info
from bench.report import envelope


def _raw(precisions):
    samples, losses = {}, {}
    for p, variants in precisions.items():
        for i, v in enumerate(variants):
            samples[f"{p}|{v}"] = [[0.010 + 0.001 * i + 0.0001 * k for k in range(10)] for _ in range(2)]
            losses[f"{p}|{v}"] = [2.0, 1.5]
    return {"samples": samples, "losses": losses, "order": []}


def test_overhead_analyse_table_and_plot(tmp_path):
    precisions = {"32-true": ["ours", "builtin", "hand"], "bf16-mixed": ["ours", "ours-lowreduce", "builtin", "hand"]}
    results = overhead.analyse(_raw(precisions), precisions)
    assert set(results["bf16-mixed"]["ratios"]) >= {"ours/builtin", "ours/hand", "ours-lowreduce/builtin"}
    assert results["32-true"]["ratios"]["ours/builtin"]["ratio"] < 1.0  # ours got the smallest synthetic times
    data = envelope(
        "overhead-fsdp",
        machine=machine_info(),
        config={
            "setup": "x",
            "task": {"depth": 2, "width": 8, "batch": 4},
            "threads_per_rank": 1,
            "rounds": 2,
            "steps": 10,
            "warmup": 1,
        },
        results=results,
        duration_s=1.0,
        quick=True,
        findings=overhead.findings("fsdp", results),
    )
    assert "ours / built-in" in overhead.table("fsdp", data)
    assert overhead.plot("fsdp", results, tmp_path / "p.png", "t").stat().st_size > 0


def test_gpu_math():
    assert gpu_bench.peak_tflops("NVIDIA H200") == 989.0
    assert gpu_bench.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert gpu_bench.peak_tflops("NVIDIA L40S") == 362.0  # the longer key wins over "L40" and "L4"
    assert gpu_bench.peak_tflops("mystery", 100.0) == 100.0
    assert gpu_bench.peak_tflops("mystery") is None
    m = {"vocab": 10, "d_model": 4, "layers": 1, "heads": 1, "seq": 2, "batch": 1}
    assert gpu_bench.flops_per_token(m) == 6.0 * (12 * 16 + 40) + 6.0 * 1 * 2 * 4
    assert gpu_bench.mfu(1000.0, m, 1.0, 1) == 1000.0 * gpu_bench.flops_per_token(m) / 1e12
    assert gpu_bench.mfu(1000.0, m, None, 1) is None
