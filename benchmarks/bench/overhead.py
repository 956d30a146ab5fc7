"""Per-step overhead: our plugin vs Lightning's built-in vs a hand-written loop, 2 processes on CPU, per backend and
model (:mod:`bench.models`).

One 2-rank launch per backend and model. In each round, for each precision, the variants run in a shuffled order
(the same in both ranks), each a fresh fit of ``warmup + steps`` steps; rounds interleave the variants in time so
load drift touches all of them alike; each rank is pinned to a CPU of its own. FSDP ``*-mixed`` adds ``amp``
(Lightning's own CPU autocast plugin: ours' work in the same loop); on the MLP also ``-lowreduce`` variants (reduce
in the compute dtype, as the built-in does), which separate the cost of our fp32 reduction from plugin overhead, and
the plugin's own per-step hooks are timed alone (:func:`hooks`), ours against the built-in.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from bench import models, report, runs

MIXED = ["ours", "ours-lowreduce", "builtin", "amp", "hand", "hand-lowreduce"]
THREE = ["ours", "builtin", "hand"]
MIXED_REAL = ["ours", "builtin", "amp", "hand"]  # FSDP *-mixed on the real models
BLOCKS = "ours-blocks"  # FSDP on the decoder: ours sharded by FSDP2Strategy(auto_wrap_policy={its block class})
SHOWN = ["ours", "builtin", "amp", "hand"]  # the step-time columns
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
COLUMNS = {"wall: ours / built-in": ("wall", "ours/builtin"), "wall: ours / hand": ("wall", "ours/hand"),
           "CPU: ours / built-in": ("cpu", "ours/builtin"), "CPU: ours / hand": ("cpu", "ours/hand"),
           "CPU: ours / Lightning AMP": ("cpu", "ours/amp"), "CPU: Lightning AMP / hand": ("cpu", "amp/hand"),
           "wall: ours reduce=low / built-in": ("wall", "ours-lowreduce/builtin"),
           "wall: ours, FSDP2Strategy block set / built-in": ("wall", f"{BLOCKS}/builtin")}  # fmt: skip
LABELS = {"ours": "ours", "ours-lowreduce": "ours, reduce in compute dtype", "builtin": "Lightning built-in",
          "amp": "Lightning MixedPrecision (CPU autocast)", "hand": "hand-written loop",
          "hand-lowreduce": "hand-written, reduce in compute dtype",
          BLOCKS: "ours, FSDP2Strategy(auto_wrap_policy={block class})"}  # fmt: skip
HEADS = {"ours": "ours ms", "builtin": "built-in ms", "amp": "Lightning AMP ms", "hand": "hand-written ms"}


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
    """Inside each rank: every round, every precision, the variants in a shuffled order. A variant whose fit raises
    (the same error in every rank: same code, model and data) is recorded under ``errors`` and not run again."""
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
            rounds = {v: raw[kind][f"{precision}|{v}"] for v in names}
            pooled = {v: [t for r in rs for t in r] for v, rs in rounds.items()}
            ratios = {f"{a}/{b}": report.ratio(pooled[a], pooled[b], rounds[a], rounds[b]) for a, b in PAIRS
                      if a in names and b in names}  # fmt: skip
            out.setdefault(precision, {})[kind] = {"step_s": {v: report.summarize(pooled[v]) for v in names},
                                                   "ratios": ratios}  # fmt: skip
    return out


def _hook_plugins(backend: str, precision: str) -> dict[str, Any]:
    if backend == "fsdp":
        from lightning.pytorch.plugins.precision import FSDPPrecision

        import precision_base

        return {"ours": precision_base.resolve(f"fsdp:{precision}"), "builtin": FSDPPrecision(precision)}  # type: ignore[arg-type]
    from lightning.pytorch.plugins.precision import DeepSpeedPrecision as Builtin

    from precision_deepspeed import DeepSpeedPrecision

    return {"ours": DeepSpeedPrecision(precision), "builtin": Builtin(precision)}  # type: ignore[arg-type]


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
    """The plugin-only per-step microbenchmark: ``convert_input`` + ``train_step_context`` + ``convert_output``,
    ours and the built-in in alternating blocks of ``calls`` steps; microseconds per step and the ratio."""
    import warnings

    import torch

    batch, loss, out = (torch.randn(32, 128), torch.randint(0, 16, (32,))), torch.tensor(1.0), {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the built-in's CUDA autocast on a CPU warns at every entry
        for precision in precisions:
            plugins = _hook_plugins(backend, precision)
            for plugin in plugins.values():
                _hook_block(plugin, batch, loss, max(1, calls // 10))  # warm-up
            times: dict[str, list[float]] = {k: [] for k in plugins}
            for _ in range(blocks):
                for k, plugin in plugins.items():
                    times[k].append(_hook_block(plugin, batch, loss, calls))
            out[precision] = {"us_per_step": {k: report.summarize([t * 1e6 for t in v]) for k, v in times.items()},
                              "ours/builtin": report.ratio(times["ours"], times["builtin"])}  # fmt: skip
    return out


def run(quick: bool, machine: dict[str, Any], out: Path, backend: str, model: str = "mlp") -> list[Path]:
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
    config: dict[str, Any] = {"backend": backend, "model": model, "variants": variants, "task": dict(vars(task)),
                              "parameters": models.parameters(model, task.width, task.depth, task.classes),
                              "rounds": 1 if quick else 8, "steps": steps[0], "warmup": steps[1],
                              "builtin_skips": skips}  # fmt: skip
    start = time.perf_counter()
    raw = runs.in_ranks("bench.overhead:worker", config)
    results, errors = analyse(raw, variants), raw.get("errors", {})
    hook_results = hooks(backend, list(variants), 200 if quick else 2000, 3 if quick else 15) if model == "mlp" else {}
    findings = [f"{backend}:{p} {name} ({kind} time) = {report.fmt_ratio(r)}: {r['verdict']} beyond the 95% interval"
                for p, e in results.items() for kind in ("wall", "cpu") for name, r in e[kind]["ratios"].items()
                if name.startswith("ours") and r["verdict"] in ("slower", "faster")]  # fmt: skip
    findings += [f"{backend}:{k.split('|')[0]} {LABELS[k.split('|')[1]]} failed: {e}" for k, e in errors.items()]
    rows, shown_heads = [], [v for v in SHOWN if any(v in vs for vs in variants.values())]
    columns = {k: c for k, c in COLUMNS.items() if any(c[1] in e[c[0]]["ratios"] for e in results.values())}
    for p, e in results.items():
        ms = [f"{s['median'] * 1e3:.2f} ({s['rel_iqr']:.0%})" if (s := e["wall"]["step_s"].get(v)) else
              "failed" if f"{p}|{v}" in errors else "-" for v in shown_heads]  # fmt: skip
        cells = [report.fmt_ratio(e[k]["ratios"][r]) if r in e[k]["ratios"] else "-" for k, r in columns.values()]
        rows.append([p, *ms, *cells])
    t = config["task"]
    setup = "FSDP2 (fully_shard under ModelParallelStrategy)" if backend == "fsdp" else "DeepSpeed ZeRO-2"
    body = (
        f"{setup}, 2 processes, gloo, 1 thread each; {models.describe(model, t['width'], t['depth'], t['batch'])} "
        f"({config['parameters']:,} parameters), AdamW. {config['rounds']} interleaved rounds x {config['steps']} "
        f"steps per variant ({config['warmup']} warm-up steps of every fit dropped), each rank pinned to a CPU of its "
        "own. A step is the slowest rank's time "
        "from one batch's start to the next. Cells: median ms (IQR / median); ratios of medians with a 95% bootstrap "
        "interval (scipy), then the ratio of 20th percentiles. CPU time leaves out waiting for a CPU or for the other "
        "rank: the steadier figure on a shared machine. The hand-written loop does the work ours does (autocast and "
        "a `GradScaler` for `16-mixed`, fp32 reduction for `*-mixed`)."
        + ("\n\nWhere the built-in does less work than ours on a CPU: "
           + "; ".join(f"`{p}`: {s}" for p, s in skips.items()) + ". There, ours / built-in compares two different "
           "computations; ours / Lightning AMP (Lightning's `MixedPrecision` plugin with `device=\"cpu\"`: CPU "
           "autocast and a `GradScaler` for `16-mixed`, under a user's fp32-reducing `fully_shard` policy) compares "
           "the same work in the same Lightning loop, and ours / hand-written the same work against plain torch, "
           "without Lightning's per-step loop." if skips else "")
        + ("\n\nOurs, FSDP2Strategy block set: ours without `configure_model`, under "
           "`FSDP2Strategy(auto_wrap_policy={<the decoder's block class>})`, which makes exactly those units plus the "
           "LightningModule (its step methods gather the embeddings, final norm and head), against the built-in "
           "sharding the same blocks, then the model, in `configure_model`." if any(BLOCKS in vs for vs in
                                                                                   variants.values()) else "")
        + "\n\n" + report.md_table(["precision", *(HEADS[v] for v in shown_heads), *columns], rows)
        + ("\n\nFits that failed (not run again in later rounds): " + "; ".join(
            f"`{backend}:{k.split('|')[0]}` {LABELS[k.split('|')[1]]}: `{e}`" for k, e in errors.items())
           if errors else "")
    )  # fmt: skip
    if hook_results:
        hook_rows = [[p, *(f"{h['us_per_step'][k]['median']:.1f}" for k in ("ours", "builtin")),
                      f"{report.fmt_ratio(h['ours/builtin'])} ({h['ours/builtin']['verdict']})"]
                     for p, h in hook_results.items()]  # fmt: skip
        body += (
            "\n\n## The plugin's own per-step hooks\n\n`convert_input(batch)`, entering and leaving "
            "`train_step_context()` and `convert_output(loss)`, called in one process without training, ours and the "
            "built-in in alternating blocks: microseconds per step.\n\n"
            + report.md_table(["precision", "ours µs", "built-in µs", "ours / built-in"], hook_rows)
        )

    def plot(plt: Any) -> Any:
        shown = [v for v in MIXED if any(v in e["wall"]["step_s"] for e in results.values())]
        width = 0.8 / len(shown)
        fig, ax = plt.subplots(figsize=(max(6.5, 1.5 * len(results)), 4.6))
        for i, v in enumerate(shown):
            cells = [(j, e["wall"]["step_s"][v]) for j, e in enumerate(results.values()) if v in e["wall"]["step_s"]]
            lo = [(s["median"] - s["p25"]) * 1e3 for _, s in cells]
            hi = [(s["p75"] - s["median"]) * 1e3 for _, s in cells]
            xs = [j + (i - (len(shown) - 1) / 2) * width for j, _ in cells]
            ax.bar(xs, [s["median"] * 1e3 for _, s in cells], width, yerr=[lo, hi], capsize=2, color=f"C{i}",
                   label=LABELS[v])  # fmt: skip
        ax.set_xticks(range(len(results)), list(results))
        ax.set_ylabel("median step time, ms\n(bars: IQR)")
        ax.set_title(f"{setup.split(' (')[0]}, {model}")
        report.legend_below(fig, ax, len(shown))
        return fig

    title = f"Per-step overhead: {backend}" + ("" if model == "mlp" else f", {model}")
    return report.write(out, name_of(backend, model), title, body, plot, start, quick=quick, machine=machine,
                        config=config, results=results, errors=errors, hooks=hook_results,
                        findings=findings)  # fmt: skip
