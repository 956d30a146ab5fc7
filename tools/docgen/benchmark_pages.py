"""Each benchmark result's page, generated from its JSON: ``<name>.md`` (the findings, the tables, the machine) and
``<name>.png`` (the chart), beside ``<name>.json``. The benchmarks (benchmarks/) measure and write the JSON; every
sentence, table and chart about a result is written here from its numbers, so no text changes a measured figure.

:func:`findings` gives what a result found, in sentences; the harness stores them in the JSON (``findings``) before
:func:`write` draws the page, and the index pages (:mod:`tools.docgen.benchmark_index`) and the site's summary
(:mod:`tools.docgen.benchmarks`) quote them. Needs matplotlib for the charts only (imported when one is drawn).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Page = tuple[str, str, Callable[[Any], Any]]  # title, body, plot(pyplot) -> figure


def fmt_ratio(r: dict[str, Any]) -> str:
    return f"{r['ratio']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]; p20 {r['p20']:.3f}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    unit, size = next(((u, s) for u, s in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)) if abs(n) >= s), ("B", 0))
    return f"{n / size:.2f} {unit}" if size else f"{int(n)} B"


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(cell, row)) + " |" for row in rows])


def legend_below(ax: Any, entries: int, columns: int = 3) -> None:
    """The axes' legend below the plot, outside it, in up to ``columns`` columns (readable at page width)."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=min(columns, max(entries, 1)), frameon=False)


def _nan(value: Any) -> Any:
    """JSON has no NaN: the harness writes null instead (a diverged run's loss), read back as NaN."""
    return math.nan if value is None else value


# ---- overhead-* ----------------------------------------------------------------------------------------------------
BLOCKS = "ours-blocks"
PLOTTED = ["ours", "ours-lowreduce", "builtin", "amp", "hand", "hand-lowreduce"]
SHOWN = ["ours", "builtin", "amp", "hand"]  # the step-time columns
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


def _overhead_findings(d: dict[str, Any]) -> list[str]:
    backend, results, errors = d["config"]["backend"], d["results"], d.get("errors") or {}
    findings = [f"{backend}:{p} {name} ({kind} time) = {fmt_ratio(r)}: {r['verdict']} beyond the 95% interval"
                for p, e in results.items() for kind in ("wall", "cpu") for name, r in e[kind]["ratios"].items()
                if name.startswith("ours") and r["verdict"] in ("slower", "faster")]  # fmt: skip
    return findings + [f"{backend}:{k.split('|')[0]} {LABELS[k.split('|')[1]]} failed: {e}" for k, e in errors.items()]


def _overhead_page(d: dict[str, Any]) -> Page:
    config, results, errors, hooks = d["config"], d["results"], d.get("errors") or {}, d.get("hooks") or {}
    backend, model, variants, skips = config["backend"], config["model"], config["variants"], config["builtin_skips"]
    rows, shown_heads = [], [v for v in SHOWN if any(v in vs for vs in variants.values())]
    columns = {k: c for k, c in COLUMNS.items() if any(c[1] in e[c[0]]["ratios"] for e in results.values())}
    for p, e in results.items():
        ms = [f"{s['median'] * 1e3:.2f} ({s['rel_iqr']:.0%})" if (s := e["wall"]["step_s"].get(v)) else
              "failed" if f"{p}|{v}" in errors else "-" for v in shown_heads]  # fmt: skip
        cells = [fmt_ratio(e[k]["ratios"][r]) if r in e[k]["ratios"] else "-" for k, r in columns.values()]
        rows.append([p, *ms, *cells])
    setup = "FSDP2 (fully_shard under ModelParallelStrategy)" if backend == "fsdp" else "DeepSpeed ZeRO-2"
    body = (
        f"{setup}, 2 processes, gloo, 1 thread each; {config['description']} "
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
        + "\n\n" + md_table(["precision", *(HEADS[v] for v in shown_heads), *columns], rows)
        + ("\n\nFits that failed (not run again in later rounds): " + "; ".join(
            f"`{backend}:{k.split('|')[0]}` {LABELS[k.split('|')[1]]}: `{e}`" for k, e in errors.items())
           if errors else "")
    )  # fmt: skip
    if hooks:
        hook_rows = [[p, *(f"{h['us_per_step'][k]['median']:.1f}" for k in ("ours", "builtin")),
                      f"{fmt_ratio(h['ours/builtin'])} ({h['ours/builtin']['verdict']})"]
                     for p, h in hooks.items()]  # fmt: skip
        body += (
            "\n\n## The plugin's own per-step hooks\n\n`convert_input(batch)`, entering and leaving "
            "`train_step_context()` and `convert_output(loss)`, called in one process without training, ours and the "
            "built-in in alternating blocks: microseconds per step.\n\n"
            + md_table(["precision", "ours µs", "built-in µs", "ours / built-in"], hook_rows)
        )

    def plot(plt: Any) -> Any:
        shown = [v for v in PLOTTED if any(v in e["wall"]["step_s"] for e in results.values())]
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
        legend_below(ax, len(shown))
        return fig

    return f"Per-step overhead: {backend}" + ("" if model == "mlp" else f", {model}"), body, plot


