"""The benchmark pages from result files (tools/docgen/benchmark_pages.py: each result's page and findings;
tools/docgen/benchmark_index.py: index.md and analysis.md): every sentence comes from the numbers in the JSON. The
results here are written by hand, so no numpy, torch or matplotlib is needed; benchmarks/tests writes real ones,
charts included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tools.bench_freshness import SCHEMA
from tools.docgen import benchmark_index, benchmark_pages

MACHINE = {"cpu_model": "a CPU", "cpu_flags": [], "usable_cpus": 2, "memory_total_bytes": 2**33,
           "versions": {"python": "3.11.7", "torch": "2.9.0", "deepspeed": None}, "git_commit": None,
           "uncommitted_measured_files": [], "load_average_1_5_15": [0.5, 0.5, 0.5], "load_average_at_end": [1.5, 1, 1],
           "time_utc": "2026-01-01T00:00:00Z", "command": "python benchmarks/run.py"}  # fmt: skip
REFUSED = "TrainerConfigurationError: deepspeed:16-mixed on the CPU: DeepSpeed's CPU accelerator refuses"


def _summary(median: float) -> dict[str, float]:
    return {"n": 10, "median": median, "p25": 0.99 * median, "p75": 1.01 * median, "iqr": 0.02 * median,
            "rel_iqr": 0.02}  # fmt: skip


def _ratio(r: float, verdict: str = "same within spread") -> dict[str, Any]:
    return {"ratio": r, "ci95": [r - 0.01, r + 0.01], "p20": r, "verdict": verdict}


def _timed(steps: dict[str, float], ratios: dict[str, dict[str, Any]]) -> dict[str, Any]:
    entry = {"step_s": {v: _summary(s) for v, s in steps.items()}, "ratios": ratios}
    return {"wall": entry, "cpu": entry}


def _save(folder: Path, name: str, config: dict[str, Any], results: Any, **extra: Any) -> dict[str, Any]:
    d = {"schema": SCHEMA, "benchmark": name, "duration_s": 12.0, "quick": False, "machine": MACHINE,
         "config": config, "results": results, **extra}  # fmt: skip
    d["findings"] = benchmark_pages.findings(d)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(d))
    return d


def _overhead(folder: Path, backend: str, model: str, results: Any, **extra: Any) -> dict[str, Any]:
    name = f"overhead-{backend}" + ("" if model == "mlp" else f"-{model}")
    config = {"backend": backend, "model": model, "variants": {p: ["ours", "builtin", "hand"] for p in results},
              "task": {"width": 128, "depth": 2, "batch": 32}, "parameters": 1000, "rounds": 2, "steps": 10,
              "warmup": 1, "builtin_skips": extra.pop("skips", {}), "description": "a model"}  # fmt: skip
    return _save(folder, name, config, results, **{"errors": {}, "hooks": {}, **extra})


def test_an_overhead_result_gives_its_page_the_index_and_the_reading(tmp_path: Path) -> None:
    skip = 'no autocast (it hard-codes `torch.autocast("cuda")`), reduction in the compute dtype'
    ratios = {"ours/builtin": _ratio(0.9, "faster"), "ours/hand": _ratio(1.0), "ours-lowreduce/builtin": _ratio(0.95)}
    d = _overhead(tmp_path, "fsdp", "mlp", {"bf16-mixed": _timed({"ours": 0.01, "builtin": 0.011}, ratios)},
                  skips={"bf16-mixed": skip})  # fmt: skip
    assert d["findings"] == ["fsdp:bf16-mixed ours/builtin (wall time) = 0.900 [0.890, 0.910]; p20 0.900: faster "
                             "beyond the 95% interval", "fsdp:bf16-mixed ours/builtin (cpu time) = 0.900 [0.890, "
                             "0.910]; p20 0.900: faster beyond the 95% interval"]  # fmt: skip
    page = benchmark_pages.markdown(d)
    assert page.startswith("# Per-step overhead: fsdp\n\nFSDP2 (fully_shard under ModelParallelStrategy), 2 processes")
    assert "| bf16-mixed | 10.00 (2%) | 11.00 (2%) | - | 0.900 [0.890, 0.910]; p20 0.900 |" in page  # hand: not run
    assert "\n- fsdp:bf16-mixed ours/builtin (wall time) = 0.900" in page
    assert "Where the built-in does less work than ours on a CPU: `bf16-mixed`: no autocast" in page
    assert "- versions: python 3.11.7, torch 2.9.0\n" in page  # a distribution that is not installed: left out
    assert "| fsdp | mlp | bf16-mixed |" in benchmark_index.write(tmp_path).read_text()
    reading = (tmp_path / "analysis.md").read_text()
    assert "- `fsdp:bf16-mixed`: ours / built-in: wall " in reading
    assert "The built-in does less work here on a CPU: no autocast" in reading
    assert "The like-for-like figures are ours / Lightning AMP (same loop) and ours / hand-written" in reading
    assert "`fsdp:bf16-mixed`, ours / hand-written doing the same work" not in reading  # 16-mixed only


def test_a_variant_that_failed_is_left_out_and_named(tmp_path: Path) -> None:
    errors = {"bf16-mixed|builtin": "RuntimeError: expected scalar type BFloat16 but found Float"}
    d = _overhead(tmp_path, "fsdp", "resnet", {"bf16-mixed": _timed({"ours": 0.01045}, {})}, errors=errors)
    assert d["findings"] == [f"fsdp:bf16-mixed Lightning built-in failed: {errors['bf16-mixed|builtin']}"]
    assert "| bf16-mixed | 10.45 (2%) | failed | - |" in benchmark_pages.markdown(d)
    benchmark_index.write(tmp_path)
    assert "| fsdp | resnet | bf16-mixed | 10.45 | - | - | - | - | - |" in (tmp_path / "index.md").read_text()
    reading = (tmp_path / "analysis.md").read_text()
    assert "`bf16-mixed`: no ratio: only ours ran. The built-in failed: `RuntimeError: expected scalar type" in reading


def test_a_precision_the_machine_refuses_is_named_with_its_error(tmp_path: Path) -> None:
    ran = _timed({"ours": 0.01, "builtin": 0.01}, {"ours/builtin": _ratio(1.0)})
    errors = {f"16-mixed|{v}": REFUSED for v in ("ours", "builtin", "hand")}
    _overhead(tmp_path, "deepspeed", "llama", {"32-true": ran, "16-mixed": _timed({}, {})}, errors=errors)
    benchmark_index.write(tmp_path)
    assert "| deepspeed | llama | 16-mixed | failed | - |" in (tmp_path / "index.md").read_text()
    reading = (tmp_path / "analysis.md").read_text()
    assert f"llama, `16-mixed`: not run on this machine: `{REFUSED}`." in reading
    assert "llama, `32-true`, ours / built-in, step time (wall)" in reading


def test_the_like_for_like_ratio_is_the_built_in_only_where_it_does_the_same_work() -> None:
    def result(skips: dict[str, str], ran: list[str]) -> dict[str, Any]:
        ratios = {f"ours/{v}": {} for v in ran}
        return {"config": {"builtin_skips": skips}, "results": {"16-mixed": {"wall": {"ratios": ratios}}}}

    assert benchmark_index.like_for_like(result({}, ["builtin", "amp", "hand"]), "16-mixed")[0] == "ours/builtin"
    skips = {"16-mixed": "no autocast"}
    assert benchmark_index.like_for_like(result(skips, ["builtin", "amp", "hand"]), "16-mixed")[0] == "ours/amp"
    assert benchmark_index.like_for_like(result(skips, ["builtin", "hand"]), "16-mixed")[0] == "ours/hand"
    assert benchmark_index.like_for_like(result({}, ["hand"]), "16-mixed")[0] == "ours/hand"  # the built-in failed


def test_a_diverged_run_is_nan_on_its_page(tmp_path: Path) -> None:
    """JSON has no NaN: a diverged run's losses are null in its file and NaN on its page, as when it ran."""
    ok = {"name": "fsdp:32-true", "backend": "fsdp", "variant": "ours", "precision": "32-true", "losses": [2.0, 1.0],
          "final_train_loss": 2.0, "eval_loss": 2.0, "eval_loss_diff_vs_32": 0.0, "weight_rel_l2_vs_32": 0.0,
          "nonfinite_losses": 0}  # fmt: skip
    numbers = ("final_train_loss", "eval_loss", "eval_loss_diff_vs_32", "weight_rel_l2_vs_32")
    diverged = {**ok, "name": "fsdp:16-true", "precision": "16-true", "losses": [2.0, None], "nonfinite_losses": 1,
                **dict.fromkeys(numbers)}  # fmt: skip
    config = {"task": {"width": 128, "depth": 2, "batch": 32, "lr": 3e-3}, "steps": 2, "eval_samples": 8}
    page = benchmark_pages.markdown(_save(tmp_path, "numerics", config, [ok, diverged]))
    assert "| fsdp:32-true | 2.0000 | 2.0000 | +0.0000 | 0.0000 | 0 |" in page
    assert "| fsdp:16-true | nan | nan | +nan | nan | 1 |" in page


def test_formatting() -> None:
    assert benchmark_pages.fmt_bytes(None) == "-"
    assert [benchmark_pages.fmt_bytes(n) for n in (3 * 2**20, -2048, 5)] == ["3.00 MiB", "-2.00 KiB", "5 B"]
    assert "x\\|y" in benchmark_pages.md_table(["a", "b"], [["x|y", 1]])
    assert benchmark_pages.fmt_ratio(_ratio(1.5)) == "1.500 [1.490, 1.510]; p20 1.500"
