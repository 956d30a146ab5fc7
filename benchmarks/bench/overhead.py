"""Per-step overhead: our plugin vs Lightning's built-in vs a hand-written loop, 2 ranks on CPU (each pinned to a
CPU of its own), per backend and model. Each round runs every precision's variants in a shuffled order, each a fresh
fit; on the MLP also ``-lowreduce`` variants (reduce in the compute dtype, as the built-in) and the plugin's own
per-step hooks alone (:func:`hooks`)."""

from __future__ import annotations

import random
import time
import warnings
from typing import Any

import torch

from bench import report, runs
from precision_testsupport import architectures

MIXED = ["ours", "ours-lowreduce", "builtin", "amp", "hand", "hand-lowreduce"]
THREE = ["ours", "builtin", "hand"]
MIXED_REAL = ["ours", "builtin", "amp", "hand"]  # FSDP *-mixed on the real models
BLOCKS = "ours-blocks"  # FSDP on the decoder: ours sharded by FSDP2Strategy(auto_wrap_policy={its block class})
VARIANTS = {
    "fsdp": {p: THREE for p in ("32-true", "bf16-true", "16-true")} | {"bf16-mixed": MIXED, "16-mixed": MIXED},
    # DeepSpeed's bf16-true / 16-true run the same engine as bf16-mixed / 16-mixed (memory and numerics cover it);
    # 16-mixed needs a CPU with native fp16 (DeepSpeed's CPU accelerator refuses it elsewhere: recorded as failed)
    "deepspeed": {"32-true": THREE, "bf16-mixed": THREE, "16-mixed": THREE},
}
REAL_PRECISIONS = {
    # 16-true is left out: pure-fp16 AdamW diverges at the first step (see the numerics page)
    ("fsdp", "llama"): ("32-true", "bf16-true", "bf16-mixed", "16-mixed"),
    ("deepspeed", "llama"): ("32-true", "bf16-mixed", "16-mixed"),
    # the BatchNorm CNN: a variant that fails (e.g. bf16 weights against fp32 running statistics) is recorded
    ("fsdp", "resnet"): ("32-true", "bf16-true", "bf16-mixed"),
    # 16-mixed is left out on the ResNet: DeepSpeed's fp16 convolutions on a CPU take about 30x a bf16 step here
    ("deepspeed", "resnet"): ("32-true", "bf16-mixed"),
}
REAL_TASK = {"llama": {"batch": 8}, "resnet": {"batch": 16}}
PAIRS = [("ours", "builtin"), ("ours", "hand"), ("ours", "amp"), ("amp", "hand"), ("ours-lowreduce", "builtin"),
         ("builtin", "hand"), (BLOCKS, "builtin")]  # fmt: skip


def name_of(backend: str, model: str) -> str:
    return f"overhead-{backend}" if model == "mlp" else f"overhead-{backend}-{model}"


def builtin_skips(backend: str, precision: str) -> str | None:
    """What Lightning's built-in leaves out on a CPU at ``precision``, or None when it does the same work as ours."""
    if backend != "fsdp" or not precision.endswith("-mixed"):
        return None
    skipped = 'no autocast (it hard-codes `torch.autocast("cuda")`), reduction in the compute dtype'
    return skipped + (", and its `ShardedGradScaler` disables itself (no loss scaling)" if precision == "16-mixed"
                      else "")  # fmt: skip


def worker(args: dict[str, Any]) -> dict[str, Any]:
    """Inside each rank: every round, every precision, the variants in a shuffled order; a variant whose fit raises
    is recorded under ``errors`` and not run again."""
    runs.pin_to_own_cpu()
    task, rng = runs.Task(**args["task"]), random.Random(0)  # same seed in every rank: the same order
    samples: dict[str, Any] = {"wall": {}, "cpu": {}, "errors": {}}
    for _ in range(args["rounds"]):
        for precision, variants in args["variants"].items():
            for variant in rng.sample(variants, len(variants)):
                key = f"{precision}|{variant}"
                if key in samples["errors"]:
                    continue
                try:
                    res = runs.run(args["backend"], variant, precision, task, args["steps"], args["warmup"])
                except Exception as exc:
                    samples["errors"][key] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                    continue
                samples["wall"].setdefault(key, []).append(res["times"])
                samples["cpu"].setdefault(key, []).append(res["cpu_times"])
    return samples


