"""Memory per rank and precision under FSDP2 and DeepSpeed ZeRO 1/2/3, with 1 and 2 ranks (our plugins).

Every (backend, stage, precision) is one fit of a few steps. At the last ``on_before_optimizer_step`` the tensors a
rank holds are counted by role, each storage once: ``params`` (FSDP2: the local shard; DeepSpeed: the module's
working copy, partitioned under ZeRO-3), ``master`` (DeepSpeed's fp32 copies), ``grads``, ``optimizer_state``
(AdamW's moments) and ``other`` (further ZeRO buffers). Peak RSS delta: Linux's ``VmHWM`` is reset before each fit,
after freeing the previous one; it includes activations and allocator slack, the figure for "does it fit".
"""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from bench import runs

ROLES = ("params", "master", "grads", "optimizer_state", "other")


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