# ---- memory ----------------------------------------------------------------------------------------------------
MEMORY_HEADER = ["setup", "ranks", "precision", "params", "fp32 master", "grads", "optimizer state",
                 "other ZeRO buffers", "tracked total", "peak RSS delta", "peak RSS"]  # fmt: skip


def _memory_findings(d: dict[str, Any]) -> list[str]:
    by = {(r["setup"], r["precision"], r["world"]): sum(r["bytes"].values()) for r in d["results"]}
    return [f"{setup} {precision}: tracked bytes per rank with 2 ranks = {total / by[(setup, precision, 1)]:.2f} x "
            "those with 1 rank" for (setup, precision, world), total in by.items()
            if world == 2 and by.get((setup, precision, 1))]  # fmt: skip


def _memory_page(d: dict[str, Any]) -> Page:
    config, rows, roles = d["config"], d["results"], d["config"]["roles"]
    table = [[r["setup"], r["world"], r["precision"], *(fmt_bytes(r["bytes"][k]) for k in roles),
              *map(fmt_bytes, (sum(r["bytes"].values()), r["peak_rss_delta"], r["peak_rss"]))]
             for r in rows]  # fmt: skip
    t = config["task"]
    body = (
        f"Our plugins, model of {t['depth']} residual MLP blocks of width {t['width']}, AdamW, batch {t['batch']} per "
        f"rank, {config['steps']} steps, counted just before the last optimizer step; rank 0's figures (every "
        "rank's are in the JSON). Peak RSS includes the ~1 GiB that importing torch, Lightning and DeepSpeed costs.\n\n"
        + md_table(MEMORY_HEADER, table)
    )

    def plot(plt: Any) -> Any:
        precisions = list(dict.fromkeys(r["precision"] for r in rows))
        fig, axes = plt.subplots(1, len(precisions), figsize=(2.9 * len(precisions), 4.8), sharey=True, squeeze=False)
        for ax, precision in zip(axes[0], precisions, strict=True):
            sel = [r for r in rows if r["precision"] == precision]
            bottom = [0.0] * len(sel)
            for role in roles:
                vals = [r["bytes"][role] / 2**20 for r in sel]
                ax.bar(range(len(sel)), vals, bottom=bottom, label=role)
                bottom = [a + b for a, b in zip(bottom, vals, strict=True)]
            rss = [r["peak_rss_delta"] / 2**20 for r in sel]
            ax.plot(range(len(sel)), rss, "k_", markersize=14, label="peak RSS delta")
            ax.set_xticks(range(len(sel)), [f"{r['setup']} x{r['world']}" for r in sel], rotation=90)
            ax.set_title(precision)
        axes[0][0].set_ylabel("MiB on rank 0")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, frameon=False)
        fig.tight_layout()
        return fig

    return "Memory per rank", body, plot