def analyse(raw: dict[str, Any], variants: dict[str, list[str]]) -> dict[str, Any]:
    """Per precision and kind of time ("wall", "cpu"): a summary per variant and the ratios of :data:`PAIRS`."""
    out: dict[str, Any] = {}
    for precision, listed in variants.items():
        names = [v for v in listed if f"{precision}|{v}" in raw["wall"]]  # those that ran
        for kind in ("wall", "cpu"):
            step_s, ratios = report.compare({v: raw[kind][f"{precision}|{v}"] for v in names}, PAIRS)
            out.setdefault(precision, {})[kind] = {"step_s": step_s, "ratios": ratios}
    return out


def _hook_block(plugin: Any, batch: Any, loss: Any, calls: int) -> float:
    """Seconds per step of the hooks Lightning calls around every training step that need no running Trainer."""
    start = time.perf_counter()
    for _ in range(calls):
        plugin.convert_input(batch)
        with plugin.train_step_context():
            pass
        plugin.convert_output(loss)
    return (time.perf_counter() - start) / calls


def hooks(backend: str, precisions: list[str], calls: int, blocks: int) -> dict[str, Any]:
    """``convert_input`` + ``train_step_context`` + ``convert_output``, ours and the built-in in alternating blocks of
    ``calls`` steps: microseconds per step and the ratio."""
    batch, loss, out = (torch.randn(32, 128), torch.randint(0, 16, (32,))), torch.tensor(1.0), {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the built-in's CUDA autocast on a CPU warns at every entry
        for precision in precisions:
            plugins = {v: runs.plugin(backend, v, precision) for v in ("ours", "builtin")}
            for plugin in plugins.values():
                _hook_block(plugin, batch, loss, max(1, calls // 10))  # warm-up
            times: dict[str, list[float]] = {k: [] for k in plugins}
            for _ in range(blocks):
                for k, plugin in plugins.items():
                    times[k].append(_hook_block(plugin, batch, loss, calls))
            out[precision] = {"us_per_step": {k: report.summarize([t * 1e6 for t in v]) for k, v in times.items()},
                              "ours/builtin": report.ratio(times["ours"], times["builtin"])}  # fmt: skip
    return out


def run(quick: bool, backend: str, model: str = "mlp") -> dict[str, Any]:
    if model == "mlp":
        variants = {"bf16-mixed": MIXED_REAL if backend == "fsdp" else THREE} if quick else VARIANTS[backend]
        task = runs.Task(width=128)
    else:
        variants = {p: MIXED_REAL if backend == "fsdp" and p.endswith("-mixed") else THREE
                    for p in REAL_PRECISIONS[(backend, model)][: 1 if quick else None]}  # fmt: skip
        if (backend, model) == ("fsdp", "llama"):  # the same units as configure_model's blocks + model
            variants = {p: [*vs, BLOCKS] for p, vs in variants.items()}
        task = runs.Task(model=model, **REAL_TASK[model])
    steps = (5, 1) if quick else (40, 5) if model == "mlp" else (30, 3)
    skips = {p: s for p in variants if (s := builtin_skips(backend, p))}
    shape = (model, task.width, task.depth)  # what the models' description and parameter count depend on
    config: dict[str, Any] = {"backend": backend, "model": model, "variants": variants, "task": dict(vars(task)),
                              "parameters": architectures.parameters(*shape, task.classes), "builtin_skips": skips,
                              "rounds": 1 if quick else 8, "steps": steps[0], "warmup": steps[1],
                              "description": architectures.describe(*shape, task.batch)}  # fmt: skip
    raw = runs.in_ranks("bench.overhead:worker", config)
    hook_results = hooks(backend, list(variants), 200 if quick else 2000, 3 if quick else 15) if model == "mlp" else {}
    return {"config": config, "results": analyse(raw, variants), "errors": raw.get("errors", {}), "hooks": hook_results}
