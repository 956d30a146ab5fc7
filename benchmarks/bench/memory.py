"""Memory per rank and precision under FSDP2 and DeepSpeed ZeRO 1/2/3, with 1 and 2 ranks (our plugins).

One launch per world size (1, then 2). Inside it every (backend, stage, precision) is one fit of a few steps of a
larger model than the overhead benchmark's. At the last ``on_before_optimizer_step`` (gradients present, optimizer
state created by the earlier steps) the tensors each rank holds are counted by role, each storage once:

* ``params``: the module's parameters as the rank stores them (FSDP2: the local shard, in the storage dtype;
  DeepSpeed: the module's working copy -- full under ZeRO 1/2, the rank's partition under ZeRO 3);
* ``master``: fp32 master copies the optimizer updates, where they are separate from ``params`` (DeepSpeed);
* ``grads``: gradients (FSDP2: local shards; DeepSpeed: ``.grad`` plus the ZeRO optimizer's gradient buffers);
* ``optimizer_state``: AdamW's ``exp_avg`` / ``exp_avg_sq`` (and step) tensors;
* ``other``: further tensors the ZeRO optimizer holds (communication buckets and the like).

Peak RSS: Linux's ``VmHWM`` is reset (``/proc/self/clear_refs``) before each fit after freeing the previous one;
``peak_rss_delta`` is the high-water mark during the fit minus the resident size just before it. It includes
activations, temporaries and allocator slack, so it is the figure to read for "does it fit".
"""

from __future__ import annotations

import ctypes
import gc
import time
from pathlib import Path
from typing import Any

from bench.launch import launch
from bench.report import envelope, fmt_bytes, md_table, pyplot, write_json, write_markdown

CONFIGS = [("fsdp", 0), ("deepspeed", 1), ("deepspeed", 2), ("deepspeed", 3)]
ROLES = ("params", "master", "grads", "optimizer_state", "other")


def settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "task": {"width": 256, "depth": 2, "batch": 8},
            "steps": 2,
            "worlds": [2],
            "configs": [("fsdp", 0), ("deepspeed", 2)],
            "precisions": ["bf16-mixed"],
        }
    return {
        "task": {"width": 512, "depth": 4, "batch": 8},
        "steps": 3,
        "worlds": [1, 2],
        "configs": CONFIGS,
        "precisions": ["32-true", "bf16-true", "bf16-mixed"],
    }


# ---- inside the ranks ------------------------------------------------------------------------------------------
def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0]) * 1024
    return out


