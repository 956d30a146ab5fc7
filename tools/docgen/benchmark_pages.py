"""Each benchmark result's page, generated from its JSON: ``<name>.md`` (the tables, what the run found, the chart,
the machine) and ``<name>.png`` (the chart), beside ``<name>.json``. The benchmarks (benchmarks/) measure and write the
JSON; every sentence, table and chart about a result is written here from its numbers, so no text changes a measured
figure, and a page can be drawn again from its JSON at any time (:func:`write`; every result of a folder:
``python -m tools.docgen.benchmark_index --redraw FOLDER``).

A page reads the same way for every benchmark: the setup, what each term means (:func:`reading`), the few columns a
user needs, each ratio in one cell as ``0.83 [0.66, 1.17] same`` (:func:`fmt_ratio`), everything else in blocks the
reader opens (:func:`details`), then what the run found, each finding shown on the chart or naming its table.

:func:`findings` gives what a result found, in sentences; the harness stores them in the JSON (``findings``) at save
time, but the pages, the index pages (:mod:`tools.docgen.benchmark_index`) and the site's summary
(:mod:`tools.docgen.benchmarks`) compute them again from the numbers, so a redrawn page and the summaries use the
current wording. Needs matplotlib for the charts only (imported when one is drawn).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Page = tuple[str, str, Callable[[Any], Any]]  # title, body, plot(pyplot) -> figure

DPI = 150
"""The charts' resolution: a chart :data:`WIDTH` wide is ~1130 px, sharp where the page shows it :data:`PAGE_PX` wide
(and on a screen of twice the pixel density)."""
PAGE_PX = 688
"""The width in CSS px at which the site shows a chart: mkdocs-material's text column with both sidebars (a 61rem grid
less two 12.1rem sidebars and 1.2rem margins, at 20 px a rem). Wider charts are scaled down to it, their text too."""
WIDTH = 7.5
"""The widest a chart is drawn, in inches: text of :data:`FONTS` shows at ``size * PAGE_PX / (96 * width)`` pt on the
page, about 9.5 pt for 10 pt tick labels (:func:`shown_pt`)."""
FONTS: dict[str, Any] = {
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 10, "xtick.labelsize": 10,
    "ytick.labelsize": 10, "figure.constrained_layout.use": True,
}  # fmt: skip
"""matplotlib settings for every chart: 10-11 pt text on figures at most :data:`WIDTH` wide, laid out so that nothing
(a legend below the axes included) overlaps."""


def shown_pt(size_pt: float, width_in: float, dpi: float = DPI) -> float:
    """How large text of ``size_pt`` on a chart ``width_in`` wide, saved at ``dpi``, shows on the page, in CSS pt (72
    an inch of 96 CSS px): the page shows a chart one CSS px a pixel, scaled down to :data:`PAGE_PX` when wider."""
    return size_pt * min(dpi, PAGE_PX / width_in) / 96


# ---- how every page writes a ratio and explains its terms ---------------------------------------------------------
VERDICT_WORDS = {"slower": "slower", "faster": "faster", "same within spread": "same",
                 "same within spread (rounds disagree)": "rounds disagree"}  # fmt: skip
"""A ratio's verdict as the harness records it (``benchmarks/bench/report.py``, ``ratio``) -> its word in a cell."""


def verdict_word(r: dict[str, Any]) -> str:
    return VERDICT_WORDS.get(r["verdict"], str(r["verdict"]))


def _digits(r: dict[str, Any], digits: int | None) -> int:
    """Decimals for ratio ``r``: ``digits``, or 2 (1 from 10, 0 from 100); one more where an interval that excludes 1
    would otherwise print an end as 1."""
    lo, hi = r["ci95"]
    if digits is None:
        big = max(abs(r["ratio"]), abs(lo), abs(hi))
        digits = 0 if big >= 100 else 1 if big >= 10 else 2
    if (lo > 1 or hi < 1) and f"{1:.{digits}f}" in (f"{lo:.{digits}f}", f"{hi:.{digits}f}"):
        digits += 1
    return digits


def fmt_ratio(r: dict[str, Any], digits: int | None = None) -> str:
    """One ratio as every table cell and sentence shows it: the ratio of medians, its 95% interval and the verdict in
    a word, ``0.83 [0.66, 1.17] same`` (:data:`VERDICT_WORDS`); the p20 ratio is :func:`fmt_p20`, in its own cell."""
    n = _digits(r, digits)
    return f"{r['ratio']:.{n}f} [{r['ci95'][0]:.{n}f}, {r['ci95'][1]:.{n}f}] {verdict_word(r)}"


def fmt_p20(r: dict[str, Any], digits: int | None = None) -> str:
    """The ratio of the 20th percentiles of the ratio ``r``, with the decimals of :func:`fmt_ratio`."""
    return f"{r['p20']:.{_digits(r, digits)}f}"


RATIO = "**A / B** (a ratio): A's median divided by B's. For times, below 1 A is faster, above 1 slower."
INTERVAL = ("**[low, high]** after a ratio: its 95% bootstrap interval. The measured samples are drawn again at random "
            "2,000 times and the ratio recomputed each time; 95% of those ratios fall inside.")  # fmt: skip
VERDICTS = ("**faster** / **slower**: the whole interval is below / above 1 (and, where the samples come in rounds, "
            "every round's own ratio is on that side too). **same**: the interval includes 1: no difference this run "
            "can show. **rounds disagree**: the interval is on one side of 1, but at least one round's ratio is on "
            "the other side, so no difference is claimed.")  # fmt: skip
P20 = ("**p20**: the ratio of the 20th percentiles, the fast end of each distribution. A busy machine only ever adds "
       "time, so it moves p20 less than the median.")  # fmt: skip
CPU_TIME = ("**CPU time**: the time the process ran on a CPU, leaving out waiting for a CPU or for the other rank: "
            "steadier than **wall** (clock) time on a shared machine.")  # fmt: skip
IQR = ("**IQR**: the interquartile range, the spread of the middle half of the samples (75th minus 25th percentile); "
       "a % is the IQR as a share of the median.")  # fmt: skip
ROUND = ("**round**: every variant runs one fresh fit per round, in a shuffled order; the rounds interleave the "
         "variants in time, so a busy spell of the machine touches all of them.")  # fmt: skip
PEAK_RSS = ("**peak RSS**: the process's resident memory at its highest (Linux's `VmHWM`); **peak RSS delta**: that "
            "peak minus the resident memory just before the fit.")  # fmt: skip


def reading(*terms: str) -> str:
    """What a page's terms mean, one short line each (``RATIO``, ``INTERVAL``, ... or the page's own), once per page,
    ahead of the tables that use them."""
    return "How to read the tables:\n\n" + "\n".join(f"- {t}" for t in terms)


def details(title: str, body: str) -> str:
    """``body`` (tables, text) in a collapsed block the reader opens (pymdownx.details: ``??? note``), right below
    the table it adds to."""
    return f'??? note "{title}"\n\n' + "\n".join(f"    {line}" if line else "" for line in body.strip().splitlines())


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


