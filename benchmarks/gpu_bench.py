"""GPU benchmark: step overhead and throughput on CUDA, ours vs Lightning's built-in vs a hand-written loop.

    python benchmarks/gpu_bench.py                      # every visible GPU, about 5-8 minutes
    python benchmarks/gpu_bench.py --devices 1 --budget-s 300 --out /tmp/gpu

Setups: FSDP1 (``FSDPStrategy``), FSDP2 (``fully_shard`` under ``ModelParallelStrategy``) and DeepSpeed ZeRO-2;
precisions ``bf16-mixed`` and ``16-mixed``. Model: a small GPT-style decoder (pre-norm, causal self-attention via
``scaled_dot_product_attention``), synthetic tokens. For every (setup, precision) the three variants run in
interleaved rounds in the same processes:

* ``ours``: ``precision_base.Trainer(precision_plugin="<backend>:<precision>", strategy=...)``;
* ``builtin``: ``lightning.pytorch.Trainer(precision="<precision>", strategy=...)`` -- for FSDP2, where Lightning's
  ``ModelParallelStrategy`` refuses ``16-mixed``, Lightning's ``FSDPPrecision`` instance with the policy from its
  ``mixed_precision_config`` (as in the CPU benchmark);
* ``hand``: plain torch / DeepSpeed: the same sharding, ``torch.autocast("cuda")``, a grad scaler for fp16, AdamW.

Reported: median step time and IQR, tokens/s (all ranks), MFU = tokens/s x 6 x (non-embedding parameters +
attention term) / (peak dense bf16/fp16 FLOP/s x GPUs), ratios ours/built-in and ours/hand-written with 95% bootstrap
intervals. Output: ``gpu.json`` (same envelope as every other result), ``gpu.md``, ``gpu.png`` in ``--out``
(default ``docs/benchmarks``). A global time budget stops starting new fits once spent; what ran is written.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import stats  # noqa: E402
from bench.report import DOCS, envelope, fmt_ms, md_table, pyplot, write_json, write_markdown  # noqa: E402

SETUPS = ("fsdp1", "fsdp2", "deepspeed")
PRECISIONS = ("bf16-mixed", "16-mixed")
VARIANTS = ("ours", "builtin", "hand")

PEAK_TFLOPS = {  # dense bf16/fp16 tensor-core peak per GPU
    "H200": 989.0,
    "H100": 989.0,
    "H800": 989.0,
    "GH200": 989.0,
    "A100": 312.0,
    "A800": 312.0,
    "L40S": 362.0,
    "L40": 181.0,
    "L4": 121.0,
    "A10G": 70.0,
    "A10": 125.0,
    "RTX 4090": 165.0,
    "RTX 3090": 71.0,
    "V100": 125.0,
    "T4": 65.0,
}

MODEL = {"vocab": 8192, "d_model": 512, "layers": 6, "heads": 8, "seq": 512, "batch": 8}


def peak_tflops(name: str, override: float | None = None) -> float | None:
    """Dense half-precision peak of a GPU from its name (longest matching key), or ``override``."""
    if override:
        return override
    for key in sorted(PEAK_TFLOPS, key=len, reverse=True):
        if key.lower() in name.lower():
            return PEAK_TFLOPS[key]
    return None


def flops_per_token(model: dict[str, int]) -> float:
    """Training FLOPs per token: 6 x non-embedding params + 6 x layers x seq x d_model (attention scores)."""
    d, layers = model["d_model"], model["layers"]
    params = layers * 12 * d * d + model["vocab"] * d  # blocks + output projection (tied input embedding)
    return 6.0 * params + 6.0 * layers * model["seq"] * d


def mfu(tokens_per_s: float, model: dict[str, int], peak: float | None, gpus: int) -> float | None:
    if not peak:
        return None
    return tokens_per_s * flops_per_token(model) / (peak * 1e12 * gpus)


# ---- inside the ranks ------------------------------------------------------------------------------------------
class CudaClock:
    """:class:`bench.task.StepClock` that waits for the GPU at every tick, so a step is the GPU's time too.

    The wait removes CPU run-ahead across steps for every variant alike; a framework whose per-step Python work
    is large shows it instead of hiding it behind the GPU queue.
    """

    def __init__(self) -> None:
        self.starts: list[float] = []

    def tick(self) -> None:
        import torch

        torch.cuda.synchronize()
        self.starts.append(time.perf_counter())

    def intervals(self, warmup: int) -> list[float]:
        d = [b - a for a, b in zip(self.starts, self.starts[1:], strict=False)]
        return d[warmup:]


def _model_classes() -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.up = nn.Linear(d, 4 * d)
            self.down = nn.Linear(4 * d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
            return x + self.down(nn.functional.gelu(self.up(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, m: dict[str, int]) -> None:
            super().__init__()
            self.emb = nn.Embedding(m["vocab"], m["d_model"])
            self.pos = nn.Parameter(torch.zeros(m["seq"], m["d_model"]))
            self.blocks = nn.ModuleList(Block(m["d_model"], m["heads"]) for _ in range(m["layers"]))
            self.ln = nn.LayerNorm(m["d_model"])
            self.out = nn.Linear(m["d_model"], m["vocab"], bias=False)
            self.out.weight = self.emb.weight

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.emb(idx) + self.pos[: idx.shape[1]]
            for blk in self.blocks:
                x = blk(x)
            return self.out(self.ln(x))

    return Block, GPT


def _data(m: dict[str, int], steps: int, rank: int) -> Any:
    import torch

    g = torch.Generator().manual_seed(1000 + rank)
    return [torch.randint(0, m["vocab"], (m["batch"], m["seq"] + 1), generator=g) for _ in range(steps)]


def _loss(logits: Any, tokens: Any) -> Any:
    import torch

    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())


def _lightning_fit(setup: str, variant: str, precision: str, m: dict[str, int], steps: int) -> list[float]:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    import precision_base
    from bench.task import lightning_clock_callback, lightning_trainer_kwargs, max_across_ranks, world_size

    block_cls, gpt_cls = _model_classes()
    world = world_size()
    clock = CudaClock()
    plugin: Any = None
    if variant == "ours":
        plugin = precision_base.resolve(f"{'deepspeed' if setup == 'deepspeed' else 'fsdp'}:{precision}")
    elif setup == "fsdp2":
        from lightning.pytorch.plugins.precision import FSDPPrecision

        plugin = FSDPPrecision(precision)  # type: ignore[arg-type]

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.gpt = gpt_cls(m)

        def configure_model(self) -> None:
            if setup != "fsdp2":
                return
            mesh = self.device_mesh["data_parallel"]
            if variant == "ours":
                for blk in self.gpt.blocks:
                    plugin.fully_shard(blk, mesh=mesh)
                plugin.fully_shard(self.gpt, mesh=mesh)
            else:
                mp = plugin.mixed_precision_config
                policy = MixedPrecisionPolicy(param_dtype=mp.param_dtype, reduce_dtype=mp.reduce_dtype)
                for blk in self.gpt.blocks:
                    fully_shard(blk, mesh=mesh, mp_policy=policy)
                fully_shard(self.gpt, mesh=mesh, mp_policy=policy)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return _loss(self.gpt(batch[:, :-1]), batch)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    if setup == "fsdp1":
        strategy: Any = FSDPStrategy(auto_wrap_policy={block_cls})
    elif setup == "fsdp2":
        strategy = ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1)
    else:
        strategy = "deepspeed_stage_2"
    kwargs = lightning_trainer_kwargs(steps, "/tmp/gpu-bench")
    kwargs["accelerator"] = "cuda"
    if variant == "ours":
        trainer: Any = precision_base.Trainer(precision_plugin=plugin, strategy=strategy, devices=world, **kwargs)
    elif setup == "fsdp2":
        trainer = pl.Trainer(plugins=[plugin], strategy=strategy, devices=world, **kwargs)
    else:
        trainer = pl.Trainer(precision=precision, strategy=strategy, devices=world, **kwargs)
    trainer.callbacks.append(lightning_clock_callback(clock))
    data = _data(m, steps, int(os.environ["RANK"]))
    trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=None))
    return max_across_ranks(clock.intervals(0))


def _hand_fit(setup: str, precision: str, m: dict[str, int], steps: int) -> list[float]:
    import torch
    import torch.distributed as dist

    from bench.task import ensure_process_group, max_across_ranks

    ensure_process_group_cuda()
    ensure_process_group()
    block_cls, gpt_cls = _model_classes()
    low = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    net = gpt_cls(m).to(dev)
    scaler: Any = None
    if setup == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        mp = MixedPrecision(param_dtype=low, reduce_dtype=torch.float32, buffer_dtype=low)
        net = FullyShardedDataParallel(net, auto_wrap_policy=ModuleWrapPolicy({block_cls}), mixed_precision=mp)
        scaler = ShardedGradScaler() if low == torch.float16 else None
    elif setup == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
        for blk in net.blocks:
            fully_shard(blk, mp_policy=policy)
        fully_shard(net, mp_policy=policy)
        scaler = torch.amp.GradScaler("cuda") if low == torch.float16 else None
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    data = _data(m, steps, dist.get_rank())
    clock = CudaClock()
    if setup == "deepspeed":
        import deepspeed

        section = {"bf16": {"enabled": True}} if low == torch.bfloat16 else {"fp16": {"enabled": True}}
        config = {
            "train_micro_batch_size_per_gpu": m["batch"],
            "gradient_accumulation_steps": 1,
            "zero_allow_untested_optimizer": True,
            "zero_optimization": {"stage": 2, "contiguous_gradients": True, "overlap_comm": True},
            **section,
        }
        engine, _, _, _ = deepspeed.initialize(model=net, optimizer=opt, config=config)
        for tokens in data:
            clock.tick()
            tokens = tokens.to(dev, non_blocking=True)
            loss = _loss(engine(tokens[:, :-1]), tokens)
            engine.backward(loss)
            engine.step()
        clock.tick()
        return max_across_ranks(clock.intervals(0))
    for tokens in data:
        clock.tick()
        tokens = tokens.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=low):
            logits = net(tokens[:, :-1])
        loss = _loss(logits, tokens)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)
    clock.tick()
    return max_across_ranks(clock.intervals(0))


def ensure_process_group_cuda() -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))


def worker(args: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    deadline = time.time() + float(args["budget_s"])
    m = args["model"]
    warmup, steps = int(args["warmup"]), int(args["steps"])
    rng = random.Random(0)
    samples: dict[str, list[list[float]]] = {}
    errors: dict[str, str] = {}
    skipped: list[str] = []
    for _ in range(int(args["rounds"])):
        for setup in args["setups"]:
            for precision in args["precisions"]:
                order = list(VARIANTS)
                rng.shuffle(order)
                for variant in order:
                    key = f"{setup}|{precision}|{variant}"
                    if key in errors:
                        continue
                    if time.time() > deadline:
                        skipped.append(key)
                        continue
                    try:
                        if variant == "hand":
                            times = _hand_fit(setup, precision, m, warmup + steps)
                        else:
                            times = _lightning_fit(setup, variant, precision, m, warmup + steps)
                        samples.setdefault(key, []).append(times[warmup:])
                    except Exception as exc:  # one broken combination must not lose the others' results
                        errors[key] = f"{type(exc).__name__}: {exc}"[:500]
                    with contextlib.suppress(Exception):
                        torch.cuda.empty_cache()
    return {"samples": samples, "errors": errors, "skipped": skipped}


# ---- in the driver -------------------------------------------------------------------------------------------
def analyse(raw: dict[str, Any], m: dict[str, int], peak: float | None, gpus: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tokens_per_step = m["batch"] * m["seq"] * gpus
    for key, rounds in raw["samples"].items():
        setup, precision, variant = key.split("|")
        pooled = [t for r in rounds for t in r]
        s = stats.summarize(pooled)
        tps = tokens_per_step / s["median"]
        out.setdefault(setup, {}).setdefault(precision, {"variants": {}, "ratios": {}})["variants"][variant] = {
            "step_time_s": s,
            "tokens_per_s": tps,
            "mfu": mfu(tps, m, peak, gpus),
            "rounds": rounds,
        }
    for per in out.values():
        for entry in per.values():
            v = entry["variants"]
            for a, b in (("ours", "builtin"), ("ours", "hand"), ("builtin", "hand")):
                if a in v and b in v:
                    pa = [t for r in v[a]["rounds"] for t in r]
                    pb = [t for r in v[b]["rounds"] for t in r]
                    entry["ratios"][f"{a}/{b}"] = stats.ratio(
                        pa, pb, rounds_a=v[a]["rounds"], rounds_b=v[b]["rounds"], resamples=1000
                    )
    return out


def table(results: dict[str, Any], errors: dict[str, str], skipped: list[str]) -> str:
    rows = []
    for setup, per in results.items():
        for precision, entry in per.items():
            for variant, v in entry["variants"].items():
                r = entry["ratios"]
                rows.append(
                    [
                        setup,
                        precision,
                        variant,
                        f"{fmt_ms(v['step_time_s']['median'])} ({100 * v['step_time_s']['rel_iqr']:.0f}%)",
                        f"{v['tokens_per_s']:,.0f}",
                        "-" if v["mfu"] is None else f"{100 * v['mfu']:.1f}%",
                        stats.fmt_ratio(r["ours/builtin"]) if variant == "ours" and "ours/builtin" in r else "",
                        stats.fmt_ratio(r["ours/hand"]) if variant == "ours" and "ours/hand" in r else "",
                    ]
                )
    body = md_table(
        ["setup", "precision", "variant", "step ms (IQR)", "tokens/s", "MFU", "ours / built-in", "ours / hand"], rows
    )
    if errors:
        body += "\n\nFailed combinations:\n\n" + "\n".join(f"- {k}: {v}" for k, v in errors.items())
    if skipped:
        body += "\n\nNot run (time budget spent): " + ", ".join(sorted(set(skipped)))
    return body + "\n\n![GPU throughput](gpu.png)\n"


def plot(results: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    labels, i = [], 0
    colors = {"ours": "#1f77b4", "builtin": "#ff7f0e", "hand": "#2ca02c"}
    for setup, per in results.items():
        for precision, entry in per.items():
            for j, variant in enumerate(VARIANTS):
                v = entry["variants"].get(variant)
                if v:
                    ax.bar(
                        i + (j - 1) * 0.27,
                        v["tokens_per_s"],
                        0.27,
                        color=colors[variant],
                        label=variant if i == 0 else None,
                    )
            labels.append(f"{setup}\n{precision}")
            i += 1
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("tokens/s (all GPUs)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=0, help="GPUs to use (default: all visible)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting new fits after this many s")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense half-precision peak per GPU")
    parser.add_argument("--out", type=Path, default=DOCS)
    args = parser.parse_args(argv)

    from bench.launch import launch
    from bench.machine import gpu_info, machine_info

    gpu = gpu_info()
    if not gpu.get("cuda"):
        print("gpu_bench.py needs a CUDA GPU; none is visible here.", file=sys.stderr)
        return 2
    world = args.devices or gpu["device_count"]
    peak = peak_tflops(gpu["name"], args.peak_tflops)
    config = {
        "model": MODEL,
        "flops_per_token": flops_per_token(MODEL),
        "peak_tflops_per_gpu": peak,
        "world_size": world,
        "rounds": args.rounds,
        "steps": args.steps,
        "warmup": args.warmup,
        "budget_s": args.budget_s,
        "setups": args.setups.split(","),
        "precisions": args.precisions.split(","),
    }
    start = time.perf_counter()
    threads = max(1, (os.cpu_count() or 2) // world)
    raw = launch("gpu_bench:worker", config, world=world, threads=threads, timeout=args.budget_s + 240)
    results = analyse(raw, MODEL, peak, world)
    machine = {**machine_info(), "gpu": gpu}
    data = envelope(
        "gpu",
        machine=machine,
        config=config,
        results={"by_setup": results, "errors": raw["errors"], "skipped": raw["skipped"]},
        duration_s=time.perf_counter() - start,
        quick=False,
        findings=[
            f"{s}:{p} ours/builtin = {stats.fmt_ratio(e['ratios']['ours/builtin'])}: "
            f"{e['ratios']['ours/builtin']['verdict']}"
            for s, per in results.items()
            for p, e in per.items()
            if "ours/builtin" in e["ratios"]
        ],
    )
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "gpu.json", data)
    plot(results, args.out / "gpu.png")
    body = (
        f"{gpu['name']} x {world}; model {MODEL}; {args.rounds} interleaved rounds x {args.steps} steps "
        f"({args.warmup} warm-up steps dropped per fit). MFU uses {peak} TFLOP/s per GPU.\n\n"
        + table(results, raw["errors"], raw["skipped"])
    )
    write_markdown(args.out / "gpu.md", "GPU: step overhead and throughput", body, data)
    print(f"gpu_bench: {time.perf_counter() - start:.0f} s -> {args.out / 'gpu.json'}")
    return 1 if raw["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
