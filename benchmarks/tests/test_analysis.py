"""The benchmark code's non-timing logic on synthetic samples (no training; no speed is asserted anywhere). The pages'
wording from hand-written results: tools/tests/test_benchmark_pages.py."""

import json
from pathlib import Path

import pytest

from bench import overhead, report
from tools.docgen import benchmark_index


def test_summary_and_ratio_interval_verdicts_and_rounds() -> None:
    s = report.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s["median"], s["iqr"], s["rel_iqr"]) == pytest.approx((3.0, 2.0, 2 / 3))
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


def test_overhead_analysis_leaves_out_a_failed_variant_and_writes_json_markdown_png_and_index(tmp_path: Path) -> None:
    times = [[0.01 + 1e-4 * k for k in range(10)]] * 2
    raw = {"wall": {"bf16-mixed|ours": times}, "cpu": {"bf16-mixed|ours": times},
           "errors": {"bf16-mixed|builtin": "RuntimeError: expected scalar type BFloat16 but found Float"}}  # fmt: skip
    failed = overhead.analyse(raw, {"bf16-mixed": ["ours", "builtin", "hand"]})
    assert list(failed["bf16-mixed"]["wall"]["step_s"]) == ["ours"]
    assert failed["bf16-mixed"]["wall"]["ratios"] == {}
    variants = {"bf16-mixed": ["ours", "ours-lowreduce", "builtin", "hand"]}
    samples = {
        f"bf16-mixed|{v}": [[0.01 + 0.001 * i + 1e-4 * k for k in range(10)]] * 2
        for i, v in enumerate(variants["bf16-mixed"])
    }
    results = overhead.analyse({"wall": samples, "cpu": samples}, variants)
    assert results["bf16-mixed"]["wall"]["ratios"]["ours/builtin"]["ratio"] < 1.0  # ours got the smallest times
    assert "ours-lowreduce/builtin" in results["bf16-mixed"]["cpu"]["ratios"]
    config = {"backend": "fsdp", "model": "mlp", "variants": variants, "task": {"width": 128, "depth": 2, "batch": 32},
              "parameters": 1000, "rounds": 2, "steps": 10, "warmup": 1, "description": "an MLP",
              "builtin_skips": {"bf16-mixed": overhead.builtin_skips("fsdp", "bf16-mixed")}}  # fmt: skip
    paths = report.save(tmp_path, "overhead-fsdp", 0.0, quick=True, machine=report.machine_info(), config=config,
                        results=results, errors={}, hooks={})  # fmt: skip
    assert [p.suffix for p in paths] == [".json", ".md", ".png"]
    assert all(p.stat().st_size for p in paths)
    assert json.loads(paths[0].read_text())["schema"] == report.SCHEMA
    assert "quick smoke run" in paths[1].read_text()
    assert "\n- fsdp:bf16-mixed ours/builtin (wall time) = " in paths[1].read_text()  # a finding, from the numbers
    assert "| fsdp | mlp | bf16-mixed |" in benchmark_index.write(tmp_path).read_text()
    assert "(quick smoke run)" in (tmp_path / "index.md").read_text()


def test_gather_breakdown_counts_every_parameter_once_and_names_what_stays_bf16() -> None:
    pytest.importorskip("transformers")
    from bench import memory
    from precision_testsupport import architectures

    for model in memory.DECODERS:
        groups = {g["group"]: g for g in memory.gather_breakdown(model)}
        assert sum(g["parameters"] for g in groups.values()) == architectures.parameters(model, 0, 0, 0)
        converted = groups.pop("Linear weights converted to float8")
        assert converted["fp8_bytes"] * 2 == converted["bf16_bytes"]
        assert all(g["fp8_bytes"] == g["bf16_bytes"] for g in groups.values()), "the rest gathers in bf16"
        assert {"embedding", "first Linear (lm.model.layers.0.self_attn.q_proj): not converted",
                "last Linear (lm.lm_head): not converted"} <= set(groups)  # fmt: skip
