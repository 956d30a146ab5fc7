"""The benchmark code's non-timing logic on synthetic samples (no training; no speed is asserted anywhere)."""

import json
from pathlib import Path

import pytest

import gpu_bench
from bench import index, overhead, report


def test_ratio_interval_verdicts_and_rounds() -> None:
    base = [1.0 + 0.01 * (i % 5) for i in range(40)]
    same = report.ratio(base, list(base))
    assert same["ratio"] == 1.0
    assert same["ci95"][0] <= 1.0 <= same["ci95"][1]
    assert same["verdict"] == "same within spread"
    assert report.ratio([2 * x for x in base], base)["verdict"] == "slower"
    assert report.ratio(base, [2 * x for x in base])["verdict"] == "faster"
    slow = [1.5 * x for x in base]
    vetoed = report.ratio(slow, base, [slow[:20], [0.5 * x for x in base[:20]]], [base[:20], base[20:]])
    assert vetoed["verdict"] == "same within spread (rounds disagree)"
    assert vetoed["per_round"][1] < 1.0
    assert report.ratio(slow, base) == report.ratio(slow, base), "fixed seed: the same interval every time"


def test_summary_and_formatting() -> None:
    s = report.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s["median"], s["iqr"], s["rel_iqr"]) == pytest.approx((3.0, 2.0, 2 / 3))
    assert report.fmt_bytes(None) == "-"
    assert [report.fmt_bytes(n) for n in (3 * 2**20, -2048, 5)] == ["3.00 MiB", "-2.00 KiB", "5 B"]
    assert "x\\|y" in report.md_table(["a", "b"], [["x|y", 1]])


def test_overhead_analysis_writes_json_markdown_png_and_index(tmp_path: Path) -> None:
    variants = {"bf16-mixed": ["ours", "ours-lowreduce", "builtin", "hand"]}
    samples = {
        f"bf16-mixed|{v}": [[0.01 + 0.001 * i + 1e-4 * k for k in range(10)]] * 2
        for i, v in enumerate(variants["bf16-mixed"])
    }
    results = overhead.analyse({"wall": samples, "cpu": samples}, variants)
    assert results["bf16-mixed"]["wall"]["ratios"]["ours/builtin"]["ratio"] < 1.0  # ours got the smallest times
    assert "ours-lowreduce/builtin" in results["bf16-mixed"]["cpu"]["ratios"]
    config = {"backend": "fsdp", "model": "mlp", "rounds": 2, "steps": 10,
              "builtin_skips": {"bf16-mixed": overhead.builtin_skips("fsdp", "bf16-mixed")}}  # fmt: skip
    data = {"quick": True, "machine": report.machine_info(), "config": config, "results": results,
            "findings": ["a finding"]}  # fmt: skip
    paths = report.write(tmp_path, "overhead-fsdp", "Overhead", "body", lambda plt: plt.subplots()[0], 0.0, **data)
    assert [p.suffix for p in paths] == [".json", ".md", ".png"]
    assert all(p.stat().st_size for p in paths)
    assert json.loads(paths[0].read_text())["schema"] == report.SCHEMA
    assert "quick smoke run" in paths[1].read_text()
    assert "- a finding" in paths[1].read_text()
    assert "| fsdp | mlp | bf16-mixed |" in index.write(tmp_path).read_text()
    reading = (tmp_path / "analysis.md").read_text()
    assert "- `fsdp:bf16-mixed`: ours / built-in: wall " in reading
    assert "The built-in does less work here on a CPU: no autocast" in reading
    assert "The like-for-like figures are ours / Lightning AMP (same loop) and ours / hand-written" in reading
    assert "`fsdp:bf16-mixed`, ours / hand-written doing the same work" not in reading  # 16-mixed only
    assert "(quick smoke run)" in (tmp_path / "index.md").read_text()


def test_gpu_math() -> None:
    assert gpu_bench.peak_tflops("NVIDIA H200") == 989.0
    assert gpu_bench.peak_tflops("NVIDIA L40S") == 362.0  # the longer key wins over "L40" and "L4"
    assert gpu_bench.peak_tflops("mystery", 100.0) == 100.0
    assert gpu_bench.peak_tflops("mystery") is None
    m = {"vocab": 10, "d_model": 4, "layers": 1, "heads": 1, "seq": 2, "batch": 1}
    assert gpu_bench.flops_per_token(m) == 6.0 * (12 * 16 + 40) + 6.0 * 1 * 2 * 4
    assert gpu_bench.mfu(1000.0, m, 1.0, 1) == 1000.0 * gpu_bench.flops_per_token(m) / 1e12
    assert gpu_bench.mfu(1000.0, m, None, 1) is None