# ---- memory-real -----------------------------------------------------------------------------------------------
SETUP_LABELS = {"ours-default": "ours, default units", "ours-whole": "ours, one unit", "builtin": "built-in, per block"}
FP8, FP8_BASE = "fp8-tensorwise", "bf16-mixed"  # the fp8 rows, and what fp8-tensorwise runs the rest in
CONVERTED = "Linear weights converted to float8"


def _memory_real_runs(d: dict[str, Any]) -> tuple[dict[str, str], dict[Any, Any], dict[str, dict[str, float]]]:
    """Each model of the setup comparison with its precision, the rows by (model, setup, precision), and per decoder
    of the fp8 rows the all-gather bytes per step measured under each of the two precisions that ran."""
    precision = {r["model"]: r["precision"] for r in d["config"]["runs"] if r["setup"] == "builtin"}
    by = {(r["model"], r["setup"], r["precision"]): r for r in d["results"]}
    measured = {}
    for m in d["breakdown"]:
        pairs = ((FP8, by.get((m, "ours-default", FP8))), (FP8_BASE, by.get((m, "ours-default", FP8_BASE))))
        measured[m] = {p: r["gathered_bytes_per_step"] for p, r in pairs if r and not r["error"]}
    return precision, by, measured


def _memory_real_findings(d: dict[str, Any]) -> list[str]:
    (precision, by, measured), findings = _memory_real_runs(d), []
    for m, p in precision.items():
        base = by.get((m, "ours-default", p))
        for setup in ("ours-whole", "builtin"):
            other = by.get((m, setup, p))
            if base and other and not base["error"] and not other["error"] and other["largest_gather_bytes"]:
                findings.append(
                    f"{m} {p}: largest all-gather, ours default units / {SETUP_LABELS[setup]} = "
                    f"{base['largest_gather_bytes'] / other['largest_gather_bytes']:.3f} "
                    f"({fmt_bytes(base['largest_gather_bytes'])} vs "
                    f"{fmt_bytes(other['largest_gather_bytes'])}); peak RSS delta "
                    f"{fmt_bytes(base['peak_rss_delta'])} vs {fmt_bytes(other['peak_rss_delta'])}"
                )
    for m, got in measured.items():
        if len(got) == 2 and got[FP8_BASE]:
            share = sum(g["parameters"] for g in d["breakdown"][m] if g["group"] == CONVERTED)
            findings.append(
                f"{m}: all-gather bytes per step, {FP8} / {FP8_BASE} = {got[FP8] / got[FP8_BASE]:.3f} "
                f"({fmt_bytes(got[FP8])} vs {fmt_bytes(got[FP8_BASE])}); "
                f"{share / d['config']['parameters'][m]:.1%} of its parameters are gathered in float8"
            )
    return findings + [f"{r['model']} {SETUP_LABELS[r['setup']]} {r['precision']} failed: {r['error']}"
                       for r in d["results"] if r["error"]]  # fmt: skip


def _breakdown_table(model: str, groups: list[dict[str, Any]], measured: dict[str, float]) -> str:
    total = {k: sum(g[k] for g in groups) for k in ("parameters", "bf16_bytes", "fp8_bytes")}
    rows = [[g["group"], f"{g['parameters']:,}", f"{g['parameters'] / total['parameters']:.1%}",
             fmt_bytes(g["bf16_bytes"]), fmt_bytes(g["fp8_bytes"]),
             f"{g['fp8_bytes'] / g['bf16_bytes']:.2f}"] for g in groups]  # fmt: skip
    rows.append(["total (from the groups)", f"{total['parameters']:,}", "100%", fmt_bytes(total["bf16_bytes"]),
                 fmt_bytes(total["fp8_bytes"]), f"{total['fp8_bytes'] / total['bf16_bytes']:.3f}"])  # fmt: skip
    if measured:
        rows.append(["measured (rank 0, all-gather outputs)", "", "", fmt_bytes(measured.get(FP8_BASE)),
                     fmt_bytes(measured.get(FP8)), ""])  # fmt: skip
    head = ["parameter group", "parameters", "share", f"{FP8_BASE} per step", f"{FP8} per step", "fp8 / bf16"]
    return f"\n\n### {model}: all-gather bytes per step by parameter group\n\n" + md_table(head, rows)