def legend_below(where: Any, entries: int, columns: int = 3) -> None:
    """The legend below the plot, outside the data, in up to ``columns`` columns (readable at page width): an axes'
    own legend under its tick labels and x label, or, for a figure, one legend of its first axes' entries under all
    its axes. Every chart draws its legend with this (the figures use constrained layout, :data:`FONTS`, which makes
    room for it)."""
    from matplotlib import rcParams
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties

    ncol = min(columns, max(entries, 1))
    if isinstance(where, Figure):
        handles, labels = where.axes[0].get_legend_handles_labels()
        where.legend(handles, labels, loc="outside lower center", ncol=ncol, frameon=False)
        return
    fig = where.figure
    fig.draw_without_rendering()  # the tick labels' and the x label's height under the axes, in pixels
    under = where.get_window_extent().y0 - where.get_tightbbox().y0
    size = FontProperties(size=rcParams["legend.fontsize"]).get_size_in_points()
    pad = under * 72 / fig.dpi / size + 0.4  # in legend font sizes
    where.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), borderaxespad=pad, ncol=ncol, frameon=False)


def _plain_log(axis: Any, minor: bool = False) -> None:
    """A log-scale axis's tick labels as plain numbers (40, 100, 1000), not powers of ten."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(lambda v, _pos: f"{v:g}") if minor else NullFormatter())


def _nan(value: Any) -> Any:
    """JSON has no NaN: the harness writes null instead (a diverged run's loss), read back as NaN."""
    return math.nan if value is None else value


# ---- overhead-* ----------------------------------------------------------------------------------------------------
BLOCKS = "ours-blocks"
PLOTTED = ["ours", "ours-lowreduce", "builtin", "amp", "hand", "hand-lowreduce"]
SHOWN = ["ours", "builtin", "hand"]  # the main table's step-time columns
COLORS = {"ours": "C0", "ours-lowreduce": "C9", "builtin": "C1", "amp": "C2", "hand": "C3", "hand-lowreduce": "C6"}
HEADLINE = ("ours/builtin", "ours/hand")
"""The main table's ratios (CPU time) and the chart's lower panel (CPU and wall time)."""
RATIOS = {"ours/builtin": "ours / built-in", "ours/hand": "ours / hand-written", "ours/amp": "ours / Lightning AMP",
          "amp/hand": "Lightning AMP / hand-written", "builtin/hand": "built-in / hand-written",
          "ours-lowreduce/builtin": "ours, reduce in compute dtype / built-in",
          f"{BLOCKS}/builtin": "ours, FSDP2Strategy block set / built-in"}  # fmt: skip
"""Every ratio an overhead result holds -> its name on the page, in the order the pages list them."""
LABELS = {"ours": "ours", "ours-lowreduce": "ours, reduce in compute dtype", "builtin": "Lightning built-in",
          "amp": "Lightning AMP (MixedPrecision, CPU autocast)", "hand": "hand-written loop",
          "hand-lowreduce": "hand-written, reduce in compute dtype",
          BLOCKS: "ours, FSDP2Strategy(auto_wrap_policy={block class})"}  # fmt: skip
HEADS = {"ours": "ours ms", "builtin": "built-in ms", "hand": "hand-written ms"}
SHORT = {"builtin": "built-in", "amp": "Lightning AMP", "hand": "hand-written", "ours-lowreduce": "ours, low reduce",
         "hand-lowreduce": "hand-written, low reduce", BLOCKS: "ours, block set"}  # fmt: skip
TIME = {"wall": "wall time", "cpu": "CPU time"}


def _ordered(ratios: Any) -> list[str]:
    return [k for k in RATIOS if k in ratios] + sorted(k for k in ratios if k not in RATIOS)


def _with_p20(r: dict[str, Any] | None) -> tuple[str, str]:
    return (fmt_ratio(r), fmt_p20(r)) if r else ("-", "-")


def _overhead_findings(d: dict[str, Any]) -> list[str]:
    backend, results, errors = d["config"]["backend"], d["results"], d.get("errors") or {}
    where = {("cpu", k): "chart, lower panel; main table" for k in HEADLINE} | {
        ("wall", k): "chart, lower panel; All ratios table" for k in HEADLINE
    }
    findings = [f"{backend}:{p} {name} ({TIME[kind]}) = {fmt_ratio(r)} "
                f"({where.get((kind, name), 'All ratios table')})"
                for p, e in results.items() for kind in ("wall", "cpu") for name, r in e[kind]["ratios"].items()
                if name.startswith("ours") and r["verdict"] in ("slower", "faster")]  # fmt: skip
    failed = [f"{backend}:{k.split('|')[0]} {LABELS[k.split('|')[1]]} failed (no bar in the chart): {e}"
              for k, e in errors.items()]  # fmt: skip
    if not findings and any(e["wall"]["ratios"] for e in results.values()):
        findings = [f"{backend}: no ratio of ours is faster or slower at any precision: each is the same within its "
                    "interval, or its rounds disagree (main table and All ratios table)"]  # fmt: skip
    return findings + failed


def _overhead_page(d: dict[str, Any]) -> Page:
    config, results, errors, hooks = d["config"], d["results"], d.get("errors") or {}, d.get("hooks") or {}
    backend, model, variants, skips = config["backend"], config["model"], config["variants"], config["builtin_skips"]
    shown = [v for v in SHOWN if any(v in vs for vs in variants.values())]
    headline = [k for k in HEADLINE if any(k in e["cpu"]["ratios"] for e in results.values())]
    rows, every, times = [], [], []
    for p, e in results.items():
        ms = [f"{s['median'] * 1e3:.2f}" if (s := e["wall"]["step_s"].get(v)) else
              "failed" if f"{p}|{v}" in errors else "-" for v in shown]  # fmt: skip
        cells = [fmt_ratio(e["cpu"]["ratios"][k]) if k in e["cpu"]["ratios"] else "-" for k in headline]
        rows.append([f"{p} †" if p in skips else p, *ms, *cells])
        for k in _ordered(e["wall"]["ratios"] | e["cpu"]["ratios"]):
            every.append([p, RATIOS.get(k, k), *_with_p20(e["cpu"]["ratios"].get(k)),
                          *_with_p20(e["wall"]["ratios"].get(k))])  # fmt: skip
        for v, w in e["wall"]["step_s"].items():
            c = e["cpu"]["step_s"].get(v)
            times.append([p, LABELS.get(v, v), f"{w['median'] * 1e3:.2f}", f"{w['rel_iqr']:.0%}",
                          f"{c['median'] * 1e3:.2f}" if c else "-", f"{c['rel_iqr']:.0%}" if c else "-"])  # fmt: skip
    setup = "FSDP2 (fully_shard under ModelParallelStrategy)" if backend == "fsdp" else "DeepSpeed ZeRO-2"
    t = config["task"]
    net = f"{t['depth']} residual MLP blocks of width {t['width']}" if model == "mlp" else f"the {model} model"
    described = config.get("description") or f"{net}, batch {t['batch']} per rank"  # measured before it was recorded
    body = (
        f"{setup}, 2 processes, gloo, 1 thread each; {described} "
        f"({config['parameters']:,} parameters), AdamW. {config['rounds']} interleaved rounds x {config['steps']} "
        f"steps per variant ({config['warmup']} warm-up step{'' if config['warmup'] == 1 else 's'} of every fit "
        "dropped), each rank pinned to a CPU of its own. A step is the slowest rank's time from one batch's start to "
        "the next. The hand-written loop does the work ours does (autocast and a `GradScaler` for `16-mixed`, fp32 "
        "reduction for `*-mixed`).\n\n"
        + reading("**ms**: the median step time (wall clock) in milliseconds, over every round.",
                  RATIO + " The main table's ratios divide CPU time per step.", INTERVAL, VERDICTS, CPU_TIME, P20,
                  IQR, ROUND)
        + "\n\n" + md_table(["precision", *(HEADS[v] for v in shown), *(f"{RATIOS[k]}, CPU time" for k in headline)],
                            rows)
        + ("\n\n† Where the built-in does less work than ours on a CPU: "
           + "; ".join(f"`{p}`: {s}" for p, s in skips.items()) + ". There, ours / built-in compares two different "
           "computations; ours / Lightning AMP (Lightning's `MixedPrecision` plugin with `device=\"cpu\"`: CPU "
           "autocast and a `GradScaler` for `16-mixed`, under a user's fp32-reducing `fully_shard` policy; in All "
           "ratios) compares the same work in the same Lightning loop, and ours / hand-written the same work against "
           "plain torch, without Lightning's per-step loop." if skips else "")
        + ("\n\nOurs, FSDP2Strategy block set (in All ratios): ours without `configure_model`, under "
           "`FSDP2Strategy(auto_wrap_policy={<the decoder's block class>})`, which makes exactly those units plus the "
           "LightningModule (its step methods gather the embeddings, final norm and head), against the built-in "
           "sharding the same blocks, then the model, in `configure_model`." if any(BLOCKS in vs for vs in
                                                                                   variants.values()) else "")
        + ("\n\nFits that failed (not run again in later rounds): " + "; ".join(
            f"`{backend}:{k.split('|')[0]}` {LABELS[k.split('|')[1]]}: `{e}`" for k, e in errors.items())
           if errors else "")
        + "\n\n" + details("All ratios: CPU and wall time, with p20", md_table(
            ["precision", "ratio", "CPU time", "CPU time p20", "wall time", "wall time p20"], every)
            if every else "No ratio: only ours ran.")
        + "\n\n" + details("Step times of every variant: median and IQR",
                           md_table(["precision", "variant", "wall ms", "wall IQR", "CPU ms", "CPU IQR"], times))
    )  # fmt: skip
    if hooks:
        hook_rows = [[p, *(f"{h['us_per_step'][k]['median']:.1f}" for k in ("ours", "builtin")),
                      fmt_ratio(h["ours/builtin"])] for p, h in hooks.items()]  # fmt: skip
        spread = [[p, fmt_p20(h["ours/builtin"]), f"{h['us_per_step']['ours']['rel_iqr']:.0%}",
                   f"{h['us_per_step']['builtin']['rel_iqr']:.0%}"] for p, h in hooks.items()]  # fmt: skip
        body += (
            "\n\n## The plugin's own per-step hooks\n\n`convert_input(batch)`, entering and leaving "
            "`train_step_context()` and `convert_output(loss)`, called in one process without training, ours and the "
            "built-in in alternating blocks: median microseconds (µs) per step.\n\n"
            + md_table(["precision", "ours µs", "built-in µs", "ours / built-in"], hook_rows)
            + "\n\n" + details("Hooks: p20 and IQR", md_table(["precision", "ours / built-in p20", "ours IQR",
                                                               "built-in IQR"], spread))
        )  # fmt: skip

    def plot(plt: Any) -> Any:
        drawn = [v for v in PLOTTED if any(v in e["wall"]["step_s"] for e in results.values())]
        wide = min(WIDTH, max(6.5, 1.5 * len(results)))
        fig, (ax, ax2) = plt.subplots(2, 1, figsize=(wide, 8.4), height_ratios=(3, 2))
        width = 0.8 / max(len(drawn), 1)
        for i, v in enumerate(drawn):
            cells = [(j, e["wall"]["step_s"][v]) for j, e in enumerate(results.values()) if v in e["wall"]["step_s"]]
            lo = [(s["median"] - s["p25"]) * 1e3 for _, s in cells]
            hi = [(s["p75"] - s["median"]) * 1e3 for _, s in cells]
            xs = [j + (i - (len(drawn) - 1) / 2) * width for j, _ in cells]
            ax.bar(xs, [s["median"] * 1e3 for _, s in cells], width, yerr=[lo, hi], capsize=2, color=COLORS[v],
                   label=LABELS[v])  # fmt: skip
        for j, (p, e) in enumerate(results.items()):
            if missing := [SHORT.get(v, v) for v in variants.get(p, []) if v not in e["wall"]["step_s"]]:
                ax.annotate("failed:\n" + "\n".join(missing) if e["wall"]["step_s"] else "every fit\nfailed",
                            (j, 0), xytext=(0, 4), textcoords="offset points", ha="center", va="bottom")  # fmt: skip
        ax.set_xticks(range(len(results)), list(results))
        ax.set_xlim(-0.5, len(results) - 0.5)
        ax.set_ylabel("median step time, ms\n(bars: IQR)")
        ax.set_title(f"{setup.split(' (')[0]}, {model}: step time (wall)")
        legend_below(ax, len(drawn), 2)
        ran = list(results.values())
        series = [(k, t) for k in HEADLINE for t in ("cpu", "wall") if any(k in e[t]["ratios"] for e in ran)]
        for i, (k, t) in enumerate(series):  # CPU time filled, wall time hollow; in the compared variant's color
            pts = [(j, e[t]["ratios"][k]) for j, e in enumerate(ran) if k in e[t]["ratios"]]
            offset, color = (i - (len(series) - 1) / 2) * 0.8 / len(series), COLORS[k.split("/")[1]]
            for claimed in (True, False):  # a verdict of faster or slower in full colour, no difference claimed pale
                sel = [(j, r) for j, r in pts if (r["verdict"] in ("faster", "slower")) == claimed]
                if not sel and not claimed:
                    continue
                ys = [r["ratio"] for _, r in sel]
                ax2.errorbar([j + offset for j, _ in sel], ys,
                             yerr=[[y - r["ci95"][0] for y, (_, r) in zip(ys, sel, strict=True)],
                                   [r["ci95"][1] - y for y, (_, r) in zip(ys, sel, strict=True)]],
                             fmt="o" if t == "cpu" else "s", color=color, mfc=color if t == "cpu" else "white",
                             capsize=3, alpha=1 if claimed else 0.35,
                             label=f"{RATIOS[k]}, {TIME[t]}" if claimed else None)  # fmt: skip
        ax2.axhline(1, color="k", lw=0.8, ls="--")
        ax2.set_xticks(range(len(results)), list(results))
        ax2.set_xlim(ax.get_xlim())
        ax2.set_ylabel("ratio, 95% interval\n(below 1: ours faster)")
        ax2.set_title("ours / the others (pale: same or rounds disagree)")
        if series:
            legend_below(ax2, len(series), 2)
        else:
            ax2.text(0.5, 0.5, "no ratio: only ours ran", transform=ax2.transAxes, ha="center", va="center")
        return fig

    return f"Per-step overhead: {backend}" + ("" if model == "mlp" else f", {model}"), body, plot


# ---- memory ----------------------------------------------------------------------------------------------------
ROLES = {"params": "params", "master": "fp32 master", "grads": "grads", "optimizer_state": "optimizer state",
         "other": "other ZeRO buffers"}  # fmt: skip
"""The memory result's roles -> their names on the page."""


def ranks(n: int) -> str:
    return f"{n} rank" + ("" if n == 1 else "s")


def _memory_by(d: dict[str, Any]) -> dict[tuple[str, str], dict[int, dict[str, Any]]]:
    """The rows by (setup, precision), then by number of ranks."""
    by: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in d["results"]:
        by.setdefault((r["setup"], r["precision"]), {})[r["world"]] = r
    return by


def _memory_findings(d: dict[str, Any]) -> list[str]:
    split: dict[str, list[tuple[str, float]]] = {}
    for (setup, precision), worlds in _memory_by(d).items():
        if 1 in worlds and 2 in worlds and sum(worlds[1]["bytes"].values()):
            split.setdefault(setup, []).append(
                (precision, sum(worlds[2]["bytes"].values()) / sum(worlds[1]["bytes"].values()))
            )
    out = []
    for setup, ratios in split.items():
        shown = {f"{x:.2f}" for _, x in ratios}
        at = (f"{shown.pop()} at every precision" if len(shown) == 1
              else ", ".join(f"{x:.2f} at {precision}" for precision, x in ratios))  # fmt: skip
        out.append(f"{setup}: tracked bytes per rank with 2 ranks / with 1 rank = {at} (main table, 2 ranks / 1 rank; "
                   "the chart)")  # fmt: skip
    return out


def _memory_page(d: dict[str, Any]) -> Page:
    config, rows, roles = d["config"], d["results"], d["config"]["roles"]
    worlds = sorted({r["world"] for r in rows})
    main = []
    for (setup, precision), by in _memory_by(d).items():
        tracked = {w: sum(r["bytes"].values()) for w, r in by.items()}
        split = f"{tracked[2] / tracked[1]:.2f}" if tracked.get(1) and 2 in tracked else "-"
        main.append([setup, precision, *(fmt_bytes(tracked.get(w)) for w in worlds),
                     *([split] if worlds == [1, 2] else []),
                     *(fmt_bytes(by[w]["peak_rss_delta"]) if w in by else "-" for w in worlds)])  # fmt: skip
    full_header = ["setup", "ranks", "precision", *(ROLES.get(k, k) for k in roles), "tracked total",
                   "peak RSS delta", "peak RSS"]  # fmt: skip
    full = [[r["setup"], r["world"], r["precision"], *(fmt_bytes(r["bytes"][k]) for k in roles),
             *map(fmt_bytes, (sum(r["bytes"].values()), r["peak_rss_delta"], r["peak_rss"]))]
            for r in rows]  # fmt: skip
    header = ["setup", "precision", *(f"tracked per rank, {ranks(w)}" for w in worlds),
              *(["2 ranks / 1 rank"] if worlds == [1, 2] else []),
              *(f"peak RSS delta, {ranks(w)}" for w in worlds)]  # fmt: skip
    t = config["task"]
    body = (
        f"Our plugins, model of {t['depth']} residual MLP blocks of width {t['width']}, AdamW, batch {t['batch']} per "
        f"rank, {config['steps']} steps, counted just before the last optimizer step; rank 0's figures (every "
        "rank's are in the JSON). Setups: FSDP2 (`fsdp:*`) and DeepSpeed ZeRO stages 1-3 (`deepspeed:*`).\n\n"
        + reading("**tracked per rank**: the bytes of the tensors rank 0 holds for the model, its gradients and the "
                  "optimizer, each storage counted once.",
                  "**2 ranks / 1 rank**: tracked bytes per rank with 2 ranks divided by those with 1 rank; 0.50 is an "
                  "even split of everything between the ranks.",
                  PEAK_RSS + " Peak RSS includes the ~1 GiB that importing torch, Lightning and DeepSpeed costs.",
                  "**params**, **fp32 master** (DeepSpeed's fp32 copy of the weights), **grads**, **optimizer "
                  "state**, **other ZeRO buffers**: the tracked bytes by role (in the block below the table).")
        + "\n\n" + md_table(header, main)
        + "\n\n" + details("Tracked bytes by role, and peak RSS", md_table(full_header, full))
    )  # fmt: skip

    def plot(plt: Any) -> Any:
        precisions = list(dict.fromkeys(r["precision"] for r in rows))
        wide = min(WIDTH, max(6.5, 2.6 * len(precisions)))
        fig, axes = plt.subplots(1, len(precisions), figsize=(wide, 5.6), sharey=True, squeeze=False)
        for ax, precision in zip(axes[0], precisions, strict=True):
            sel = [r for r in rows if r["precision"] == precision]
            bottom = [0.0] * len(sel)
            for role in roles:
                vals = [r["bytes"][role] / 2**20 for r in sel]
                ax.bar(range(len(sel)), vals, bottom=bottom, label=ROLES.get(role, role))
                bottom = [a + b for a, b in zip(bottom, vals, strict=True)]
            rss = [r["peak_rss_delta"] / 2**20 for r in sel]
            ax.plot(range(len(sel)), rss, "k_", markersize=14, markeredgewidth=2, label="peak RSS delta")
            ax.set_xticks(range(len(sel)), [f"{r['setup']}, {ranks(r['world'])}" for r in sel], rotation=90)
            ax.set_title(precision)
        axes[0][0].set_ylabel("MiB on rank 0")
        legend_below(fig, len(roles) + 1, 3)
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


def _breakdown_title(model: str) -> str:
    return f"{model}: all-gather bytes per step by parameter group"


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
                    f"{fmt_bytes(other['largest_gather_bytes'])}: the chart); peak RSS delta "
                    f"{fmt_bytes(base['peak_rss_delta'])} vs {fmt_bytes(other['peak_rss_delta'])} (main table)"
                )
    for m, got in measured.items():
        if len(got) == 2 and got[FP8_BASE]:
            share = sum(g["parameters"] for g in d["breakdown"][m] if g["group"] == CONVERTED)
            findings.append(
                f"{m}: all-gather bytes per step, {FP8} / {FP8_BASE} = {got[FP8] / got[FP8_BASE]:.3f} "
                f"({fmt_bytes(got[FP8])} vs {fmt_bytes(got[FP8_BASE])}); "
                f"{share / d['config']['parameters'][m]:.1%} of its parameters are gathered in float8 "
                f"(table: {_breakdown_title(m)})"
            )
    return findings + [f"{r['model']} {SETUP_LABELS[r['setup']]} {r['precision']} failed (no bar in the chart): "
                       f"{r['error']}" for r in d["results"] if r["error"]]  # fmt: skip


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
    return f"\n\n### {_breakdown_title(model)}\n\n" + md_table(head, rows)