def _release_memory() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Ledger:
    """Counts bytes by role; a storage seen once is never counted again (views into flat buffers included)."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.bytes = dict.fromkeys(ROLES, 0)
        self.dtypes: dict[str, set[str]] = {r: set() for r in ROLES}

    def add(self, role: str, tensor: Any) -> None:
        import torch
        from torch.distributed.tensor import DTensor

        if isinstance(tensor, DTensor):
            tensor = tensor.to_local()
        if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
            return
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key == 0 or key in self.seen:
            return
        self.seen.add(key)
        self.bytes[role] += storage.nbytes()
        self.dtypes[role].add(str(tensor.dtype).removeprefix("torch."))

    def walk(self, role: str, value: Any, depth: int = 3) -> None:
        import torch

        if isinstance(value, torch.Tensor):
            self.add(role, value)
            if value.grad is not None:
                self.add("grads", value.grad)
        elif depth > 0 and isinstance(value, dict):
            for v in value.values():
                self.walk(role, v, depth - 1)
        elif depth > 0 and isinstance(value, (list, tuple)):
            for v in value:
                self.walk(role, v, depth - 1)

    def result(self) -> dict[str, Any]:
        return {"bytes": dict(self.bytes), "dtypes": {r: sorted(d) for r, d in self.dtypes.items()}}


def _zero_role(name: str) -> str:
    low = name.lower()
    if "fp32" in low:
        return "master"
    if "grad" in low or "ipg" in low:
        return "grads"
    if "bit16" in low or "fp16" in low:
        return "params"
    return "other"


def count_fsdp(module: Any, optimizer: Any) -> dict[str, Any]:
    ledger = Ledger()
    for p in module.parameters():
        ledger.add("params", p)
        if p.grad is not None:
            ledger.add("grads", p.grad)
    for state in optimizer.state.values():
        ledger.walk("optimizer_state", state)
    return ledger.result()


def count_deepspeed(engine: Any) -> dict[str, Any]:
    ledger = Ledger()
    for p in engine.module.parameters():
        part = getattr(p, "ds_tensor", None)
        ledger.add("params", part if part is not None else p)
        if p.grad is not None:
            ledger.add("grads", p.grad)
    zero = engine.optimizer
    inner = getattr(zero, "optimizer", zero)
    for state in inner.state.values():
        ledger.walk("optimizer_state", state)
    if zero is not inner:
        for name, value in vars(zero).items():
            if name in ("optimizer", "param_names"):
                continue
            ledger.walk(_zero_role(name), value)
    return ledger.result()


def param_count(module: Any) -> int:
    total = 0
    for p in module.parameters():
        shape = getattr(p, "ds_shape", None)
        if shape is not None:
            n = 1
            for s in shape:
                n *= int(s)
            total += n
        else:
            total += p.numel()
    return total


def worker(args: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from bench import deepspeed_runs, fsdp_runs
    from bench.task import TaskConfig, ensure_process_group

    torch.set_num_threads(int(args["threads"]))
    cfg = TaskConfig(**args["task"])
    steps = int(args["steps"])
    out: list[dict[str, Any]] = []
    # one small untimed fit per backend first: one-time allocations (thread pools, gloo, DeepSpeed's first engine)
    # would otherwise land in the first measured fit's peak
    tiny = TaskConfig(width=64, depth=1, batch=4)
    for backend in sorted({b for b, _ in args["configs"]}):
        if backend == "fsdp":
            fsdp_runs.run_lightning("ours", "32-true", tiny, 1, 0)
        else:
            deepspeed_runs.run_lightning("ours", "32-true", tiny, 1, 0, stage=2)
    for backend, stage in args["configs"]:
        for precision in args["precisions"]:
            counted: dict[str, Any] = {}
            calls = {"n": 0}

            def on_step(
                module: Any,
                optimizer: Any,
                _counted: dict[str, Any] = counted,
                _calls: dict[str, int] = calls,
                _backend: str = backend,
            ) -> None:
                _calls["n"] += 1
                if _calls["n"] != steps:
                    return
                if _backend == "fsdp":
                    _counted.update(count_fsdp(module, optimizer))
                    _counted["params_total"] = sum(
                        p.numel() if not hasattr(p, "full_tensor") else p.shape.numel() for p in module.parameters()
                    )
                else:
                    engine = module.trainer.model
                    _counted.update(count_deepspeed(engine))
                    _counted["params_total"] = param_count(engine.module)

            _release_memory()
            reset = _reset_peak()
            before = _status()
            if backend == "fsdp":
                result = fsdp_runs.run_lightning("ours", precision, cfg, steps, 0, on_step=on_step)
            else:
                result = deepspeed_runs.run_lightning("ours", precision, cfg, steps, 0, stage=stage, on_step=on_step)
            after = _status()
            del result
            record = {
                "backend": backend,
                "stage": stage,
                "precision": precision,
                **counted,
                "rss_before": before["VmRSS"],
                "peak_rss": after["VmHWM"],
                "peak_rss_delta": after["VmHWM"] - before["VmRSS"] if reset else None,
            }
            ensure_process_group()
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, record)
            out.append({"per_rank": gathered})
    return {"runs": out}


# ---- in the driver -------------------------------------------------------------------------------------------
def label(backend: str, stage: int) -> str:
    return "FSDP2" if backend == "fsdp" else f"ZeRO-{stage}"


def run(quick: bool, machine: dict[str, Any], out: Path, log_dir: Path | None = None) -> list[Path]:
    cfg = settings(quick)
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for world in cfg["worlds"]:
        args = {
            "task": cfg["task"],
            "steps": cfg["steps"],
            "configs": cfg["configs"],
            "precisions": cfg["precisions"],
            "threads": max(1, 2 // world),
        }
        raw = launch("bench.memory:worker", args, world=world, threads=max(1, 2 // world), timeout=900, log_dir=log_dir)
        for entry in raw["runs"]:
            ranks = entry["per_rank"]
            first = ranks[0]
            rows.append(
                {
                    "world": world,
                    "backend": first["backend"],
                    "stage": first["stage"],
                    "config": label(first["backend"], first["stage"]),
                    "precision": first["precision"],
                    "params_total": first.get("params_total"),
                    "per_rank": [
                        {
                            "bytes": r.get("bytes", {}),
                            "dtypes": r.get("dtypes", {}),
                            "peak_rss": r["peak_rss"],
                            "peak_rss_delta": r["peak_rss_delta"],
                            "rss_before": r["rss_before"],
                        }
                        for r in ranks
                    ],
                }
            )
    data = envelope(
        "memory",
        machine=machine,
        config={**cfg, "roles": ROLES},
        results=rows,
        duration_s=time.perf_counter() - start,
        quick=quick,
        findings=findings(rows),
    )
    base = out / "memory"
    return [
        write_json(base.with_suffix(".json"), data),
        plot(rows, base.with_suffix(".png")),
        write_markdown(base.with_suffix(".md"), "Memory per rank", table(data), data),
    ]


def _tracked(rank: dict[str, Any]) -> int:
    return int(sum(rank["bytes"].get(r, 0) for r in ROLES))


def findings(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    by = {(r["config"], r["precision"], r["world"]): r for r in rows}
    for (config, precision, world), r in sorted(by.items()):
        if world != 2 or (config, precision, 1) not in by:
            continue
        one = _tracked(by[(config, precision, 1)]["per_rank"][0])
        two = _tracked(r["per_rank"][0])
        if one:
            out.append(
                f"{config} {precision}: tracked bytes per rank with 2 ranks = {two / one:.2f} x those with 1 rank"
            )
    return out


def table(data: dict[str, Any]) -> str:
    rows = data["results"]
    cfg = data["config"]
    lines = []
    for r in rows:
        rank0 = r["per_rank"][0]
        b = rank0["bytes"]
        lines.append(
            [
                r["config"],
                r["world"],
                r["precision"],
                *[fmt_bytes(b.get(role)) for role in ROLES],
                fmt_bytes(_tracked(rank0)),
                fmt_bytes(rank0["peak_rss_delta"]),
                fmt_bytes(rank0["peak_rss"]),
                ", ".join(f"{k}: {'/'.join(v)}" for k, v in rank0["dtypes"].items() if v),
            ]
        )
    params = rows[0]["params_total"] if rows else None
    task = cfg["task"]
    body = (
        f"Our plugins (`fsdp:*` under FSDP2, `deepspeed:*` under ZeRO 1/2/3 on DeepSpeed's CPU accelerator), model of "
        f"{task['depth']} residual MLP blocks of width {task['width']} ({params:,} parameters), AdamW, batch "
        f"{task['batch']} per rank, {cfg['steps']} steps, counted at the last step just before the optimizer steps. "
        "Figures are rank 0's (rank 1's are in the JSON). Tensor bytes are counted by role, each storage once; "
        "peak RSS delta is the resident-set high-water mark during the fit minus the resident size before it; "
        "peak RSS includes the ~1 GiB that importing torch, Lightning and DeepSpeed costs every rank.\n\n"
        + md_table(
            [
                "setup",
                "ranks",
                "precision",
                "params",
                "fp32 master",
                "grads",
                "optimizer state",
                "other ZeRO buffers",
                "tracked total",
                "peak RSS delta",
                "peak RSS",
                "dtypes",
            ],
            lines,
        )
    )
    if data["findings"]:
        body += "\n\n" + "\n".join(f"- {f}" for f in data["findings"])
    body += "\n\n![memory per rank](memory.png)\n"
    return body


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    plt = pyplot()
    precisions = sorted({r["precision"] for r in rows}, key=["32-true", "bf16-true", "bf16-mixed"].index)
    fig, axes = plt.subplots(1, len(precisions), figsize=(4.2 * len(precisions), 4), sharey=True, squeeze=False)
    colors = {
        "params": "#1f77b4",
        "master": "#9467bd",
        "grads": "#ff7f0e",
        "optimizer_state": "#2ca02c",
        "other": "#7f7f7f",
    }
    for ax, precision in zip(axes[0], precisions, strict=True):
        sel = [r for r in rows if r["precision"] == precision]
        names = [f"{r['config']}\n{r['world']} rank{'s' if r['world'] > 1 else ''}" for r in sel]
        bottom = [0.0] * len(sel)
        for role in ROLES:
            vals = [r["per_rank"][0]["bytes"].get(role, 0) / 2**20 for r in sel]
            ax.bar(range(len(sel)), vals, bottom=bottom, color=colors[role], label=role)
            bottom = [a + b for a, b in zip(bottom, vals, strict=True)]
        peaks = [(r["per_rank"][0]["peak_rss_delta"] or 0) / 2**20 for r in sel]
        ax.plot(range(len(sel)), peaks, "k_", markersize=14, label="peak RSS delta")
        ax.set_xticks(range(len(sel)), names, fontsize=7)
        ax.set_title(precision, fontsize=9)
    axes[0][0].set_ylabel("MiB on rank 0")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