def _memory_real_page(d: dict[str, Any]) -> Page:
    config, rows, (_precision, _by, measured) = d["config"], d["results"], _memory_real_runs(d)
    table = [[r["model"], SETUP_LABELS[r["setup"]], r["precision"], fmt_bytes(r["largest_gather_bytes"]),
              r["gathers"], fmt_bytes(r["gathered_bytes_per_step"]), fmt_bytes(r["peak_rss_delta"]),
              r["error"] or ""] for r in rows]  # fmt: skip
    head = ["model", "setup", "precision", "largest all-gather", "all-gathers", "gathered per step", "peak RSS delta",
            "error"]  # fmt: skip
    body = (
        f"FSDP2, 2 processes on CPU, {config['steps']} steps per fit, batch {config['batch']} per rank; models: "
        + "; ".join(f"{config['descriptions'][m]} ({n:,} parameters)" for m, n in config["parameters"].items())
        + ". Rank 0's figures (every rank's are in the JSON).\n\n"
        + md_table(head, table)
        + "\n\nfp8-tensorwise gathers only the Linear weights the default `fp8_filter` converts in float8; the "
        "embedding, the norms and the model's first and last Linear (the lm_head) stay bfloat16 (torchtitan's "
        "float8 examples and Accelerate leave the output layer out too; `fp8_filter=` changes the choice). The groups' "
        "bytes are counted from the model; the measured line is the fits' all-gather outputs."
        + "".join(_breakdown_table(m, groups, measured[m]) for m, groups in d["breakdown"].items())
    )

    def plot(plt: Any) -> Any:
        fig, ax = plt.subplots(figsize=(8, 4.8))
        ok = [r for r in rows if not r["error"]]
        labels = [f"{r['model']} {SETUP_LABELS[r['setup']]}\n{r['precision']}" for r in ok]
        ax.barh(range(len(ok)), [r["largest_gather_bytes"] / 2**20 for r in ok], color="C0")
        ax.set_yticks(range(len(ok)), labels, fontsize=10)
        ax.set_xlabel("largest single all-gather, MiB (rank 0)")
        ax.invert_yaxis()
        fig.tight_layout()
        return fig

    return "Memory on real models", body, plot


# ---- numerics --------------------------------------------------------------------------------------------------
NUMERICS_HEADER = ["run", "final train loss (last 10)", "eval loss", "eval loss - 32-true",
                   "weights: rel. L2 from 32-true", "non-finite losses"]  # fmt: skip


def _numerics_findings(d: dict[str, Any]) -> list[str]:
    by, findings = {r["name"]: r for r in d["results"]}, []
    for low, half in (("bf16", "bf16"), ("16", "fp16")):
        a, b = by.get(f"fsdp:{low}-mixed, reduce fp32"), by.get(f"fsdp:{low}-mixed, reduce {half}")
        c = by.get(f"fsdp:{low}-mixed (Lightning built-in)")
        if a and b:
            findings.append(f"fsdp:{low}-mixed: |eval loss - 32-true| = {abs(_nan(a['eval_loss_diff_vs_32'])):.4f} "
                            f"with fp32 reduction, {abs(_nan(b['eval_loss_diff_vs_32'])):.4f} with {half} "
                            "reduction")  # fmt: skip
        if a and c:
            findings.append(f"fsdp:{low}-mixed, Lightning built-in on CPU (no autocast): |eval loss - 32-true| = "
                            f"{abs(_nan(c['eval_loss_diff_vs_32'])):.4f} vs ours "
                            f"{abs(_nan(a['eval_loss_diff_vs_32'])):.4f}")  # fmt: skip
    return findings