def _memory_real_page(d: dict[str, Any]) -> Page:
    config, rows, (_precision, _by, measured) = d["config"], d["results"], _memory_real_runs(d)
    table = [[r["model"], SETUP_LABELS[r["setup"]], r["precision"],
              *(("failed", "-", "-", "-") if r["error"] else
                (fmt_bytes(r["largest_gather_bytes"]), r["gathers"], fmt_bytes(r["gathered_bytes_per_step"]),
                 fmt_bytes(r["peak_rss_delta"])))] for r in rows]  # fmt: skip
    head = ["model", "setup", "precision", "largest all-gather", "all-gathers", "gathered per step", "peak RSS delta"]
    described, batch = config.get("descriptions") or {}, config["batch"]
    batch = ", ".join(f"{b} ({m})" for m, b in batch.items()) if isinstance(batch, dict) else batch
    body = (
        f"FSDP2, 2 processes on CPU, {config['steps']} steps per fit, batch {batch} per rank; models: "
        + "; ".join(f"{described.get(m, m)} ({n:,} parameters)" for m, n in config["parameters"].items())
        + ". Rank 0's figures (every rank's are in the JSON).\n\n"
        + reading("**ours, default units**: our plugin with no strategy and no `configure_model`, sharded in the "
                  "units its FSDP2 strategy picks; **ours, one unit**: the whole model one FSDP2 unit; **built-in, per "
                  "block**: Lightning's documented FSDP2 setup, every block its own unit, then the root.",
                  "**largest all-gather**: the biggest single all-gather in a step, the most parameter bytes gathered "
                  "at once; **all-gathers**: how many a step makes; **gathered per step**: their bytes together.",
                  PEAK_RSS,
                  "**fp8 / bf16**: bytes gathered under fp8-tensorwise divided by those under bf16-mixed (counted, "
                  "not timed: no interval).")
        + "\n\n" + md_table(head, table)
        + ("\n\nFits that failed: " + "; ".join(f"{r['model']}, {SETUP_LABELS[r['setup']]}, {r['precision']}: "
                                                 f"`{r['error']}`" for r in rows if r["error"])
           if any(r["error"] for r in rows) else "")
        + "\n\nfp8-tensorwise gathers only the Linear weights the default `fp8_filter` converts in float8; the "
        "embedding, the norms and the model's first and last Linear (the lm_head) stay bfloat16 (torchtitan's "
        "float8 examples and Accelerate leave the output layer out too; `fp8_filter=` changes the choice). The groups' "
        "bytes are counted from the model; the measured line is the fits' all-gather outputs."
        + "".join(_breakdown_table(m, groups, measured[m]) for m, groups in d["breakdown"].items())
    )  # fmt: skip

    def plot(plt: Any) -> Any:
        ok = [r for r in rows if not r["error"]]
        fig, ax = plt.subplots(figsize=(WIDTH, 1.2 + 0.5 * len(ok)))
        labels = [f"{r['model']}, {SETUP_LABELS[r['setup']]}, {r['precision']}" for r in ok]
        ax.barh(range(len(ok)), [r["largest_gather_bytes"] / 2**20 for r in ok], color="C0")
        for i, r in enumerate(ok):
            ax.annotate(fmt_bytes(r["largest_gather_bytes"]), (r["largest_gather_bytes"] / 2**20, i),
                        xytext=(3, 0), textcoords="offset points", va="center")  # fmt: skip
        ax.set_yticks(range(len(ok)), labels)
        ax.set_xlabel("largest single all-gather, MiB (rank 0)")
        ax.set_title("The most parameter bytes gathered at once")
        ax.invert_yaxis()
        ax.margins(x=0.2)
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
                            "reduction (table, eval loss - 32-true)")  # fmt: skip
        if a and c:
            findings.append(f"fsdp:{low}-mixed, Lightning built-in on CPU (no autocast): |eval loss - 32-true| = "
                            f"{abs(_nan(c['eval_loss_diff_vs_32'])):.4f} vs ours "
                            f"{abs(_nan(a['eval_loss_diff_vs_32'])):.4f} (table, eval loss - 32-true)")  # fmt: skip
    return findings + [f"{r['name']} diverged: {r['nonfinite_losses']} non-finite losses (table; no line in the chart "
                       "from its first one)" for r in d["results"]
                       if r["nonfinite_losses"]]  # fmt: skip


