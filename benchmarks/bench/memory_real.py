"""Memory on the real models (:mod:`bench.models`): what FSDP2 gathers at once and the peak per rank, 2 ranks on CPU.

Per model, one fit of a few steps per setup: ``ours, default units`` (``precision_base.Trainer(precision_plugin=...)``
with no strategy and no ``configure_model``: the units the plugin's FSDP2 strategy picks), ``ours, one unit`` (the
whole model sharded as one unit by ``plugin.fully_shard`` in ``configure_model``) and ``built-in, per block``
(Lightning's documented FSDP2 setup: ``ModelParallelStrategy``, ``fully_shard`` on every block and then the root in
``configure_model``, a policy from the built-in ``FSDPPrecision``'s ``mixed_precision_config``). Counted in every
rank: the bytes of every FSDP2 all-gather output (``torch.distributed.all_gather_single``, the call FSDP2 makes),
the largest single one (the most parameter bytes gathered at once) and the total per step; peak RSS delta (Linux's
``VmHWM`` reset before each fit, after one warm-up fit per model). On the decoders also ``fsdp:fp8-tensorwise``
(torchao's emulation on a CPU: the gathered bytes are what a GPU gathers, the time is not) against
``fsdp:bf16-mixed``, both with the default units: on the tiny ``llama`` and on ``llama-prop`` (the same architecture
with TinyLlama-1.1B's proportions, embedding and lm_head 11.9% of the parameters instead of 29%), with the bytes
each parameter group contributes (:func:`gather_breakdown`).
"""

from __future__ import annotations

import ctypes
import gc
import time
from pathlib import Path
from typing import Any

from bench import models, report, runs
from bench.memory import _vm

SETUPS = ("ours-default", "ours-whole", "builtin")
LABELS = {"ours-default": "ours, default units", "ours-whole": "ours, one unit", "builtin": "built-in, per block"}
PRECISION = {"llama": "bf16-mixed", "resnet": "bf16-true"}  # the BatchNorm CNN under *-mixed: being fixed separately
FP8 = "fp8-tensorwise"
FP8_BASE = "bf16-mixed"  # what fp8-tensorwise runs everything but the converted Linear layers in
DECODERS = ("llama", "llama-prop")  # the fp8 / bf16 all-gather rows