def _numerics_page(d: dict[str, Any]) -> Page:
    config, rows = d["config"], d["results"]
    table = [[r["name"], f"{_nan(r['final_train_loss']):.4f}", f"{_nan(r['eval_loss']):.4f}",
              f"{_nan(r['eval_loss_diff_vs_32']):+.4f}", f"{_nan(r['weight_rel_l2_vs_32']):.4f}",
              r["nonfinite_losses"]] for r in rows]  # fmt: skip
    t = config["task"]
    body = (
        f"A fixed teacher classification task ({t['depth']} residual MLP blocks of width {t['width']}, batch "
        f"{t['batch']} per rank, AdamW lr {t['lr']}), {config['steps']} steps in 2 processes on CPU; FSDP runs use "
        f"FSDP2, DeepSpeed runs ZeRO-2. Eval loss: fp32, final weights, {config['eval_samples']} held-out samples.\n\n"
        + md_table(NUMERICS_HEADER, table)
    )

    def plot(plt: Any) -> Any:
        fig, axes = plt.subplots(2, 1, figsize=(8, 9))
        for ax, backend in zip(axes, ("fsdp", "deepspeed"), strict=True):
            ref = next((r for r in rows if r["name"] == f"{backend}:32-true"), None)
            for r in (r for r in rows if r["backend"] == backend and ref):
                diff = [_nan(a) - _nan(b) for a, b in zip(r["losses"], ref["losses"], strict=True)]  # type: ignore[index]
                ax.plot(diff, "--" if r["variant"] == "builtin" else "-", lw=1, label=r["name"].split(":", 1)[1])
            ax.axhline(0, color="k", lw=0.5)
            ax.set_title(f"{backend}: training loss minus the 32-true run's")
            ax.set_xlabel("step")
            ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=10)
        return fig

    return "Numerics", body, plot


# ---- discovery -------------------------------------------------------------------------------------------------
def _discovery_findings(d: dict[str, Any]) -> list[str]:
    counts, wall, modules = d["config"]["counts"], d["results"]["process_wall_s"], d["results"]["modules"]
    lst, lo, hi = wall["precision-plugins list"], str(counts[0]), str(counts[-1])
    per_plugin = (lst[hi]["median"] - lst[lo]["median"]) / (counts[-1] - counts[0])
    return [f"precision-plugins list: {lst[lo]['median'] * 1e3:.0f} ms with {lo} dummy plugins, "
            f"{lst[hi]['median'] * 1e3:.0f} ms with {hi} ({per_plugin * 1e3:.2f} ms per installed plugin)",
            *(f"{k} imports {', '.join(modules[k]['heavy']) or 'none of torch, Lightning, DeepSpeed, numpy'}"
              for k in ("import precision_base", "precision-plugins list"))]  # fmt: skip


def _discovery_page(d: dict[str, Any]) -> Page:
    from tools.packages import packages

    counts, results, rows = d["config"]["counts"], d["results"], []
    modules = results["modules"]
    for k, s in results["process_wall_s"].items():
        ms = [f"{s[str(n)]['median'] * 1e3:.0f} ({s[str(n)]['iqr'] * 1e3:.0f})" if str(n) in s else "-" for n in counts]
        vs = fmt_ratio(results["vs_pass"][k]) if k in results["vs_pass"] else "-"
        rows.append([f"`{k}`", *ms, vs, modules[k]["modules"], ", ".join(modules[k]["heavy"]) or "none"])
    header = ["command", *(f"{n} dummies: ms" for n in counts), "/ `python -c pass`", "modules", "heavy modules"]
    plugins = " and ".join(p.dist for p in packages().values() if p.backend)
    body = (
        "Fresh-interpreter wall time per command, timed by `pyperf command` (warm-up run first), in venvs with 0-100 "
        f"dummy plugin distributions installed next to {plugins}. Cells: median ms (IQR); "
        "ratio of medians to `python -c pass` with a 95% bootstrap interval; modules each command imports.\n\n"
        + md_table(header, rows)
    )

    def plot(plt: Any) -> Any:
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 8.5))
        labels = list(results["process_wall_s"])
        ax1.barh(range(len(labels)), [results["process_wall_s"][k]["0"]["median"] * 1e3 for k in labels])
        ax1.set_yticks(range(len(labels)), labels)
        ax1.set_xscale("log")
        ax1.set_xlabel("fresh-interpreter wall time, ms (no dummy plugins)")
        for label in ("precision-plugins list", "import precision_base", "python -c pass"):
            per = results["process_wall_s"][label]
            ax2.plot([max(int(n), 0.5) for n in per], [s["median"] * 1e3 for s in per.values()], "o-", label=label)
        ax2.set_xscale("log")
        ax2.set_xlabel("installed dummy plugin distributions (0 drawn at 0.5)")
        ax2.set_ylabel("ms")
        ax2.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
        fig.tight_layout()
        return fig

    return "Discovery cost", body, plot