def _numerics_page(d: dict[str, Any]) -> Page:
    config, rows = d["config"], d["results"]
    table = [[r["name"], f"{_nan(r['final_train_loss']):.4f}", f"{_nan(r['eval_loss']):.4f}",
              f"{_nan(r['eval_loss_diff_vs_32']):+.4f}", f"{_nan(r['weight_rel_l2_vs_32']):.4f}",
              r["nonfinite_losses"]] for r in rows]  # fmt: skip
    t = config["task"]
    body = (
        f"A fixed teacher classification task ({t['depth']} residual MLP blocks of width {t['width']}, batch "
        f"{t['batch']} per rank, AdamW lr {t['lr']}), {config['steps']} steps in 2 processes on CPU; FSDP runs use "
        "FSDP2, DeepSpeed runs ZeRO-2. Each run starts from the same weights and sees the same batches.\n\n"
        + reading("**final train loss (last 10)**: the mean training loss of the last 10 steps.",
                  f"**eval loss**: the loss of the final weights on {config['eval_samples']} held-out samples, "
                  "computed in fp32; **eval loss - 32-true**: that minus the 32-true run's of the same backend.",
                  "**weights: rel. L2 from 32-true**: how far the final weights are from the 32-true run's, "
                  "‖w - w₃₂‖ / ‖w₃₂‖ over every weight.",
                  "**non-finite losses**: steps whose loss was NaN or infinite; `nan` in a cell: the run diverged.",
                  "**reduce fp32** / **reduce bf16**, **fp16**: the dtype the gradients are averaged across the ranks "
                  "in.")
        + "\n\n" + md_table(NUMERICS_HEADER, table)
    )  # fmt: skip

    def plot(plt: Any) -> Any:
        backends = [b for b in ("fsdp", "deepspeed") if any(r["backend"] == b for r in rows)]
        fig, axes = plt.subplots(len(backends), 1, figsize=(WIDTH, 5.2 * len(backends)), squeeze=False)
        for ax, backend in zip(axes[:, 0], backends, strict=True):
            ref = next((r for r in rows if r["name"] == f"{backend}:32-true"), None)
            runs = [r for r in rows if r["backend"] == backend and ref]
            for r in runs:
                diff = [_nan(a) - _nan(b) for a, b in zip(r["losses"], ref["losses"], strict=True)]  # type: ignore[index]
                ax.plot(diff, "--" if r["variant"] == "builtin" else "-", lw=1, label=r["name"].split(":", 1)[1])
            ax.axhline(0, color="k", lw=0.5)
            ax.set_title(f"{backend}: training loss minus the 32-true run's")
            ax.set_xlabel("step")
            ax.set_ylabel("loss difference")
            legend_below(ax, len(runs), 3)
        return fig

    return "Numerics", body, plot


