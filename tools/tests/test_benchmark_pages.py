"""The benchmark pages from result files (tools/docgen/benchmark_pages.py: each result's page and findings;
tools/docgen/benchmark_index.py: index.md and analysis.md): every sentence comes from the numbers in the JSON. The
results here are written by hand, so no numpy, torch or matplotlib is needed (the charts themselves are drawn where
matplotlib is installed); benchmarks/tests writes real ones, charts included.

Every page reads the same way: a ratio is one cell, ``0.83 [0.66, 1.17] same`` (its 95% interval and the verdict in a
word), the p20 ratios, wall times and spreads are in blocks the reader opens, and every term a page uses is explained
on it."""

from __future__ import annotations

import contextlib
import importlib
import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from tools.bench_freshness import SCHEMA
from tools.docgen import benchmark_index, benchmark_pages

MACHINE = {"cpu_model": "a CPU", "cpu_flags": [], "usable_cpus": 2, "memory_total_bytes": 2**33,
           "versions": {"python": "3.11.7", "torch": "2.9.0", "deepspeed": None}, "git_commit": None,
           "uncommitted_measured_files": [], "load_average_1_5_15": [0.5, 0.5, 0.5], "load_average_at_end": [1.5, 1, 1],
           "time_utc": "2026-01-01T00:00:00Z", "command": "python benchmarks/run.py"}  # fmt: skip
REFUSED = "TrainerConfigurationError: deepspeed:16-mixed on the CPU: DeepSpeed's CPU accelerator refuses"
RATIO_CELL = re.compile(r"-?\d+(\.\d+)? \[-?\d+(\.\d+)?, -?\d+(\.\d+)?\] (faster|slower|same|rounds disagree)")
"""A table cell holding a ratio: the ratio, its interval and the verdict in a word, nothing else."""
INTERNAL = re.compile(r"\bissues? \d+\b|maintainers|a test pins|\btests?/test_\w+\.py")


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