# ---- audit -----------------------------------------------------------------------------------------------------
AUDIT = """The precision audit's cost: an audited step against a normal one, and the steps after the audit against a run
without it, 2 processes on CPU (FSDP2 ``fsdp:bf16-mixed`` and DeepSpeed ZeRO-2 ``deepspeed:bf16-mixed``, the
benchmarks' tiny Llama, ``precision_testsupport.architectures``).

One 2-rank launch per backend. Each round runs two fresh fits of ``steps`` steps in a shuffled order (the same in
both ranks): ``audit`` (``PrecisionAudit(steps=1)``: step 0 audited, every hook removed after it) and ``plain`` (no
audit). Step times are wall-clock from the batch's start to its end (the slowest rank's). Compared side by side:
step 0 of ``audit`` with step 0 of ``plain`` (the audited step; both include the first step's lazy set-up) and
steps 1.. of ``audit`` with steps 1.. of ``plain`` (once the audit is over, a run should be as fast as without it)."""


def _audit_findings(d: dict[str, Any]) -> list[str]:
    return [f"{b}: audited step {r['audited_step']['ratio']:.2f}x a normal step (the audit's budget is 3x); "
            f"steps after the audit {r['after_audit']['ratio']:.3f}x a run without it ({r['after_audit']['verdict']})"
            for b, r in d["results"].items()]  # fmt: skip


def _audit_page(d: dict[str, Any]) -> Page:
    config, results, raw = d["config"], d["results"], d["raw"]
    rows = [[f"{b}:bf16-mixed", fmt_ratio(r["audited_step"]), fmt_ratio(r["after_audit"])] for b, r in results.items()]
    body = (
        f"{AUDIT}\n\n{config['rounds']} rounds, {config['steps']} steps per fit, batch "
        f"{config['batch']} per rank. Ratios: median over all rounds [95% bootstrap interval]; p20 ratio.\n\n"
        + md_table(["backend", "audited step / normal step", "steps after the audit / run without it"], rows)
    )

    def plot(plt: Any) -> Any:
        fig, grid = plt.subplots(1, len(results), figsize=(8, 4), squeeze=False)
        axes = list(grid[0])
        for ax, backend in zip(axes, results, strict=True):
            for variant, style in (("audit", "-o"), ("plain", "--s")):
                for i, times in enumerate(raw[backend][variant]):
                    ax.plot([t * 1000 for t in times], style, lw=1, ms=3, alpha=0.7,
                            color="C0" if variant == "audit" else "C1", label=variant if i == 0 else None)  # fmt: skip
            ax.set_title(f"{backend}:bf16-mixed")
            ax.set_xlabel("step")
            ax.set_ylabel("step time (ms)")
            ax.set_yscale("log")
        legend_below(axes[0], 2)
        return fig

    return "Precision audit cost", body, plot


# ---- gpu -------------------------------------------------------------------------------------------------------
def _label(r: dict[str, Any]) -> str:
    if r["kind"] == "fp8":
        return f"{r['spec']}, compile {'on' if r['compile'] else 'off'}"
    return f"{r['setup']} {r['precision']} {r['variant']} (round {r['round'] + 1})"