# ---- discovery -------------------------------------------------------------------------------------------------
def dummies(n: int) -> str:
    return f"{n} dummy plugin" + ("" if n == 1 else "s")


def _discovery_findings(d: dict[str, Any]) -> list[str]:
    counts, wall, modules = d["config"]["counts"], d["results"]["process_wall_s"], d["results"]["modules"]
    lst, lo, hi = wall["precision-plugins list"], str(counts[0]), str(counts[-1])
    per_plugin = (lst[hi]["median"] - lst[lo]["median"]) / (counts[-1] - counts[0])
    return [f"precision-plugins list: {lst[lo]['median'] * 1e3:.0f} ms with {lo} dummy plugins, "
            f"{lst[hi]['median'] * 1e3:.0f} ms with {hi} ({per_plugin * 1e3:.2f} ms per installed plugin; chart, "
            "lower panel)",
            *(f"{k} imports {', '.join(modules[k]['heavy']) or 'none of torch, Lightning, DeepSpeed, numpy'} "
              "(main table, heavy modules)" for k in ("import precision_base", "precision-plugins list"))]  # fmt: skip


def _discovery_page(d: dict[str, Any]) -> Page:
    from tools.packages import packages

    counts, results, rows, spread = d["config"]["counts"], d["results"], [], []
    modules, vs_pass = results["modules"], results["vs_pass"]
    for k, s in results["process_wall_s"].items():
        ms = [f"{s[str(n)]['median'] * 1e3:.0f}" if str(n) in s else "-" for n in counts]
        rows.append([f"`{k}`", *ms, fmt_ratio(vs_pass[k]) if k in vs_pass else "-",
                     ", ".join(modules[k]["heavy"]) or "none"])  # fmt: skip
        spread.append([f"`{k}`", *(f"{s[str(n)]['iqr'] * 1e3:.0f}" if str(n) in s else "-" for n in counts),
                       fmt_p20(vs_pass[k]) if k in vs_pass else "-", modules[k]["modules"]])  # fmt: skip
    plugins = " and ".join(p.dist for p in packages().values() if p.backend)
    body = (
        "Fresh-interpreter wall time per command, timed by `pyperf command` (warm-up run first), in venvs with "
        f"{counts[0]}-{counts[-1]} dummy plugin distributions installed next to {plugins}.\n\n"
        + reading("**ms**: the median wall time of the whole process, start to exit, in milliseconds.",
                  "**/ `python -c pass`**: the command's median divided by an empty interpreter's (no dummy plugins).",
                  INTERVAL, VERDICTS, P20, IQR,
                  "**heavy modules**: the large libraries the command imports (torch, Lightning, DeepSpeed, numpy, "
                  "sympy, yaml); **modules**: how many modules it imports in all.")
        + "\n\n" + md_table(["command", *(f"ms, {dummies(n)}" for n in counts), "/ `python -c pass`", "heavy modules"],
                            rows)
        + "\n\n" + details("IQR (ms), p20 and module counts",
                           md_table(["command", *(f"IQR, {dummies(n)}" for n in counts),
                                     "/ `python -c pass` p20", "modules"], spread))
    )  # fmt: skip

    def plot(plt: Any) -> Any:
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(WIDTH, 8.5))
        labels = list(results["process_wall_s"])
        ax1.barh(range(len(labels)), [results["process_wall_s"][k]["0"]["median"] * 1e3 for k in labels])
        ax1.set_yticks(range(len(labels)), labels)
        ax1.set_xscale("log")
        _plain_log(ax1.xaxis)
        ax1.set_xlabel("fresh-interpreter wall time, ms (no dummy plugins; log scale)")
        ax1.invert_yaxis()
        shown = ("precision-plugins list", "import precision_base", "python -c pass")
        for label in shown:
            per = results["process_wall_s"][label]
            ax2.plot([max(int(n), 0.5) for n in per], [s["median"] * 1e3 for s in per.values()], "o-", label=label)
        ax2.set_xscale("log")
        _plain_log(ax2.xaxis)
        ax2.set_xlabel("installed dummy plugin distributions (log scale; 0 drawn at 0.5)")
        ax2.set_ylabel("median ms")
        legend_below(ax2, len(shown), 3)
        return fig

    return "Discovery cost", body, plot