class GatherCounter:
    """Wraps ``torch.distributed.all_gather_single`` while active: every output's bytes."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def __enter__(self) -> GatherCounter:
        import torch.distributed as dist

        self._original = dist.all_gather_single

        def counting(output: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
            self.sizes.append(output.numel() * output.element_size())
            return self._original(output, input, *args, **kwargs)

        dist.all_gather_single = counting
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch.distributed as dist

        dist.all_gather_single = self._original


def _fit(setup: str, precision: str, task: runs.Task, steps: int) -> dict[str, Any]:
    import precision_base

    if setup == "builtin":
        return runs.fsdp("builtin", precision, task, steps, 0)
    options = {"fp8_emulate": True} if precision.startswith("fp8") else {}
    ours = precision_base.resolve(f"fsdp:{precision}", **options)
    if setup == "ours-default":
        return runs._lightning_fit(precision_base.Trainer, task, steps, 0, None, None, precision_plugin=ours)
    from lightning.pytorch.strategies import ModelParallelStrategy

    from precision_testsupport.launch import world_size

    def root_only(module: Any, mesh: Any) -> None:
        if hasattr(module, "blocks"):  # the model itself, not one of its blocks
            ours.fully_shard(module, mesh=mesh)

    strategy = ModelParallelStrategy(data_parallel_size=world_size(), tensor_parallel_size=1)
    return runs._lightning_fit(precision_base.Trainer, task, steps, 0, None, root_only, strategy=strategy,
                               precision_plugin=ours)  # fmt: skip


def worker(args: dict[str, Any]) -> list[dict[str, Any]]:
    """Inside each rank: every (model, setup, precision) of ``args["runs"]``, one fit each."""
    out = []
    for model in dict.fromkeys(r["model"] for r in args["runs"]):  # one-time allocations and imports: not counted
        _fit("ours-default", PRECISION.get(model, FP8_BASE), runs.Task(model=model, batch=2), 1)
    for run in args["runs"]:
        task = runs.Task(model=run["model"], batch=args["batch"][run["model"]])
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM
        before = _vm("VmRSS")
        error = None
        with GatherCounter() as counter:
            try:
                _fit(run["setup"], run["precision"], task, args["steps"])
            except Exception as exc:  # recorded; the same in every rank (same code, same model)
                error = f"{type(exc).__name__}: {exc}"[:600]
        record = {**run, "largest_gather_bytes": max(counter.sizes, default=0), "gathers": len(counter.sizes),
                  "gathered_bytes_per_step": sum(counter.sizes) / args["steps"], "peak_rss": _vm("VmHWM"),
                  "peak_rss_delta": _vm("VmHWM") - before, "error": error}  # fmt: skip
        out.append(runs.with_every_rank(record))
    return out


def gather_breakdown(model: str) -> list[dict[str, Any]]:
    """What each parameter group of decoder ``model`` all-gathers per step under ``bf16-mixed`` and under
    ``fp8-tensorwise``, with the plugin's default ``fp8_filter`` (``precision_fsdp.float8.default_filter``: Linear
    layers with dimensions multiples of 16, except the model's first and last Linear) and default units (the decoder
    layers, gathered twice a step: forward, and again in backward after resharding; the rest, in the root unit, once).
    Parameter dtype under both: bfloat16 (2 bytes); a converted Linear's weight is gathered in float8 (1 byte)."""
    import torch

    from precision_fsdp import float8

    net = models.build(model, 0, 0, 0, 0)
    chosen, linears = float8.default_filter(net), float8._linears(net)
    first, last = linears[0][0], linears[-1][0]
    in_blocks = {id(p) for block in net.blocks for p in block.parameters()}
    fp8_weights = {id(m.weight) for name, m in linears if chosen(m, name)}
    groups: dict[str, dict[str, Any]] = {}
    for module_name, module in net.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in fp8_weights:
                group = "Linear weights converted to float8"
            elif isinstance(module, torch.nn.Linear):
                end = "first" if module_name == first else "last" if module_name == last else None
                group = f"{end} Linear ({module_name}): not converted" if end else f"Linear {pname}: not converted"
            elif isinstance(module, torch.nn.Embedding):
                group = "embedding"
            else:
                group = f"{type(module).__name__} (norms)" if "Norm" in type(module).__name__ else type(module).__name__
            times = 2 if id(p) in in_blocks else 1
            g = groups.setdefault(group, {"group": group, "parameters": 0, "bf16_bytes": 0, "fp8_bytes": 0})
            g["parameters"] += p.numel()
            g["bf16_bytes"] += 2 * p.numel() * times
            g["fp8_bytes"] += (1 if id(p) in fp8_weights else 2) * p.numel() * times
    return sorted(groups.values(), key=lambda g: -g["parameters"])


def _breakdown_table(model: str, groups: list[dict[str, Any]], measured: dict[str, float]) -> str:
    total = {k: sum(g[k] for g in groups) for k in ("parameters", "bf16_bytes", "fp8_bytes")}
    rows = [[g["group"], f"{g['parameters']:,}", f"{g['parameters'] / total['parameters']:.1%}",
             report.fmt_bytes(g["bf16_bytes"]), report.fmt_bytes(g["fp8_bytes"]),
             f"{g['fp8_bytes'] / g['bf16_bytes']:.2f}"] for g in groups]  # fmt: skip
    rows.append(["total (from the groups)", f"{total['parameters']:,}", "100%", report.fmt_bytes(total["bf16_bytes"]),
                 report.fmt_bytes(total["fp8_bytes"]), f"{total['fp8_bytes'] / total['bf16_bytes']:.3f}"])  # fmt: skip
    if measured:
        rows.append(["measured (rank 0, all-gather outputs)", "", "", report.fmt_bytes(measured.get(FP8_BASE)),
                     report.fmt_bytes(measured.get(FP8)), ""])  # fmt: skip
    head = ["parameter group", "parameters", "share", f"{FP8_BASE} per step", f"{FP8} per step", "fp8 / bf16"]
    return f"\n\n### {model}: all-gather bytes per step by parameter group\n\n" + report.md_table(head, rows)