def _gpu_findings(d: dict[str, Any]) -> list[str]:
    results = d["results"]
    findings = [f"{k.replace('|', ' ')} ours/builtin = {fmt_ratio(r)}: {r['verdict']}"
                for k, e in results["fits"].items() if (r := e["ratios"].get("ours/builtin"))]  # fmt: skip
    return findings + [f"{_label(r)}: {r['tokens_per_s']:,.0f} tokens/s" + (f", {r['tokens_per_s_vs_bf16_mixed']:.3f}x "
                       "bf16-mixed" if r["tokens_per_s_vs_bf16_mixed"] else "") for r in results["fp8"]]  # fmt: skip


def _gpu_page(d: dict[str, Any]) -> Page:
    results, config, rows = d["results"], d["config"], []
    for key, e in results["fits"].items():
        for v, x in e["variants"].items():
            r = e["ratios"].get("ours/builtin") if v == "ours" else None
            mem = e.get("memory_ours/builtin") if v == "ours" else None
            rows.append([*key.split("|"), v, f"{x['step_s']['median'] * 1e3:.2f}", f"{x['tokens_per_s']:,.0f}",
                         fmt_bytes(max(x["peak_memory_bytes"])), f"{x['final_loss'][-1]:.4f}",
                         fmt_ratio(r) + f" ({r['verdict']})" if r else "", f"{mem:.3f}" if mem else ""])  # fmt: skip
    fp8_rows = [[r["spec"], "on" if r["compile"] else "off", f"{r['parameters']:,}", r["converted_linears"],
                 f"{r['tokens_per_s']:,.0f}", "-" if r["mfu"] is None else f"{r['mfu']:.1%}",
                 "-" if r["tokens_per_s_vs_bf16_mixed"] is None else f"{r['tokens_per_s_vs_bf16_mixed']:.3f}",
                 fmt_bytes(r["peak_memory_bytes"]),
                 "-" if r["memory_vs_bf16_mixed"] is None else f"{r['memory_vs_bf16_mixed']:.3f}"]
                for r in results["fp8"]]  # fmt: skip
    m, m8 = config["plan"]["model"], config["plan"]["fp8_model"]
    body = (
        f"{d['machine'].get('gpu')}; one GPU. Fits: TinyGPT {m}, {config['plan']['steps']} steps after "
        f"{config['plan']['warmup']} warm-up steps per fit, {config['rounds']} interleaved round(s). Step time: "
        "median ms; peak: CUDA memory allocated; loss: after the last step.\n\n"
        + (md_table(["setup", "precision", "variant", "step ms", "tokens/s", "peak memory", "final loss",
                     "step time ours / built-in", "peak memory ours / built-in"], rows) if rows
           else "No fit of this section completed.")
        + f"\n\n## FP8 against bf16-mixed\n\nTinyGPT {m8}, {config['plan']['fp8_steps']} steps after "
        f"{config['plan']['warmup']} warm-up; `torch.compile` on each block when on; MFU at "
        f"{config['peak_tflops']} TFLOP/s.\n\n"
        + (md_table(["spec", "compile", "parameters", "fp8 Linears", "tokens/s", "MFU", "vs bf16-mixed",
                     "peak memory", "vs bf16-mixed"], fp8_rows) if fp8_rows
           else f"Not run: {config.get('fp8_problem') or 'no fp8 fit completed'}.")
        + "".join(f"\n\nFailed: {_label(r)}: {r['error']}" for r in results["errors"])
        + ("\n\nNot run (time budget spent): " + ", ".join(_label(r) for r in results["skipped"])
           if results["skipped"] else "")
    )  # fmt: skip

    def plot(plt: Any) -> Any:
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 9))
        keys = list(results["fits"])
        for j, v in enumerate(("ours", "builtin")):
            xs = [i for i, k in enumerate(keys) if v in results["fits"][k]["variants"]]
            ys = [results["fits"][keys[i]]["variants"][v]["step_s"]["median"] * 1e3 for i in xs]
            ax1.bar([x + (j - 0.5) * 0.4 for x in xs], ys, 0.4, color=f"C{j}", label=v)
        ax1.set_xticks(range(len(keys)), [k.replace("|", " ") for k in keys], rotation=90)
        ax1.set_ylabel("median step time, ms")
        ax1.legend(frameon=False)
        labels = [_label(r) for r in results["fp8"]]
        ax2.barh(range(len(labels)), [r["tokens_per_s"] for r in results["fp8"]])
        ax2.set_yticks(range(len(labels)), labels)
        ax2.set_xlabel("tokens/s, ~1B-parameter TinyGPT")
        fig.tight_layout()
        return fig

    return "GPU: one CUDA GPU", body, plot