# ---- audit -----------------------------------------------------------------------------------------------------
AUDIT = """The precision audit's cost: an audited step against a normal one, and the steps after the audit against a run
without it, 2 processes on CPU (FSDP2 `fsdp:bf16-mixed` and DeepSpeed ZeRO-2 `deepspeed:bf16-mixed`, the
benchmarks' tiny Llama, `precision_testsupport.architectures`).

One 2-rank launch per backend. Each round runs two fresh fits of the same number of steps in a shuffled order (the
same in both ranks): `audit` (`PrecisionAudit(steps=1)`: step 0 audited, every hook removed after it) and `plain` (no
audit). Step times are wall-clock from the batch's start to its end (the slowest rank's). Compared side by side:
step 0 of `audit` with step 0 of `plain` (the audited step; both include the first step's lazy set-up) and
steps 1.. of `audit` with steps 1.. of `plain` (once the audit is over, a run should be as fast as without it)."""


def _audit_findings(d: dict[str, Any]) -> list[str]:
    return [f"{b}: audited step / normal step = {fmt_ratio(r['audited_step'])} (the audit's budget is 3x); steps "
            f"after the audit / a run without it = {fmt_ratio(r['after_audit'])} (table)"
            for b, r in d["results"].items()]  # fmt: skip


def _audit_page(d: dict[str, Any]) -> Page:
    config, results, raw = d["config"], d["results"], d["raw"]
    rows = [[f"{b}:bf16-mixed", fmt_ratio(r["audited_step"]), fmt_ratio(r["after_audit"])] for b, r in results.items()]
    medians = list(dict.fromkeys(k for r in results.values() for k in r.get("medians_s") or {}))
    more = [[f"{b}:bf16-mixed", fmt_p20(r["audited_step"]), fmt_p20(r["after_audit"]),
             *(f"{s * 1e3:.1f}" if (s := (r.get("medians_s") or {}).get(k)) else "-" for k in medians)]
            for b, r in results.items()]  # fmt: skip
    body = (
        f"{AUDIT}\n\n{config['rounds']} rounds, {config['steps']} steps per fit, batch {config['batch']} per rank.\n\n"
        + reading("**audited step / normal step**: the median of step 0 of the audited runs divided by that of the "
                  "plain runs; **steps after the audit / run without it**: the same for steps 1.. of each. Below 1 "
                  "the audited run is faster, above 1 slower.", INTERVAL, VERDICTS, ROUND, P20)
        + "\n\n" + md_table(["backend", "audited step / normal step", "steps after the audit / run without it"], rows)
        + "\n\n" + details("p20 ratios and median step times",
                           md_table(["backend", "audited step p20", "steps after the audit p20",
                                     *(f"{k}, median ms" for k in medians)], more))
    )  # fmt: skip

    def plot(plt: Any) -> Any:
        fig, grid = plt.subplots(1, len(results), figsize=(WIDTH, 4.6), squeeze=False, sharey=True)
        axes = list(grid[0])
        for ax, backend in zip(axes, results, strict=True):
            for variant, style in (("audit", "-o"), ("plain", "--s")):
                for i, times in enumerate(raw[backend][variant]):
                    ax.plot([t * 1000 for t in times], style, lw=1, ms=3, alpha=0.7,
                            color="C0" if variant == "audit" else "C1",
                            label=("audited run (step 0 audited)" if variant == "audit" else "plain run")
                            if i == 0 else None)  # fmt: skip
            ax.set_title(f"{backend}:bf16-mixed, every round")
            ax.set_xlabel("step")
            ax.set_yscale("log")
            _plain_log(ax.yaxis, minor=True)
        axes[0].set_ylabel("step time, ms (log scale)")
        legend_below(fig, 2, 2)
        return fig

    return "Precision audit cost", body, plot


