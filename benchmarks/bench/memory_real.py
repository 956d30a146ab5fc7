"""Memory on the real models (:mod:`bench.models`): what FSDP2 gathers at once and the peak per rank, 2 ranks on CPU.

Per model, one fit of a few steps per setup: ``ours, default units`` (``precision_base.Trainer(precision_plugin=...)``
with no strategy and no ``configure_model``: the units the plugin's FSDP2 strategy picks), ``ours, one unit`` (the
whole model sharded as one unit by ``plugin.fully_shard`` in ``configure_model``) and ``built-in, per block``
(Lightning's documented FSDP2 setup: ``ModelParallelStrategy``, ``fully_shard`` on every block and then the root in
``configure_model``, a policy from the built-in ``FSDPPrecision``'s ``mixed_precision_config``). Counted in every
rank: the bytes of every FSDP2 all-gather output (``torch.distributed.all_gather_single``, the call FSDP2 makes),
the largest single one (the most parameter bytes gathered at once) and the total per step; peak RSS delta (Linux's
``VmHWM`` reset before each fit, after one warm-up fit per model). On the decoder also ``fsdp:fp8-tensorwise``
(torchao's emulation on a CPU: the gathered bytes are what a GPU gathers, the time is not) against
``fsdp:bf16-mixed``, both with the default units.
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

    from precision_base.testing.launch import world_size

    def root_only(module: Any, mesh: Any) -> None:
        if hasattr(module, "blocks"):  # the model itself, not one of its blocks
            ours.fully_shard(module, mesh=mesh)

    strategy = ModelParallelStrategy(data_parallel_size=world_size(), tensor_parallel_size=1)
    return runs._lightning_fit(precision_base.Trainer, task, steps, 0, None, root_only, strategy=strategy,
                               precision_plugin=ours)  # fmt: skip


def worker(args: dict[str, Any]) -> list[dict[str, Any]]:
    """Inside each rank: every (model, setup, precision) of ``args["runs"]``, one fit each."""
    import torch.distributed as dist

    from precision_base.testing.launch import ensure_process_group

    out = []
    for model in dict.fromkeys(r["model"] for r in args["runs"]):  # one-time allocations and imports: not counted
        _fit("ours-default", PRECISION[model], runs.Task(model=model, batch=2), 1)
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
        ensure_process_group()
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, record)
        out.append({**record, "per_rank": gathered})
    return out


def run(quick: bool, machine: dict[str, Any], out: Path) -> list[Path]:
    chosen = ["llama"] if quick else ["llama", "resnet"]
    plan = [{"model": m, "setup": s, "precision": PRECISION[m]} for m in chosen for s in SETUPS]
    plan.append({"model": "llama", "setup": "ours-default", "precision": FP8})
    config: dict[str, Any] = {"runs": plan, "steps": 2 if quick else 3, "batch": {"llama": 4, "resnet": 8},
                              "parameters": {m: models.parameters(m, 0, 0, 0) for m in chosen}}  # fmt: skip
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
    fp8, bf16 = by.get(("llama", "ours-default", FP8)), by.get(("llama", "ours-default", "bf16-mixed"))
    if fp8 and bf16 and not fp8["error"] and not bf16["error"] and bf16["gathered_bytes_per_step"]:
        findings.append(
            f"llama: all-gather bytes per step, {FP8} / bf16-mixed = "
            f"{fp8['gathered_bytes_per_step'] / bf16['gathered_bytes_per_step']:.3f} "
            f"({report.fmt_bytes(fp8['gathered_bytes_per_step'])} vs "
            f"{report.fmt_bytes(bf16['gathered_bytes_per_step'])})"
        )
    findings += [f"{r['model']} {LABELS[r['setup']]} {r['precision']} failed: {r['error']}" for r in rows if r["error"]]
    table = [[r["model"], LABELS[r["setup"]], r["precision"], report.fmt_bytes(r["largest_gather_bytes"]), r["gathers"],
              report.fmt_bytes(r["gathered_bytes_per_step"]), report.fmt_bytes(r["peak_rss_delta"]),
              r["error"] or ""] for r in rows]  # fmt: skip
    body = (
        f"FSDP2, 2 processes on CPU, {config['steps']} steps per fit, batch {config['batch']} per rank; models: "
        + "; ".join(
            f"{models.describe(m, 0, 0, config['batch'][m])} ({config['parameters'][m]:,} parameters)" for m in chosen
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
                        config=config, results=rows, findings=findings)  # fmt: skip