def test_a_variant_that_failed_is_left_out_and_named(tmp_path: Path) -> None:
    times = [[0.01 + 1e-4 * k for k in range(10)]] * 2
    raw = {"wall": {"bf16-mixed|ours": times}, "cpu": {"bf16-mixed|ours": times},
           "errors": {"bf16-mixed|builtin": "RuntimeError: expected scalar type BFloat16 but found Float"}}  # fmt: skip
    results = overhead.analyse(raw, {"bf16-mixed": ["ours", "builtin", "hand"]})
    assert list(results["bf16-mixed"]["wall"]["step_s"]) == ["ours"]
    assert results["bf16-mixed"]["wall"]["ratios"] == {}
    config = {"backend": "fsdp", "model": "resnet", "rounds": 2, "steps": 10}
    data = {"quick": False, "machine": report.machine_info(), "config": config, "results": results,
            "errors": raw["errors"], "findings": []}  # fmt: skip
    report.write(tmp_path, "overhead-fsdp-resnet", "Overhead", "body", lambda plt: plt.subplots()[0], 0.0, **data)
    index.write(tmp_path)
    assert "| fsdp | resnet | bf16-mixed | 10.45 | - | - | - | - | - |" in (tmp_path / "index.md").read_text()
    reading = (tmp_path / "analysis.md").read_text()
    assert "`bf16-mixed`: no ratio: only ours ran. The built-in failed: `RuntimeError: expected scalar type" in reading


def test_a_precision_the_machine_refuses_is_named_with_its_error(tmp_path: Path) -> None:
    times = [[0.01 + 1e-4 * k for k in range(10)]] * 2
    refused = "TrainerConfigurationError: deepspeed:16-mixed on the CPU: DeepSpeed's CPU accelerator refuses"
    ran = {"32-true|ours": times, "32-true|builtin": times}
    raw = {"wall": ran, "cpu": ran, "errors": {f"16-mixed|{v}": refused for v in ("ours", "builtin", "hand")}}
    variants = {"32-true": ["ours", "builtin"], "16-mixed": ["ours", "builtin", "hand"]}
    config = {"backend": "deepspeed", "model": "llama", "rounds": 2, "steps": 10}
    data = {"quick": False, "machine": report.machine_info(), "config": config,
            "results": overhead.analyse(raw, variants), "errors": raw["errors"], "findings": []}  # fmt: skip
    report.write(tmp_path, "overhead-deepspeed-llama", "Overhead", "body", lambda plt: plt.subplots()[0], 0.0, **data)
    index.write(tmp_path)
    assert "| deepspeed | llama | 16-mixed | failed | - |" in (tmp_path / "index.md").read_text()
    reading = (tmp_path / "analysis.md").read_text()
    assert f"llama, `16-mixed`: not run on this machine: `{refused}`." in reading
    assert "llama, `32-true`, ours / built-in, step time (wall)" in reading


def test_the_like_for_like_ratio_is_the_built_in_only_where_it_does_the_same_work() -> None:
    def result(skips: dict[str, str], ran: list[str]) -> dict:
        ratios = {f"ours/{v}": {} for v in ran}
        return {"config": {"builtin_skips": skips}, "results": {"16-mixed": {"wall": {"ratios": ratios}}}}

    assert index.like_for_like(result({}, ["builtin", "amp", "hand"]), "16-mixed")[0] == "ours/builtin"
    skips = {"16-mixed": "no autocast"}
    assert index.like_for_like(result(skips, ["builtin", "amp", "hand"]), "16-mixed")[0] == "ours/amp"
    assert index.like_for_like(result(skips, ["builtin", "hand"]), "16-mixed")[0] == "ours/hand"
    assert index.like_for_like(result({}, ["hand"]), "16-mixed")[0] == "ours/hand"  # the built-in failed


def test_gather_breakdown_counts_every_parameter_once_and_names_what_stays_bf16() -> None:
    pytest.importorskip("transformers")
    from bench import memory_real, models

    for model in memory_real.DECODERS:
        groups = {g["group"]: g for g in memory_real.gather_breakdown(model)}
        assert sum(g["parameters"] for g in groups.values()) == models.parameters(model, 0, 0, 0)
        converted = groups.pop("Linear weights converted to float8")
        assert converted["fp8_bytes"] * 2 == converted["bf16_bytes"]
        assert all(g["fp8_bytes"] == g["bf16_bytes"] for g in groups.values()), "the rest gathers in bf16"
        assert {"embedding", "first Linear (lm.model.layers.0.self_attn.q_proj): not converted",
                "last Linear (lm.lm_head): not converted"} <= set(groups)  # fmt: skip