# ---- measure ---------------------------------------------------------------------------------------------------
MEASURE = """`precision-plugins recommend --measure` (`precision_base.tune_precision`) run as a user runs it, on two of
the benchmarks' models, on this machine's CPU with `devices=1`: every candidate the static `recommend` says runs here
trains the model in a fresh process after the same seed, the `32-true` of the candidates' backend first as the
reference; the search picks the fastest candidate whose losses stay within the tolerance of the reference's. The
separate timings of the same models with 2 ranks are the per-step overhead pages (Llama, ResNet)."""


def _measure_findings(d: dict[str, Any]) -> list[str]:
    out = []
    for model, r in d["results"].items():
        out.append(f"{model}: picked {r['picked'] or 'nothing'}: {r['reason']} (table; chart, lower panels)")
        out.append(f"{model}: the search took {r['wall_s']:.0f} s for {len(r['candidates'])} candidates, "
                   f"{r['overhead_s']:.0f} s of it outside the fits (the line above the table)")  # fmt: skip
    return out


def _percent(x: float | None) -> str:
    """A loss deviation as ``recommend --measure``'s own table shows it (two significant digits), ``None`` as -."""
    from precision_base.tune.search import percent

    return "-" if x is None else percent(x)


def _measure_table(r: dict[str, Any]) -> str:
    ref = next((c for c in r["candidates"] if c["spec"] == r["reference"]), None)
    rows = []
    for c in r["candidates"]:
        ms = c["step_ms"]
        rows.append([f"`{c['spec']}`" + (" (picked)" if c["spec"] == r["picked"] else ""), c["status"],
                     f"{ms:.1f} ({c['step_ms_low']:.1f}-{c['step_ms_high']:.1f})" if ms is not None else "-",
                     f"{ms / ref['step_ms']:.2f}x" if ms is not None and ref and ref["step_ms"] else "-",
                     fmt_bytes(c["peak_bytes"]) if c["peak_bytes"] is not None else "-",
                     fmt_bytes(c["tensor_bytes"]) if c["tensor_bytes"] is not None else "-",
                     _percent(c["loss_deviation"]),
                     {True: "ok", False: "mismatch", None: "-"}[c["audit_ok"]],
                     (c["reason"] or "").replace("[", "(").replace("]", ")")])  # fmt: skip
    header = ["candidate", "status", "median ms per step (95% interval)", "vs 32-true", "peak memory",
              "training state", "loss deviation", "audit", "why not picked"]  # fmt: skip
    return md_table(header, rows)


def _measure_page(d: dict[str, Any]) -> Page:
    config, results = d["config"], d["results"]
    parts = [MEASURE, f"{config['steps']} timed steps after {config['warmup']} warm-up steps per candidate."]
    terms = ("**median ms per step**: after the warm-up, with a distribution-free 95% interval of the median",
             "**vs 32-true**: the candidate's median over the reference's (below 1: faster)",
             "**peak memory**: the fit's peak RSS increase",
             "**training state**: the parameters', gradients' and optimizer state's bytes one process holds before "
             "the last optimizer step",
             "**loss deviation**: the mean of |loss - reference| / |reference| over the same steps")  # fmt: skip
    parts.append(reading(*terms))
    for model, r in results.items():
        parts.append(f"## {model}\n\n{config['descriptions'][model]}. Picked: **{r['picked'] or 'nothing'}**: "
                     f"{r['reason']}. The search took {r['wall_s']:.0f} s, {r['overhead_s']:.0f} s of it outside the "
                     "fits (process starts, imports, building the model).\n\n" + _measure_table(r))  # fmt: skip
    specs = list(dict.fromkeys(c["spec"] for r in results.values() for c in r["candidates"] if c["step_ms"]))
    color = {spec: f"C{i % 10}" for i, spec in enumerate(specs)}

    def plot(plt: Any) -> Any:  # the bars in one order, named once on the left: every panel keeps its width
        fig, grid = plt.subplots(2, len(results), figsize=(WIDTH, 8.5), squeeze=False)
        for col, (model, r) in enumerate(results.items()):
            curves, bars = grid[0][col], grid[1][col]
            ran = {c["spec"]: c for c in r["candidates"] if c["step_ms"] is not None}
            for c in ran.values():
                losses = [x if isinstance(x, (int, float)) else float("nan") for x in c["losses"]]
                curves.plot(range(1, len(losses) + 1), losses, lw=1.2, color=color[c["spec"]], label=c["spec"])
            curves.set_title(f"{model}: loss per step")
            curves.set_xlabel("step")
            at = [i for i, spec in enumerate(specs) if spec in ran]
            ms = [ran[specs[i]]["step_ms"] for i in at]
            bars.barh(at, ms, color=["C2" if specs[i] == r["picked"] else "C7" for i in at])
            for i, x in zip(at, ms, strict=True):
                bars.annotate(f"{x:.1f}", (x, i), xytext=(3, 0), textcoords="offset points", va="center")
            bars.set_yticks(range(len(specs)), specs if col == 0 else [])
            bars.set_ylim(len(specs) - 0.5, -0.5)
            bars.margins(x=0.3)
            bars.set_title(f"{model}: ms per step\n(median; green: picked)")
            bars.set_xlabel("ms per step")
        handles = [plt.Line2D([], [], color=color[s], lw=1.2, label=s) for s in specs]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(3, max(1, len(specs))), frameon=False,
                   title="the upper panels' lines")  # fmt: skip
        return fig

    return "recommend --measure on real models", "\n\n".join(parts), plot


# ---- gpu -------------------------------------------------------------------------------------------------------
def _label(r: dict[str, Any]) -> str:
    if r["kind"] == "fp8":
        return f"{r['spec']}, compile {'on' if r['compile'] else 'off'}"
    return f"{r['setup']} {r['precision']} {r['variant']} (round {r['round'] + 1})"


def _gpu_findings(d: dict[str, Any]) -> list[str]:
    results = d["results"]
    findings = [f"{k.replace('|', ' ')} ours/builtin = {fmt_ratio(r)} (main table; the step times: chart, upper panel)"
                for k, e in results["fits"].items() if (r := e["ratios"].get("ours/builtin"))]  # fmt: skip
    return findings + [f"{_label(r)}: {r['tokens_per_s']:,.0f} tokens/s" + (f", {r['tokens_per_s_vs_bf16_mixed']:.3f}x "
                       "bf16-mixed" if r["tokens_per_s_vs_bf16_mixed"] else "") + " (chart, lower panel)"
                       for r in results["fp8"]]  # fmt: skip