# ---- every result ----------------------------------------------------------------------------------------------
KINDS: dict[str, tuple[Callable[[dict[str, Any]], list[str]], Callable[[dict[str, Any]], Page]]] = {
    "overhead": (_overhead_findings, _overhead_page), "memory": (_memory_findings, _memory_page),
    "memory-real": (_memory_real_findings, _memory_real_page), "numerics": (_numerics_findings, _numerics_page),
    "discovery": (_discovery_findings, _discovery_page), "audit": (_audit_findings, _audit_page),
    "gpu": (_gpu_findings, _gpu_page),
}  # fmt: skip
"""Benchmark (``overhead-*``: ``overhead``) -> what its result found, and its page."""


def _kind(d: dict[str, Any]) -> tuple[Callable[[dict[str, Any]], list[str]], Callable[[dict[str, Any]], Page]]:
    name = str(d["benchmark"])
    return KINDS["overhead" if name.startswith("overhead-") else name]


def findings(d: dict[str, Any]) -> list[str]:
    """What result ``d`` (a result file's content) found, one sentence each, from its numbers."""
    return _kind(d)[0](d)


def _machine(d: dict[str, Any]) -> list[str]:
    m = d["machine"]
    dirty = m.get("uncommitted_measured_files")
    return [
        f"CPU: {m['cpu_model']} ({m['usable_cpus']} usable CPUs; flags: {', '.join(m['cpu_flags']) or 'none of note'})",
        f"memory: {m['memory_total_bytes'] / 2**30:.1f} GiB",
        "versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v),
        f"commit {str(m['git_commit'])[:10]}, {m['time_utc']}; load average (1, 5, 15 min) at start "
        f"{m['load_average_1_5_15']}, at end {m['load_average_at_end']} on {m['usable_cpus']} CPUs",
        *([f"uncommitted changes to {len(dirty)} measured file(s) at the start: {', '.join(dirty[:5])}"
           + (", ... (all in the JSON)" if len(dirty) > 5 else "")] if dirty else []),
        f"command: `{m['command']}`; duration {d['duration_s']:.0f} s",
    ]  # fmt: skip


def markdown(d: dict[str, Any]) -> str:
    """The page of result ``d`` (a result file's content): title, body, findings, chart, machine."""
    title, body, _plot = _kind(d)[1](d)
    quick = " (quick smoke run: too few samples to quote)" if d.get("quick") else ""
    found = "".join(f"\n- {f}" for f in d.get("findings", []))
    return (f"# {title}\n\n{body.strip()}\n{found}\n\n![{title}]({d['benchmark']}.png)\n\n## Machine{quick}\n\n"
            + "\n".join(f"- {f}" for f in _machine(d)) + "\n")  # fmt: skip


def write(out: Path, name: str) -> list[Path]:
    """Write ``<name>.md`` (:func:`markdown`) and ``<name>.png`` (its chart) in ``out`` from ``<name>.json`` there;
    return their paths."""
    d = json.loads((out / f"{name}.json").read_text())
    (out / f"{name}.md").write_text(markdown(d))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # figures at most ~8 in wide, shown at the page's ~800 px width: text stays at 11-13 pt there
    with plt.rc_context({"font.size": 12, "axes.titlesize": 13, "axes.labelsize": 12, "legend.fontsize": 11,
                         "xtick.labelsize": 11, "ytick.labelsize": 11}):  # fmt: skip
        fig = _kind(d)[1](d)[2](plt)
        fig.savefig(out / f"{name}.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return [out / f"{name}.md", out / f"{name}.png"]