# ---- one hand-written result of every other kind --------------------------------------------------------------
def _memory(folder: Path) -> dict[str, Any]:
    roles = ["params", "master", "grads", "optimizer_state", "other"]
    rows = [{"setup": s, "world": w, "precision": "bf16-mixed", "peak_rss_delta": 2**26, "peak_rss": 2**30,
             "bytes": dict(zip(roles, [2**24 // w, 0, 2**24 // w, 2**25 // w, 0], strict=True))}
            for w in (1, 2) for s in ("FSDP2", "ZeRO-3")]  # fmt: skip
    config = {"task": {"width": 512, "depth": 4, "batch": 8}, "steps": 3, "roles": roles}
    return _save(folder, "memory", config, rows)


def _memory_real(folder: Path) -> dict[str, Any]:
    def row(setup: str, precision: str, largest: int, error: str | None = None) -> dict[str, Any]:
        return {"model": "llama", "setup": setup, "precision": precision, "largest_gather_bytes": largest,
                "gathers": 15, "gathered_bytes_per_step": 30.0 * largest, "peak_rss_delta": 2**24,
                "error": error}  # fmt: skip

    rows = [row("ours-default", "bf16-mixed", 2**18), row("ours-whole", "bf16-mixed", 0, "TypeError: boom"),
            row("builtin", "bf16-mixed", 2**18), row("ours-default", "fp8-tensorwise", 2**17)]  # fmt: skip
    groups = [{"group": benchmark_pages.CONVERTED, "parameters": 900, "bf16_bytes": 1800, "fp8_bytes": 900},
              {"group": "embedding", "parameters": 100, "bf16_bytes": 200, "fp8_bytes": 200}]  # fmt: skip
    config = {"runs": [{k: r[k] for k in ("model", "setup", "precision")} for r in rows], "steps": 3, "batch": 4,
              "parameters": {"llama": 1000}, "descriptions": {"llama": "a tiny Llama"}}  # fmt: skip
    return _save(folder, "memory-real", config, rows, breakdown={"llama": groups})


def _discovery(folder: Path) -> dict[str, Any]:
    commands = {"python -c pass": 0.01, "import precision_base": 0.05, "precision-plugins list": 3.0}
    results = {"process_wall_s": {k: {"0": _summary(s), "100": _summary(s * 1.1)} for k, s in commands.items()},
               "modules": {k: {"modules": 50, "heavy": ["torch"] if "list" in k else []} for k in commands},
               "vs_pass": {"import precision_base": _ratio(5.0, "slower"),
                           "precision-plugins list": _ratio(300.0, "slower")}}  # fmt: skip
    return _save(folder, "discovery", {"counts": [0, 100], "commands": {}}, results)


def _audit(folder: Path) -> dict[str, Any]:
    results = {b: {"audited_step": _ratio(1.2), "after_audit": _ratio(1.0),
                   "medians_s": {"audited step 0": 0.07, "plain step 0": 0.06}}
               for b in ("fsdp", "deepspeed")}  # fmt: skip
    raw = {b: {v: [[0.07, 0.06, 0.06], [0.06, 0.06, 0.05]] for v in ("audit", "plain")} for b in results}
    return _save(folder, "audit", {"rounds": 2, "steps": 3, "batch": 8}, results, raw=raw)


def _gpu(folder: Path) -> dict[str, Any]:
    variant = {"step_s": _summary(0.011), "tokens_per_s": 9000.0, "peak_memory_bytes": [2**30], "final_loss": [8.5]}
    fits = {"fsdp2|bf16-mixed": {"variants": {"ours": variant, "builtin": variant},
                                 "ratios": {"ours/builtin": _ratio(1.0)}, "memory_ours/builtin": 1.0}}  # fmt: skip
    fp8 = [{"kind": "fp8", "spec": s, "compile": False, "parameters": 10**9, "converted_linears": 72,
            "tokens_per_s": 9000.0 * x, "mfu": 0.4 * x, "tokens_per_s_vs_bf16_mixed": x, "peak_memory_bytes": 2**33,
            "memory_vs_bf16_mixed": x}
           for s, x in (("fsdp:bf16-mixed", 1.0), ("fsdp:fp8-tensorwise", 1.3))]  # fmt: skip
    plan = {"model": {"layers": 2}, "fp8_model": {"layers": 4}, "steps": 20, "warmup": 5, "fp8_steps": 15}
    results = {"fits": fits, "fp8": fp8, "errors": [], "skipped": []}
    return _save(folder, "gpu", {"plan": plan, "rounds": 2, "peak_tflops": 989.0}, results)


def _measure(folder: Path) -> dict[str, Any]:
    def row(spec: str, status: str, ms: float | None, reason: str = "") -> dict[str, Any]:
        ran = ms is not None
        return {"spec": spec, "status": status, "reason": reason, "step_ms": ms, "step_ms_low": ms and 0.9 * ms,
                "step_ms_high": ms and 1.1 * ms, "peak_bytes": 2**25 if ran else None,
                "tensor_bytes": 2**20 if ran else None, "loss_deviation": 0.01 if status == "ok" else None,
                "audit_ok": True if ran else None,
                "losses": [2.0, 1.5, 1.2] if status == "ok" else [2.0, "inf"]}  # fmt: skip

    search = {
        "picked": "fsdp:32-true",
        "reference": "fsdp:32-true",
        "reason": "the fastest of 2 candidate(s)",
        "wall_s": 60.0,
        "overhead_s": 50.0,
        "tolerance": 0.1,
        "steps": 3,
        "warmup": 1,
        "candidates": [
            row("fsdp:32-true", "ok", 30.0),
            row("fsdp:bf16-mixed", "ok", 75.0),
            row("fsdp:16-true", "diverged", 90.0, "the loss became inf at step 2"),
            row("fsdp:fp8-tensorwise", "refused", None, "Float8UnavailableError: needs a GPU [sm89]"),
        ],
    }
    config = {"models": ["resnet"], "steps": 3, "warmup": 1, "devices": 1, "descriptions": {"resnet": "a CNN"}}
    return _save(folder, "measure", config, {"resnet": search})  # fmt: skip


def _every_kind(folder: Path) -> list[dict[str, Any]]:
    ratios = {"ours/builtin": _ratio(1.0, "same within spread (rounds disagree)"), "ours/hand": _ratio(1.05, "slower"),
              "ours/amp": _ratio(1.0), "amp/hand": _ratio(1.05)}  # fmt: skip
    hooks = {"bf16-mixed": {"us_per_step": {"ours": _summary(6.0), "builtin": _summary(40.0)},
                            "ours/builtin": _ratio(0.15, "faster")}}  # fmt: skip
    steps = {"ours": 0.01, "builtin": 0.01, "amp": 0.01, "hand": 0.0095}
    overhead = _overhead(folder, "fsdp", "mlp", {"bf16-mixed": _timed(steps, ratios)}, hooks=hooks)
    numerics = _numerics(folder)
    return [overhead, _memory(folder), _memory_real(folder), numerics, _discovery(folder), _audit(folder), _gpu(folder),
            _measure(folder)]  # fmt: skip


def _numerics(folder: Path) -> dict[str, Any]:
    ok = {"name": "fsdp:32-true", "backend": "fsdp", "variant": "ours", "precision": "32-true", "losses": [2.0, 1.0],
          "final_train_loss": 2.0, "eval_loss": 2.0, "eval_loss_diff_vs_32": 0.0, "weight_rel_l2_vs_32": 0.0,
          "nonfinite_losses": 0}  # fmt: skip
    numbers = ("final_train_loss", "eval_loss", "eval_loss_diff_vs_32", "weight_rel_l2_vs_32")
    diverged = {**ok, "name": "fsdp:16-true", "precision": "16-true", "losses": [2.0, None], "nonfinite_losses": 1,
                **dict.fromkeys(numbers)}  # fmt: skip
    config = {"task": {"width": 128, "depth": 2, "batch": 32, "lr": 3e-3}, "steps": 2, "eval_samples": 8}
    return _save(folder, "numerics", config, [ok, diverged])


def _tables(page: str) -> tuple[list[list[str]], list[list[str]]]:
    """The cells of the page's tables: those on the page itself, and those inside a block the reader opens."""
    shown, folded = [], []
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and not line.startswith("|---"):
            shown.append(cells)
        elif line.startswith("    | "):
            folded.append(cells)
    return shown, folded


def _reads_like_every_page(page: str) -> None:
    """One ratio per cell with its verdict word; p20, wall time and spreads folded away; every term it uses
    explained on it; nothing written for the project's developers."""
    shown, folded = _tables(page)
    assert shown, "a page has a table"
    for cell in (c for row in shown + folded for c in row if "[" in c):
        assert RATIO_CELL.fullmatch(cell), f"a cell with more than one ratio and its verdict word: {cell!r}"
    assert not [c for row in shown for c in row if "p20" in c], "p20 ratios are in the block below the table"
    if folded:
        assert '\n??? note "' in page, "the block the reader opens (pymdownx.details)"
    explained = {"p20": benchmark_pages.P20, "IQR": benchmark_pages.IQR, "rounds disagree": benchmark_pages.VERDICTS,
                 "CPU time": benchmark_pages.CPU_TIME, "round": benchmark_pages.ROUND}  # fmt: skip
    said = page
    for explanation in explained.values():
        assert page.count(explanation) <= 1, f"explained once a page: {explanation[:40]!r}"
        said = said.replace(explanation, "")
    for term, explanation in explained.items():  # "rounds disagree" uses "round" too
        if re.search(rf"\b{term}s?\b", said):
            assert explanation in page, f"{term!r} is used and not explained"
    if any(RATIO_CELL.fullmatch(c) for row in shown + folded for c in row):
        assert page.count(benchmark_pages.INTERVAL) == 1
        assert page.count(benchmark_pages.VERDICTS) == 1
    assert not INTERNAL.findall(page)


# ---- the tests -------------------------------------------------------------------------------------------------
def test_an_overhead_result_gives_its_page_the_index_and_the_reading(tmp_path: Path) -> None:
    skip = 'no autocast (it hard-codes `torch.autocast("cuda")`), reduction in the compute dtype'
    ratios = {"ours/builtin": _ratio(0.9, "faster"), "ours/hand": _ratio(1.0), "ours-lowreduce/builtin": _ratio(0.95)}
    d = _overhead(tmp_path, "fsdp", "mlp", {"bf16-mixed": _timed({"ours": 0.01, "builtin": 0.011}, ratios)},
                  skips={"bf16-mixed": skip})  # fmt: skip
    assert d["findings"] == [
        "fsdp:bf16-mixed ours/builtin (wall time) = 0.90 [0.89, 0.91] faster (chart, lower panel; All ratios table)",
        "fsdp:bf16-mixed ours/builtin (CPU time) = 0.90 [0.89, 0.91] faster (chart, lower panel; main table)",
    ]
    page = benchmark_pages.markdown(d)
    assert page.startswith("# Per-step overhead: fsdp\n\nFSDP2 (fully_shard under ModelParallelStrategy), 2 processes")
    head = ("| precision | ours ms | built-in ms | hand-written ms | ours / built-in, CPU time "
            "| ours / hand-written, CPU time |")  # fmt: skip
    assert (
        f"{head}\n|---|---|---|---|---|---|\n| bf16-mixed † | 10.00 | 11.00 | - | 0.90 [0.89, 0.91] faster | " in page
    )
    assert "| 1.00 [0.99, 1.01] same |" in page  # one ratio, its interval, the verdict's word; the hand loop: not run
    assert '??? note "All ratios: CPU and wall time, with p20"\n\n    | precision | ratio | CPU time |' in page
    assert (
        "\n    | bf16-mixed | ours / built-in | 0.90 [0.89, 0.91] faster | 0.90 | 0.90 [0.89, 0.91] faster | 0.90 |"
        in page
    )
    assert "\n    | bf16-mixed | ours, reduce in compute dtype / built-in | 0.95 [0.94, 0.96] same | 0.95 |" in page
    assert '??? note "Step times of every variant: median and IQR"' in page
    assert "\n    | bf16-mixed | ours | 10.00 | 2% | 10.00 | 2% |" in page
    assert "\n## What this run found\n\n- fsdp:bf16-mixed ours/builtin (wall time) = 0.90" in page
    assert "† Where the built-in does less work than ours on a CPU: `bf16-mixed`: no autocast" in page
    assert "- versions: python 3.11.7, torch 2.9.0\n" in page  # a distribution that is not installed: left out
    _reads_like_every_page(page)
    index = benchmark_index.write(tmp_path).read_text()
    assert "| fsdp | mlp | bf16-mixed | 10.00 | 0.90 [0.89, 0.91] faster | 1.00 [0.99, 1.01] same | - |" in index
    assert '??? note "The same ratios in wall time"\n\n    | backend | model | precision | ours ms |' in index
    _reads_like_every_page(index)
    reading = (tmp_path / "analysis.md").read_text()
    assert "- `fsdp:bf16-mixed`: ours / built-in: wall 0.90 [0.89, 0.91] faster; CPU time 0.90 [0.89, 0.91] faster" in (
        reading
    )
    assert "The built-in does less work here on a CPU: no autocast" in reading
    assert "The like-for-like figures are ours / Lightning AMP (same loop) and ours / hand-written" in reading
    assert "`fsdp:bf16-mixed`, ours / hand-written doing the same work" not in reading  # 16-mixed only
    assert benchmark_pages.VERDICTS in reading
    assert not INTERNAL.findall(reading)


def test_a_variant_that_failed_is_left_out_and_named(tmp_path: Path) -> None:
    errors = {"bf16-mixed|builtin": "RuntimeError: expected scalar type BFloat16 but found Float"}
    d = _overhead(tmp_path, "fsdp", "resnet", {"bf16-mixed": _timed({"ours": 0.01045}, {})}, errors=errors)
    assert d["findings"] == [
        f"fsdp:bf16-mixed Lightning built-in failed (no bar in the chart): {errors['bf16-mixed|builtin']}"
    ]
    page = benchmark_pages.markdown(d)
    assert "| bf16-mixed | 10.45 | failed | - |\n" in page
    assert "No ratio: only ours ran." in page
    benchmark_index.write(tmp_path)
    assert "| fsdp | resnet | bf16-mixed | 10.45 | - | - | - |" in (tmp_path / "index.md").read_text()
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
    assert "at most 1.03: 1.000 [0.990, 1.010] same: **met**." in reading  # targets: three decimals


def test_the_like_for_like_ratio_is_the_built_in_only_where_it_does_the_same_work() -> None:
    def result(skips: dict[str, str], ran: list[str]) -> dict[str, Any]:
        ratios: dict[str, Any] = {f"ours/{v}": {} for v in ran}
        return {"config": {"builtin_skips": skips}, "results": {"16-mixed": {"wall": {"ratios": ratios}}}}

    assert benchmark_index.like_for_like(result({}, ["builtin", "amp", "hand"]), "16-mixed")[0] == "ours/builtin"
    skips = {"16-mixed": "no autocast"}
    assert benchmark_index.like_for_like(result(skips, ["builtin", "amp", "hand"]), "16-mixed")[0] == "ours/amp"
    assert benchmark_index.like_for_like(result(skips, ["builtin", "hand"]), "16-mixed")[0] == "ours/hand"
    assert benchmark_index.like_for_like(result({}, ["hand"]), "16-mixed")[0] == "ours/hand"  # the built-in failed


def test_a_diverged_run_is_nan_on_its_page(tmp_path: Path) -> None:
    """JSON has no NaN: a diverged run's losses are null in its file and NaN on its page, as when it ran."""
    page = benchmark_pages.markdown(_numerics(tmp_path))
    assert "| fsdp:32-true | 2.0000 | 2.0000 | +0.0000 | 0.0000 | 0 |" in page
    assert "| fsdp:16-true | nan | nan | +nan | nan | 1 |" in page
    assert "- fsdp:16-true diverged: 1 non-finite losses (table; no line in the chart from its first one)" in page
    assert "**non-finite losses**: steps whose loss was NaN or infinite" in page


def test_every_kind_of_page_reads_the_same_way(tmp_path: Path) -> None:
    """One ratio per cell with its verdict word, the rest folded below the table, every term explained, and each
    finding naming where the page shows it."""
    for d in _every_kind(tmp_path):
        page = benchmark_pages.markdown(d)
        _reads_like_every_page(page)
        assert "How to read the tables:\n\n- " in page, d["benchmark"]
        found = page.split("\n## What this run found\n\n")[1].split("\n\n![")[0].splitlines()
        assert found, d["benchmark"]
        assert all(re.search(r"\([^()]*\b(table|chart)\b[^()]*\)", f) for f in found), found
    pages = {p.stem: p.read_text() for p in tmp_path.glob("*.md")} | {
        "index": benchmark_index.write(tmp_path).read_text()
    }
    pages["analysis"] = (tmp_path / "analysis.md").read_text()
    for page in pages.values():
        assert not INTERNAL.findall(page)
    assert "rounds disagree |" in pages["index"]
    _reads_like_every_page(pages["index"])  # "rounds disagree" in a cell: what a round is, explained above it
    memory = benchmark_pages.markdown(json.loads((tmp_path / "memory.json").read_text()))
    assert "| FSDP2 | bf16-mixed | 64.00 MiB | 32.00 MiB | 0.50 | 64.00 MiB | 64.00 MiB |" in memory
    assert "- FSDP2: tracked bytes per rank with 2 ranks / with 1 rank = 0.50 at every precision (main table" in memory
    discovery = benchmark_pages.markdown(json.loads((tmp_path / "discovery.json").read_text()))
    assert "| `precision-plugins list` | 3000 | 3300 | 300 [300, 300] slower | torch |" in discovery
    gpu = benchmark_pages.markdown(json.loads((tmp_path / "gpu.json").read_text()))
    assert "| fsdp2 | bf16-mixed | ours | 11.00 | 9,000 | 1.00 GiB | 8.5000 | 1.00 [0.99, 1.01] same | 1.000 |" in gpu
    assert "**MFU**: model FLOPs utilisation" in gpu
    measured = benchmark_pages.markdown(json.loads((tmp_path / "measure.json").read_text()))
    picked = "| `fsdp:32-true` (picked) | ok | 30.0 (27.0-33.0) | 1.00x | 32.00 MiB | 1.00 MiB | 1.0% | ok |  |"
    assert picked in measured
    assert "| `fsdp:16-true` | diverged | 90.0 (81.0-99.0) | 3.00x |" in measured
    refused = "| `fsdp:fp8-tensorwise` | refused | - | - | - | - | - | - | Float8UnavailableError: needs a GPU (sm89) |"
    assert refused in measured
    assert "- resnet: picked fsdp:32-true: the fastest of 2 candidate(s) (table; chart, lower panels)" in measured


def test_pages_and_summaries_use_the_findings_of_the_current_wording(tmp_path: Path) -> None:
    """A result's JSON stores its findings when it is measured; its page, the index and the reading compute them
    again from the numbers, and a redraw brings the stored copy up to date, changing nothing else in the JSON."""
    d = _audit(tmp_path)
    stored = {**d, "findings": ["an old sentence"]}
    (tmp_path / "audit.json").write_text(json.dumps(stored, indent=1) + "\n")
    assert "an old sentence" not in benchmark_pages.markdown(stored)
    benchmark_index.write(tmp_path)
    assert "an old sentence" not in (tmp_path / "index.md").read_text() + (tmp_path / "analysis.md").read_text()
    assert d["findings"][0] in (tmp_path / "index.md").read_text()


def test_redraw_draws_every_page_again_from_its_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[str] = []

    def draw(d: dict[str, Any], path: Path, pyplot: Any = None) -> Path:  # the chart: not drawn (no matplotlib)
        drawn.append(path.name)
        return path

    monkeypatch.setattr(benchmark_pages, "draw", draw)
    d = _audit(tmp_path)
    (tmp_path / "audit.json").write_text(json.dumps({**d, "findings": ["an old sentence"]}, indent=1) + "\n")
    (tmp_path / "memory.json").write_text(json.dumps({**_memory(tmp_path), "schema": "an old harness"}))
    paths = benchmark_index.redraw(tmp_path)
    assert [p.name for p in paths] == ["audit.json", "audit.md", "audit.png", "index.md", "analysis.md"]
    assert drawn == ["audit.png"]  # the result of an older schema is left as it is (the index says so)
    assert json.loads((tmp_path / "audit.json").read_text()) == d  # only its findings changed
    assert "an old sentence" not in (tmp_path / "audit.md").read_text()
    assert "`memory.json` was written by harness schema 'an old harness'" in (tmp_path / "index.md").read_text()
    assert benchmark_index.redraw(tmp_path)[0].name == "audit.md", "the findings are current: the JSON is left alone"
    assert benchmark_index.main(["--redraw", str(tmp_path)]) == 0
    assert benchmark_index.main([str(tmp_path)]) == 0


def test_charts_are_saved_at_150_dpi_with_10_to_11_pt_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved: dict[str, Any] = {}

    class Figure:
        def savefig(self, path: Path, **options: Any) -> None:
            saved.update(options, path=path, fonts=dict(context))

    class PyPlot:  # what draw() needs of matplotlib.pyplot
        def rc_context(self, settings: dict[str, Any]) -> Any:
            context.update(settings)
            return contextlib.nullcontext()

        def close(self, fig: Any) -> None:
            saved["closed"] = fig

    context: dict[str, Any] = {}
    fig = Figure()
    monkeypatch.setitem(benchmark_pages.KINDS, "audit", (lambda d: [], lambda d: ("title", "body", lambda plt: fig)))
    assert benchmark_pages.draw({"benchmark": "audit"}, tmp_path / "audit.png", PyPlot()) == tmp_path / "audit.png"
    assert saved["dpi"] >= 150
    assert saved["bbox_inches"] == "tight"
    sizes = [v for k, v in saved["fonts"].items() if k.endswith("size")]
    assert sizes
    assert all(10 <= s <= 11 for s in sizes)
    assert saved["fonts"]["figure.constrained_layout.use"], "layout that makes room for a legend below the axes"
    assert saved["closed"] is fig


def _png_size(path: Path) -> tuple[int, float]:
    """A PNG's width in pixels (its IHDR chunk) and its resolution in dots per inch (its pHYs chunk)."""
    data = path.read_bytes()
    assert data[12:16] == b"IHDR"
    (width,) = struct.unpack(">I", data[16:20])
    at = data.index(b"pHYs")
    x, _y, unit = struct.unpack(">IIB", data[at + 4 : at + 13])
    assert unit == 1  # pixels per metre
    return width, float(x) * 0.0254


def test_every_chart_is_drawn_at_150_dpi_readable_at_page_width_with_its_legends_below_the_data(
    tmp_path: Path,
) -> None:
    """Where matplotlib is installed: each kind's chart as a PNG of at least 150 dpi whose every text, tick labels
    included, shows at 9 pt or more once the page scales the PNG to its text column, and every legend below the axes
    it belongs to (or below them all), none over the data."""
    importlib.import_module("matplotlib").use("Agg")  # the tools session installs it: this test never skips
    plt: Any = importlib.import_module("matplotlib.pyplot")
    text: Any = importlib.import_module("matplotlib.text").Text

    for d in _every_kind(tmp_path):
        _md, png = benchmark_pages.write(tmp_path, d["benchmark"])
        pixels, dpi = _png_size(png)
        assert dpi >= 150, d["benchmark"]
        with plt.rc_context(benchmark_pages.FONTS):
            fig = benchmark_pages._kind(d)[1](d)[2](plt)
            fig.draw_without_rendering()
            texts = [t for t in fig.findobj(text) if t.get_visible() and t.get_text().strip()]
            assert any(t in ax.get_xticklabels() + ax.get_yticklabels() for ax in fig.axes for t in texts)
            smallest = min(t.get_fontsize() for t in texts)
            assert benchmark_pages.shown_pt(smallest, pixels / dpi, dpi) >= 9, (d["benchmark"], smallest, pixels)
            for ax in fig.axes:
                if ax.get_legend():
                    assert ax.get_legend().get_window_extent().y1 <= ax.get_window_extent().y0, d["benchmark"]
            for legend in fig.legends:
                assert legend.get_window_extent().y1 <= min(ax.get_window_extent().y0 for ax in fig.axes)
        plt.close(fig)


def test_a_chart_shows_what_its_findings_say(tmp_path: Path) -> None:
    """The overhead chart draws a ratio with a verdict (faster, slower: a finding) in full colour and one without
    (same, rounds disagree) pale; the measure chart writes each candidate's ms per step at its bar."""
    importlib.import_module("matplotlib").use("Agg")
    plt: Any = importlib.import_module("matplotlib.pyplot")
    kinds = {d["benchmark"]: d for d in _every_kind(tmp_path)}
    overhead = kinds["overhead-fsdp"]
    assert [f.split(" = ")[0] for f in overhead["findings"]] == ["fsdp:bf16-mixed ours/hand (wall time)",
                                                                 "fsdp:bf16-mixed ours/hand (CPU time)"]  # fmt: skip
    with plt.rc_context(benchmark_pages.FONTS):
        fig = benchmark_pages._kind(overhead)[1](overhead)[2](plt)
        ratios = fig.axes[1]
        points = {(round(float(y), 2), line.get_alpha()) for line in ratios.lines if line.get_marker() in ("o", "s")
                  for y in line.get_ydata()}  # fmt: skip
        assert points == {(1.05, 1), (1.0, 0.35)}, "ours/hand slower: full colour; ours/builtin rounds disagree: pale"
        assert "pale: same or rounds disagree" in ratios.get_title()
        plt.close(fig)
        measure = kinds["measure"]
        fig = benchmark_pages._kind(measure)[1](measure)[2](plt)
        bars = fig.axes[1]
        assert [t.get_text() for t in bars.texts] == ["30.0", "75.0", "90.0"]
        assert [t.get_text() for t in bars.get_yticklabels()] == ["fsdp:32-true", "fsdp:bf16-mixed", "fsdp:16-true"]
        plt.close(fig)


def test_text_on_a_chart_shows_smaller_once_the_page_scales_it_down() -> None:
    shown = benchmark_pages.shown_pt
    assert shown(10, benchmark_pages.WIDTH) == pytest.approx(10 * benchmark_pages.PAGE_PX / (96 * 7.5))
    assert shown(10, benchmark_pages.WIDTH) >= 9.5
    assert shown(10, 10.6, 100) < 7  # the old charts: 100 dpi, 10.6 in wide
    assert shown(10, 4) == pytest.approx(10 * 150 / 96)  # 600 px: shown as is, one CSS px a pixel


def test_a_small_loss_deviation_keeps_its_digits() -> None:
    assert [benchmark_pages._percent(x) for x in (None, 0.0, 3.1e-5, 0.0027, 0.25)] == ["-", "0%", "0.0031%", "0.27%",
                                                                                         "25%"]  # fmt: skip


def test_formatting() -> None:
    assert benchmark_pages.fmt_bytes(None) == "-"
    assert [benchmark_pages.fmt_bytes(n) for n in (3 * 2**20, -2048, 5)] == ["3.00 MiB", "-2.00 KiB", "5 B"]
    assert "x\\|y" in benchmark_pages.md_table(["a", "b"], [["x|y", 1]])
    fmt = benchmark_pages.fmt_ratio
    assert fmt(_ratio(1.5)) == "1.50 [1.49, 1.51] same"
    assert fmt(_ratio(0.83, "faster")) == "0.83 [0.82, 0.84] faster"
    assert fmt(_ratio(1.09, "same within spread (rounds disagree)")) == "1.09 [1.08, 1.10] rounds disagree"
    assert fmt(_ratio(320.0, "slower")) == "320 [320, 320] slower"  # fewer decimals for large ratios
    assert fmt(_ratio(1.5), 3) == "1.500 [1.490, 1.510] same"
    # an interval that excludes 1 never prints an end as 1.00: one more decimal
    assert (
        fmt({"ratio": 0.96, "ci95": [0.927, 0.996], "p20": 0.98, "verdict": "faster"}) == "0.960 [0.927, 0.996] faster"
    )
    assert benchmark_pages.fmt_p20(_ratio(1.5)) == "1.50"
    assert [benchmark_pages.verdict_word(_ratio(1, v)) for v in benchmark_pages.VERDICT_WORDS] == [
        "slower", "faster", "same", "rounds disagree",
    ]  # fmt: skip
    block = benchmark_pages.details("All ratios", "| a |\n|---|\n\n| b |")
    assert block == '??? note "All ratios"\n\n    | a |\n    |---|\n\n    | b |'
