"""Memory on the real models (:mod:`precision_testsupport.architectures`): what FSDP2 gathers at once and the peak
per rank, 2 ranks on CPU.

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

from typing import Any

import torch
import torch.distributed as dist

from bench import runs
from bench.memory import reset_peak, vm
from precision_fsdp.float8 import config as float8
from precision_testsupport import architectures

SETUPS = ("ours-default", "ours-whole", "builtin")
PRECISION = {"llama": "bf16-mixed", "resnet": "bf16-true"}  # the BatchNorm CNN under *-mixed: being fixed separately
FP8 = "fp8-tensorwise"
FP8_BASE = "bf16-mixed"  # what fp8-tensorwise runs everything but the converted Linear layers in
DECODERS = ("llama", "llama-prop")  # the fp8 / bf16 all-gather rows


class GatherCounter:
    """Wraps ``torch.distributed.all_gather_single`` while active: every output's bytes."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def __enter__(self) -> GatherCounter:
        self._original = dist.all_gather_single

        def counting(output: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
            self.sizes.append(output.numel() * output.element_size())
            return self._original(output, input, *args, **kwargs)

        dist.all_gather_single = counting
        return self

    def __exit__(self, *exc: Any) -> None:
        dist.all_gather_single = self._original


def _fit(setup: str, precision: str, task: runs.Task, steps: int) -> dict[str, Any]:
    if setup == "builtin":
        return runs.fsdp("builtin", precision, task, steps, 0)
    options = {"fp8_emulate": True} if precision.startswith("fp8") else {}
    trainer, shard, kw = runs.fsdp2_variant("ours", precision, **options)
    if setup == "ours-default":  # no strategy, no configure_model
        return runs._lightning_fit(trainer, task, steps, 0, None, None, precision_plugin=kw["precision_plugin"])

    def root_only(module: Any, mesh: Any, is_root: bool) -> None:
        if is_root:  # the model itself, not one of its blocks
            shard(module, mesh, is_root)

    return runs._lightning_fit(trainer, task, steps, 0, None, root_only, **kw)


def worker(args: dict[str, Any]) -> list[dict[str, Any]]:
    """Inside each rank: every (model, setup, precision) of ``args["runs"]``, one fit each."""
    out = []
    for model in dict.fromkeys(r["model"] for r in args["runs"]):  # one-time allocations and imports: not counted
        _fit("ours-default", PRECISION.get(model, FP8_BASE), runs.Task(model=model, batch=2), 1)
    for run in args["runs"]:
        task = runs.Task(model=run["model"], batch=args["batch"][run["model"]])
        before, error = reset_peak(), None
        with GatherCounter() as counter:
            try:
                _fit(run["setup"], run["precision"], task, args["steps"])
            except Exception as exc:  # recorded; the same in every rank (same code, same model)
                error = f"{type(exc).__name__}: {exc}"[:600]
        record = {**run, "largest_gather_bytes": max(counter.sizes, default=0), "gathers": len(counter.sizes),
                  "gathered_bytes_per_step": sum(counter.sizes) / args["steps"], "peak_rss": vm("VmHWM"),
                  "peak_rss_delta": vm("VmHWM") - before, "error": error}  # fmt: skip
        out.append(runs.with_every_rank(record))
    return out


def gather_breakdown(model: str) -> list[dict[str, Any]]:
    """What each parameter group of decoder ``model`` all-gathers per step under ``bf16-mixed`` and under
    ``fp8-tensorwise``, with the default ``fp8_filter`` (``precision_fsdp.float8.config.default_filter``: Linear
    layers with dimensions multiples of 16, except the model's first and last Linear) and default units (the decoder
    layers, gathered twice a step: forward, and again in backward after resharding; the rest, in the root unit, once).
    Parameter dtype under both: bfloat16 (2 bytes); a converted Linear's weight is gathered in float8 (1 byte)."""
    net = architectures.build(model, 0, 0, 0, 0)
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


def run(quick: bool) -> dict[str, Any]:
    chosen = ["llama"] if quick else ["llama", "resnet"]
    plan = [{"model": m, "setup": s, "precision": PRECISION[m]} for m in chosen for s in SETUPS]
    plan.append({"model": "llama", "setup": "ours-default", "precision": FP8})
    plan += [{"model": "llama-prop", "setup": "ours-default", "precision": p} for p in (FP8_BASE, FP8)]
    batch, shown = {"llama": 4, "llama-prop": 4, "resnet": 8}, [*chosen, "llama-prop"]
    config: dict[str, Any] = {"runs": plan, "steps": 2 if quick else 3, "batch": batch,
                              "descriptions": {m: architectures.describe(m, 0, 0, batch[m]) for m in shown},
                              "parameters": {m: architectures.parameters(m, 0, 0, 0) for m in shown}}  # fmt: skip
    rows = runs.in_ranks("bench.memory_real:worker", config)
    return {"config": config, "results": rows, "breakdown": {m: gather_breakdown(m) for m in DECODERS}}
