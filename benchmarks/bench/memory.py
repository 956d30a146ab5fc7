"""Memory per rank on CPU, our plugins (the method in full: the pages' introductions). ``memory`` (:func:`run`):
bytes by role under FSDP2 and DeepSpeed ZeRO 1/2/3 with 1 and 2 ranks, counted at the last optimizer step.
``memory-real`` (:func:`run_real`): what FSDP2 all-gathers on the real models
(:mod:`precision_testsupport.architectures`), 2 ranks, per setup, and fp8-tensorwise against bf16-mixed on the
decoders, with each parameter group's bytes (:func:`gather_breakdown`). Both: the peak RSS delta of each fit.
"""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from bench import runs
from precision_fsdp.float8 import config as float8
from precision_testsupport import architectures

ROLES = ("params", "master", "grads", "optimizer_state", "other")
SETUPS = ("ours-default", "ours-whole", "builtin")  # memory-real: runs.fsdp's variants
PRECISION = {"llama": "bf16-mixed", "resnet": "bf16-true"}  # the BatchNorm CNN under *-mixed: being fixed separately
FP8 = "fp8-tensorwise"
FP8_BASE = "bf16-mixed"  # what fp8-tensorwise runs everything but the converted Linear layers in
DECODERS = ("llama", "llama-prop")  # the fp8 / bf16 all-gather rows


def vm(key: str) -> int:
    """This process's ``VmRSS`` (resident now) or ``VmHWM`` (its peak since the last reset), in bytes."""
    line = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith(key + ":"))
    return int(line.split()[1]) * 1024


def reset_peak() -> int:
    """Free what earlier fits left and reset the peak RSS (Linux's ``VmHWM``); returns the RSS now."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM
    return vm("VmRSS")


class Ledger:
    """Bytes by role; a storage seen once is never counted again (views into flat buffers included)."""

    def __init__(self) -> None:
        self.seen, self.bytes = set[int](), dict.fromkeys(ROLES, 0)

    def walk(self, role: str, value: Any, depth: int = 3) -> None:
        if isinstance(value, torch.Tensor):
            if value.grad is not None:
                self.walk("grads", value.grad)
            local = value.to_local() if isinstance(value, DTensor) else value
            key = local.untyped_storage().data_ptr()
            if local.device.type != "meta" and key and key not in self.seen:
                self.seen.add(key)
                self.bytes[role] += local.untyped_storage().nbytes()
        elif depth and isinstance(value, (dict, list, tuple)):
            for v in value.values() if isinstance(value, dict) else value:
                self.walk(role, v, depth - 1)


def _zero_role(name: str) -> str:
    low = name.lower()
    if "fp32" in low or "grad" in low or "ipg" in low:
        return "master" if "fp32" in low else "grads"
    return "params" if "bit16" in low or "fp16" in low else "other"


def count(backend: str, module: Any, optimizer: Any) -> dict[str, int]:
    ledger = Ledger()
    if backend == "fsdp":
        ledger.walk("params", list(module.parameters()))
        ledger.walk("optimizer_state", list(optimizer.state.values()))
        return ledger.bytes
    engine = module.trainer.model
    params = engine.module.parameters()  # ZeRO-3: each rank's partition
    ledger.walk("params", [p if getattr(p, "ds_tensor", None) is None else p.ds_tensor for p in params])
    zero = engine.optimizer
    inner = getattr(zero, "optimizer", zero)
    ledger.walk("optimizer_state", list(inner.state.values()))
    if zero is not inner:
        for name, value in vars(zero).items():
            if name not in ("optimizer", "param_names"):
                ledger.walk(_zero_role(name), value)
    return ledger.bytes


def worker(args: dict[str, Any]) -> list[dict[str, Any]]:
    """Inside each rank: one warm-up fit per backend (one-time allocations), then every configuration."""
    task, steps, out = runs.Task(**args["task"]), args["steps"], []
    for backend in sorted({b for b, _ in args["configs"]}):
        runs.run(backend, "ours", "32-true", runs.Task(width=64, depth=1, batch=4), 1, 0)
    for backend, stage in args["configs"]:
        for precision in args["precisions"]:
            counted: dict[str, Any] = {}  # counted at every optimizer step: the last step's count stays

            def on_step(module: Any, optimizer: Any, _b: str = backend, _c: Any = counted) -> None:
                _c["bytes"] = count(_b, module, optimizer)

            before = reset_peak()
            kw = {"stage": stage} if backend == "deepspeed" else {}
            runs.run(backend, "ours", precision, task, steps, 0, on_step=on_step, **kw)
            record = {"backend": backend, "stage": stage, "precision": precision, **counted, "peak_rss": vm("VmHWM"),
                      "peak_rss_delta": vm("VmHWM") - before}  # fmt: skip
            out.append(runs.with_every_rank(record))
    return out


def run(quick: bool) -> dict[str, Any]:
    configs = [("fsdp", 0), *(("deepspeed", stage) for stage in ((2,) if quick else (1, 2, 3)))]
    precisions = ["bf16-mixed"] if quick else ["32-true", "bf16-true", "bf16-mixed"]
    config: dict[str, Any] = {"task": {"width": 256 if quick else 512, "depth": 2 if quick else 4, "batch": 8},
                              "steps": 2 if quick else 3, "worlds": [2] if quick else [1, 2], "configs": configs,
                              "precisions": precisions}  # fmt: skip
    rows = []
    for world in config["worlds"]:
        for r in runs.in_ranks("bench.memory:worker", config, world=world, threads=2 // world):
            r["world"], r["setup"] = world, "FSDP2" if r["backend"] == "fsdp" else f"ZeRO-{r['stage']}"
            rows.append(r)
    return {"config": {**config, "roles": ROLES}, "results": rows}


class GatherCounter:
    """Wraps ``torch.distributed.all_gather_single`` (the call FSDP2 makes) while active: every output's bytes."""

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
    options = {"fp8_emulate": True} if precision.startswith("fp8") else {}  # torchao's emulation on a CPU
    return runs.fsdp(setup, precision, task, steps, 0, **options)


def real_worker(args: dict[str, Any]) -> list[dict[str, Any]]:
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
    """What each parameter group of decoder ``model`` all-gathers per step under ``bf16-mixed`` (2 bytes a parameter)
    and ``fp8-tensorwise`` (1 byte a converted Linear weight; the default ``fp8_filter``), the decoder layers twice a
    step (forward, and backward after resharding), the rest (the root unit) once."""
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


def run_real(quick: bool) -> dict[str, Any]:
    chosen = ["llama"] if quick else ["llama", "resnet"]
    plan = [{"model": m, "setup": s, "precision": PRECISION[m]} for m in chosen for s in SETUPS]
    plan.append({"model": "llama", "setup": "ours-default", "precision": FP8})
    plan += [{"model": "llama-prop", "setup": "ours-default", "precision": p} for p in (FP8_BASE, FP8)]
    batch, shown = {"llama": 4, "llama-prop": 4, "resnet": 8}, [*chosen, "llama-prop"]
    config: dict[str, Any] = {"runs": plan, "steps": 2 if quick else 3, "batch": batch,
                              "descriptions": {m: architectures.describe(m, 0, 0, batch[m]) for m in shown},
                              "parameters": {m: architectures.parameters(m, 0, 0, 0) for m in shown}}  # fmt: skip
    rows = runs.in_ranks("bench.memory:real_worker", config)
    return {"config": config, "results": rows, "breakdown": {m: gather_breakdown(m) for m in DECODERS}}