def run(quick: bool, machine: dict[str, Any], out: Path) -> list[Path]:
    chosen = ["llama"] if quick else ["llama", "resnet"]
    plan = [{"model": m, "setup": s, "precision": PRECISION[m]} for m in chosen for s in SETUPS]
    plan.append({"model": "llama", "setup": "ours-default", "precision": FP8})
    plan += [{"model": "llama-prop", "setup": "ours-default", "precision": p} for p in (FP8_BASE, FP8)]
    shown = [*chosen, "llama-prop"]
    config: dict[str, Any] = {"runs": plan, "steps": 2 if quick else 3,
                              "batch": {"llama": 4, "llama-prop": 4, "resnet": 8},
                              "parameters": {m: models.parameters(m, 0, 0, 0) for m in shown}}  # fmt: skip
    start = time.perf_counter()
    rows = runs.in_ranks("bench.memory_real:worker", config)
    by = {(r["model"], r["setup"], r["precision"]): r for r in rows}
    findings = []
    for m in chosen:
        base = by.get((m, "ours-default", PRECISION[m]))
        for setup in ("ours-whole", "builtin"):
            other = by.get((m, setup, PRECISION[m]))
            if base and other and not base["error"] and not other["error"] and other["largest_gather_bytes"]:
                findings.append(
                    f"{m} {PRECISION[m]}: largest all-gather, ours default units / {LABELS[setup]} = "
                    f"{base['largest_gather_bytes'] / other['largest_gather_bytes']:.3f} "
                    f"({report.fmt_bytes(base['largest_gather_bytes'])} vs "
                    f"{report.fmt_bytes(other['largest_gather_bytes'])}); peak RSS delta "
                    f"{report.fmt_bytes(base['peak_rss_delta'])} vs {report.fmt_bytes(other['peak_rss_delta'])}"
                )
    breakdowns, measured = {m: gather_breakdown(m) for m in DECODERS}, {}
    for m in DECODERS:
        fp8, bf16 = by.get((m, "ours-default", FP8)), by.get((m, "ours-default", FP8_BASE))
        pairs = ((FP8, fp8), (FP8_BASE, bf16))
        measured[m] = {p: r["gathered_bytes_per_step"] for p, r in pairs if r and not r["error"]}
        if len(measured[m]) == 2 and measured[m][FP8_BASE]:
            share = sum(g["parameters"] for g in breakdowns[m] if g["group"] == "Linear weights converted to float8")
            findings.append(
                f"{m}: all-gather bytes per step, {FP8} / {FP8_BASE} = {measured[m][FP8] / measured[m][FP8_BASE]:.3f} "
                f"({report.fmt_bytes(measured[m][FP8])} vs {report.fmt_bytes(measured[m][FP8_BASE])}); "
                f"{share / config['parameters'][m]:.1%} of its parameters are gathered in float8"
            )
    findings += [f"{r['model']} {LABELS[r['setup']]} {r['precision']} failed: {r['error']}" for r in rows if r["error"]]
    table = [[r["model"], LABELS[r["setup"]], r["precision"], report.fmt_bytes(r["largest_gather_bytes"]), r["gathers"],
              report.fmt_bytes(r["gathered_bytes_per_step"]), report.fmt_bytes(r["peak_rss_delta"]),
              r["error"] or ""] for r in rows]  # fmt: skip
    body = (
        f"FSDP2, 2 processes on CPU, {config['steps']} steps per fit, batch {config['batch']} per rank; models: "
        + "; ".join(
            f"{models.describe(m, 0, 0, config['batch'][m])} ({config['parameters'][m]:,} parameters)" for m in shown
        )
        + ". Rank 0's figures (every rank's are in the JSON).\n\n"
        + report.md_table(
            [
                "model",
                "setup",
                "precision",
                "largest all-gather",
                "all-gathers",
                "gathered per step",
                "peak RSS delta",
                "error",
            ],
            table,
        )
        + "\n\nfp8-tensorwise gathers only the Linear weights the default `fp8_filter` converts in float8; the "
        "embedding, the norms and the model's first and last Linear (the lm_head) stay bfloat16 (torchtitan's "
        "float8 examples and Accelerate leave the output layer out too; `fp8_filter=` changes the choice). The groups' "
        "bytes are counted from the model; the measured line is the fits' all-gather outputs."
        + "".join(_breakdown_table(m, breakdowns[m], measured[m]) for m in DECODERS)
    )

    def plot(plt: Any) -> Any:
        fig, ax = plt.subplots(figsize=(8, 4.8))
        ok = [r for r in rows if not r["error"]]
        labels = [f"{r['model']} {LABELS[r['setup']]}\n{r['precision']}" for r in ok]
        ax.barh(range(len(ok)), [r["largest_gather_bytes"] / 2**20 for r in ok], color="C0")
        ax.set_yticks(range(len(ok)), labels, fontsize=10)
        ax.set_xlabel("largest single all-gather, MiB (rank 0)")
        ax.invert_yaxis()
        fig.tight_layout()
        return fig

    return report.write(out, "memory-real", "Memory on real models", body, plot, start, quick=quick, machine=machine,
                        config=config, results=rows, findings=findings, breakdown=breakdowns)  # fmt: skip