def _gpu_page(d: dict[str, Any]) -> Page:
    results, config, rows, more = d["results"], d["config"], [], []
    for key, e in results["fits"].items():
        for v, x in e["variants"].items():
            r = e["ratios"].get("ours/builtin") if v == "ours" else None
            mem = e.get("memory_ours/builtin") if v == "ours" else None
            rows.append([*key.split("|"), v, f"{x['step_s']['median'] * 1e3:.2f}", f"{x['tokens_per_s']:,.0f}",
                         fmt_bytes(max(x["peak_memory_bytes"])), f"{x['final_loss'][-1]:.4f}",
                         fmt_ratio(r) if r else "", f"{mem:.3f}" if mem else ""])  # fmt: skip
            more.append([*key.split("|"), v, f"{x['step_s']['rel_iqr']:.0%}", fmt_p20(r) if r else ""])
    fp8_rows = [[r["spec"], "on" if r["compile"] else "off", f"{r['parameters']:,}", r["converted_linears"],
                 f"{r['tokens_per_s']:,.0f}", "-" if r["mfu"] is None else f"{r['mfu']:.1%}",
                 "-" if r["tokens_per_s_vs_bf16_mixed"] is None else f"{r['tokens_per_s_vs_bf16_mixed']:.3f}",
                 fmt_bytes(r["peak_memory_bytes"]),
                 "-" if r["memory_vs_bf16_mixed"] is None else f"{r['memory_vs_bf16_mixed']:.3f}"]
                for r in results["fp8"]]  # fmt: skip
    m, m8 = (", ".join(f"{k} {v}" for k, v in x.items()) if isinstance(x, dict) else x
             for x in (config["plan"]["model"], config["plan"]["fp8_model"]))  # fmt: skip
    body = (
        f"{d['machine'].get('gpu')}; one GPU. Fits: TinyGPT ({m}), {config['plan']['steps']} steps after "
        f"{config['plan']['warmup']} warm-up steps per fit, {config['rounds']} interleaved round(s).\n\n"
        + reading("**step ms**: the median step time in milliseconds; **tokens/s**: tokens trained per second at "
                  "that median; **peak memory**: the most CUDA memory allocated at once (the highest over the "
                  "rounds); **final loss**: the training loss after the last step.",
                  "**step time ours / built-in**: ours' median step time divided by the built-in's; below 1 ours is "
                  "faster, above 1 slower.", INTERVAL, VERDICTS, ROUND, IQR, P20,
                  "**peak memory ours / built-in**, **vs bf16-mixed**: plain ratios of two numbers (no interval).",
                  f"**MFU**: model FLOPs utilisation, the share of the GPU's {config['peak_tflops']} TFLOP/s peak the "
                  "fit's model FLOPs use.")
        + "\n\n"
        + (md_table(["setup", "precision", "variant", "step ms", "tokens/s", "peak memory", "final loss",
                     "step time ours / built-in", "peak memory ours / built-in"], rows)
           + "\n\n" + details("Step-time IQR and p20", md_table(["setup", "precision", "variant", "step IQR",
                                                                 "step time ours / built-in p20"], more))
           if rows else "No fit of this section completed.")
        + f"\n\n## FP8 against bf16-mixed\n\nTinyGPT ({m8}), {config['plan']['fp8_steps']} steps after "
        f"{config['plan']['warmup']} warm-up; `torch.compile` on each block when on.\n\n"
        + (md_table(["spec", "compile", "parameters", "fp8 Linears", "tokens/s", "MFU", "vs bf16-mixed",
                     "peak memory", "vs bf16-mixed"], fp8_rows) if fp8_rows
           else f"Not run: {config.get('fp8_problem') or 'no fp8 fit completed'}.")
        + "".join(f"\n\nFailed: {_label(r)}: {r['error']}" for r in results["errors"])
        + ("\n\nNot run (time budget spent): " + ", ".join(_label(r) for r in results["skipped"])
           if results["skipped"] else "")
    )  # fmt: skip

    def plot(plt: Any) -> Any:
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(WIDTH, 9))
        keys = list(results["fits"])
        for j, v in enumerate(("ours", "builtin")):
            xs = [i for i, k in enumerate(keys) if v in results["fits"][k]["variants"]]
            ys = [results["fits"][keys[i]]["variants"][v]["step_s"]["median"] * 1e3 for i in xs]
            ax1.bar([x + (j - 0.5) * 0.4 for x in xs], ys, 0.4, color=f"C{j}", label=LABELS[v])
        ax1.set_xticks(range(len(keys)), [k.replace("|", " ") for k in keys], rotation=90)
        ax1.set_ylabel("median step time, ms")
        ax1.set_title("Fits: ours against Lightning's built-in")
        legend_below(ax1, 2, 2)
        labels = [_label(r) for r in results["fp8"]]
        ax2.barh(range(len(labels)), [r["tokens_per_s"] for r in results["fp8"]])
        ax2.set_yticks(range(len(labels)), labels)
        ax2.set_xlabel("tokens/s")
        ax2.set_title("FP8 against bf16-mixed")
        ax2.invert_yaxis()
        return fig

    return "GPU: one CUDA GPU", body, plot


# ---- every result ----------------------------------------------------------------------------------------------
KINDS: dict[str, tuple[Callable[[dict[str, Any]], list[str]], Callable[[dict[str, Any]], Page]]] = {
    "overhead": (_overhead_findings, _overhead_page), "memory": (_memory_findings, _memory_page),
    "memory-real": (_memory_real_findings, _memory_real_page), "numerics": (_numerics_findings, _numerics_page),
    "discovery": (_discovery_findings, _discovery_page), "audit": (_audit_findings, _audit_page),
    "measure": (_measure_findings, _measure_page), "gpu": (_gpu_findings, _gpu_page),
}  # fmt: skip
"""Benchmark (``overhead-*``: ``overhead``) -> what its result found, and its page."""


def _kind(d: dict[str, Any]) -> tuple[Callable[[dict[str, Any]], list[str]], Callable[[dict[str, Any]], Page]]:
    name = str(d["benchmark"])
    return KINDS["overhead" if name.startswith("overhead-") else name]


def findings(d: dict[str, Any]) -> list[str]:
    """What result ``d`` (a result file's content) found, one sentence each, from its numbers; each names where the
    page shows it (the chart, or a table)."""
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
    """The page of result ``d`` (a result file's content): title, body, what the run found, chart, machine. The
    findings are computed from the numbers again (:func:`findings`), not read from the copy the JSON stored when it
    was measured, so a page drawn again says what the current wording says."""
    title, body, _plot = _kind(d)[1](d)
    quick = " (quick smoke run: too few samples to quote)" if d.get("quick") else ""
    found = "\n".join(f"- {f}" for f in findings(d)) or "- Nothing beyond the tables."
    return (f"# {title}\n\n{body.strip()}\n\n## What this run found\n\n{found}\n\n![{title}]({d['benchmark']}.png)"
            "\n\n## Machine" + quick + "\n\n" + "\n".join(f"- {f}" for f in _machine(d)) + "\n")  # fmt: skip


def draw(d: dict[str, Any], path: Path, pyplot: Any = None) -> Path:
    """The chart of result ``d`` as a PNG at ``path``: :data:`FONTS`, :data:`DPI`; ``pyplot``: matplotlib's (the
    default, Agg backend) or a stand-in."""
    if pyplot is None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    with pyplot.rc_context(FONTS):
        fig = _kind(d)[1](d)[2](pyplot)
        fig.savefig(path, dpi=DPI, bbox_inches="tight")
    pyplot.close(fig)
    return path


def write(out: Path, name: str) -> list[Path]:
    """Write ``<name>.md`` (:func:`markdown`) and ``<name>.png`` (its chart, :func:`draw`) in ``out`` from
    ``<name>.json`` there; return their paths. Measures nothing: run again, it draws the page anew from the JSON."""
    d = json.loads((out / f"{name}.json").read_text())
    (out / f"{name}.md").write_text(markdown(d))
    return [out / f"{name}.md", draw(d, out / f"{name}.png")]
