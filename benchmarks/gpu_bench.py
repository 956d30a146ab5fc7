"""GPU benchmark: step overhead and throughput on CUDA, ours vs Lightning's built-in vs a hand-written loop.
Usage: benchmarks/README.md (all visible GPUs by default, about 5-8 minutes, results into build/benchmarks).

Setups: FSDP1, FSDP2 (``fully_shard`` under ``ModelParallelStrategy``), DeepSpeed ZeRO-2; ``bf16-mixed`` and
``16-mixed``; ``precision_base.testing.models.TinyGPT`` on synthetic tokens. Variants, interleaved in rounds:
``ours`` (``precision_base.Trainer(precision_plugin=...)``), ``builtin`` (``Trainer(precision=...)``; FSDP2: the
built-in ``FSDPPrecision`` with a policy from its ``mixed_precision_config``) and ``hand`` (plain torch / DeepSpeed,
``torch.autocast("cuda")``, a scaler for fp16). Reported: step time, tokens/s, MFU (tokens/s x FLOPs per token /
peak dense half-precision FLOP/s of all GPUs), ratios with 95% bootstrap intervals. A time budget stops new fits.

``--fp8``: on one GPU with FP8 (compute capability >= 8.9), ``fsdp:fp8-tensorwise`` and ``fsdp:fp8-rowwise``
against ``fsdp:bf16-mixed`` on a ~1B-parameter TinyGPT through ``precision_base.Trainer`` (its FSDP2 strategy):
tokens/s (median step) and peak CUDA memory allocated, and their fp8/bf16-mixed ratios. Without such a GPU or
without torchao it prints why and exits 0: emulation elsewhere says nothing about speed.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import random
import sys
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any, cast

from bench import report
from precision_base.testing.launch import run_ranks

SETUPS, PRECISIONS, VARIANTS = ("fsdp1", "fsdp2", "deepspeed"), ("bf16-mixed", "16-mixed"), ("ours", "builtin", "hand")
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "H800": 989.0, "GH200": 989.0, "A100": 312.0, "A800": 312.0,
               "L40S": 362.0, "L40": 181.0, "L4": 121.0, "A10G": 70.0, "A10": 125.0, "RTX 4090": 165.0,
               "RTX 3090": 71.0, "V100": 125.0, "T4": 65.0}  # fmt: skip
RATIOS = ("ours/builtin", "ours/hand")
MODEL = {"vocab": 8192, "d_model": 512, "layers": 6, "heads": 8, "seq": 512, "batch": 8}
FP8_SPECS = ("fsdp:bf16-mixed", "fsdp:fp8-tensorwise", "fsdp:fp8-rowwise")
FP8_MODEL = {"vocab": 32000, "d_model": 2048, "layers": 18, "heads": 16, "seq": 1024, "batch": 8}  # ~1B parameters


def peak_tflops(name: str, override: float | None = None) -> float | None:
    """Dense bf16/fp16 tensor-core peak TFLOP/s of a GPU from its name (longest matching key), or ``override``."""
    return override or next((PEAK_TFLOPS[k] for k in sorted(PEAK_TFLOPS, key=len, reverse=True) if k in name), None)


def flops_per_token(m: dict[str, int]) -> float:
    """Training FLOPs per token: 6 x (blocks + tied output projection) + 6 x layers x seq x d_model (attention)."""
    d, n = m["d_model"], m["layers"]
    return 6.0 * (n * 12 * d**2 + m["vocab"] * d) + 6.0 * n * m["seq"] * d


def mfu(tokens_per_s: float, m: dict[str, int], peak: float | None, gpus: int) -> float | None:
    return tokens_per_s * flops_per_token(m) / (peak * 1e12 * gpus) if peak else None


# ---- inside the ranks ------------------------------------------------------------------------------------------
def _loss(logits: Any, tokens: Any) -> Any:
    import torch

    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())


def _start(m: dict[str, int], steps: int, seed: int) -> tuple[Any, Any, Any]:
    """TinyGPT from ``m``, ``steps`` batches of synthetic tokens and a CUDA-synchronised ``bench.runs.Clock``."""
    import torch

    from bench.runs import Clock
    from precision_base.testing.models import TinyGPT

    gen, gpt = torch.Generator().manual_seed(seed), TinyGPT(**{k: v for k, v in m.items() if k != "batch"})
    data = [torch.randint(0, m["vocab"], (m["batch"], m["seq"] + 1), generator=gen) for _ in range(steps)]
    return gpt, data, Clock(torch.cuda.synchronize)


def _fit(setup: str, variant: str, precision: str, m: dict[str, int], steps: int) -> list[float]:
    """One fit of ``steps`` steps; the step times (CUDA-synchronised at each step start, slowest rank)."""
    import torch

    from precision_base.testing.launch import ensure_process_group, world_size
    from precision_base.testing.models import GPTBlock

    world, rank = world_size(), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    (gpt, data, clock), block_cls = _start(m, steps, 1000 + rank), GPTBlock
    if variant == "hand":
        ensure_process_group("nccl")
        _hand(setup, precision, gpt, block_cls, data, clock.tick)
    else:
        _lightning(setup, variant, precision, gpt, block_cls, data, clock.tick, world)
    return list(clock.result(0)["times"])


def _lightning(
    setup: str, variant: str, precision: str, gpt: Any, block_cls: Any, data: Any, tick: Any, world: int
) -> None:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

    import precision_base
    from bench.runs import bench_module, fsdp2_variant
    from precision_base.testing.models import QUIET

    ours, shard = f"{'deepspeed' if setup == 'deepspeed' else 'fsdp'}:{precision}", cast(Any, None)
    if setup == "fsdp2":
        trainer_cls, shard, kw = fsdp2_variant(variant, precision)
        strategy: Any = ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1)
    else:
        trainer_cls = precision_base.Trainer if variant == "ours" else pl.Trainer
        kw = {"precision_plugin": precision_base.resolve(ours)} if variant == "ours" else {"precision": precision}
        strategy = FSDPStrategy(auto_wrap_policy={block_cls}) if setup == "fsdp1" else "deepspeed_stage_2"
    module = bench_module(gpt, lambda net, tokens: _loss(net(tokens[:, :-1]), tokens), tick, 1e-4, shard=shard)
    trainer = trainer_cls(accelerator="cuda", devices=world, strategy=strategy, max_steps=len(data), **kw, **QUIET)
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=None))


def _hand(setup: str, precision: str, net: Any, block_cls: Any, data: Any, tick: Any) -> None:
    import torch
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    from bench.runs import backward_and_step

    low, dev = torch.bfloat16 if precision == "bf16-mixed" else torch.float16, torch.device("cuda")
    net = net.to(dev)
    if setup == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        mp = MixedPrecision(param_dtype=low, reduce_dtype=torch.float32, buffer_dtype=low)
        net = FullyShardedDataParallel(net, auto_wrap_policy=ModuleWrapPolicy({block_cls}), mixed_precision=mp)
    elif setup == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        for module in [*net.blocks, net]:
            fully_shard(module, mp_policy=MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32))
    scaler = (ShardedGradScaler if setup == "fsdp1" else torch.amp.GradScaler)("cuda", enabled=low == torch.float16)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    if setup == "deepspeed":
        import deepspeed

        config = {"train_micro_batch_size_per_gpu": len(data[0]), "gradient_accumulation_steps": 1,
                  "zero_allow_untested_optimizer": True, "zero_optimization": {"stage": 2, "overlap_comm": True},
                  ("bf16" if low == torch.bfloat16 else "fp16"): {"enabled": True}}  # fmt: skip
        engine, *_ = deepspeed.initialize(model=net, optimizer=opt, config=config)
    for tokens in data:
        tick()
        tokens = tokens.to(dev, non_blocking=True)
        if setup == "deepspeed":
            engine.backward(_loss(engine(tokens[:, :-1]), tokens))
            engine.step()
            continue
        with torch.autocast("cuda", dtype=low):
            logits = net(tokens[:, :-1])
        backward_and_step(_loss(logits, tokens), opt, scaler)
    tick()


def worker(args: dict[str, Any]) -> dict[str, Any]:
    """Inside each rank: interleaved rounds of every (setup, precision, variant) until the budget is spent."""
    import torch

    deadline, rng = time.time() + args["budget_s"], random.Random(0)
    samples, errors, skipped = dict[str, list[list[float]]](), dict[str, str](), list[str]()
    for _, setup, precision in itertools.product(range(args["rounds"]), args["setups"], args["precisions"]):
        for variant in rng.sample(VARIANTS, len(VARIANTS)):
            key = f"{setup}|{precision}|{variant}"
            if key in errors or time.time() > deadline:
                skipped += [key] if key not in errors else []
                continue
            try:
                times = _fit(setup, variant, precision, args["model"], args["warmup"] + args["steps"])
                samples.setdefault(key, []).append(times[args["warmup"] :])
            except Exception as exc:  # one broken combination must not lose the others' results
                errors[key] = f"{type(exc).__name__}: {exc}"[:500]
            torch.cuda.empty_cache()
    return {"samples": samples, "errors": errors, "skipped": sorted(set(skipped))}


def fp8_fit(spec: str, m: dict[str, int], steps: int, warmup: int) -> dict[str, Any]:
    """One fit on one GPU under ``spec``: parameters, tokens/s (median step after ``warmup``), peak memory (GiB)."""
    import torch

    import precision_base
    from bench.runs import bench_module
    from precision_base.testing.models import QUIET

    gc.collect()  # the previous spec's Trainer and model (reference cycles) must not count in this peak
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    gpt, data, clock = _start(m, steps, 0)
    module = bench_module(gpt, lambda net, tokens: _loss(net(tokens[:, :-1]), tokens), clock.tick, 1e-4)
    trainer = precision_base.Trainer(precision_plugin=spec, accelerator="cuda", devices=1, max_steps=steps, **QUIET)
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=None))
    step_s = report.summarize(clock.result(warmup)["times"])
    return {"spec": spec, "parameters": sum(p.numel() for p in gpt.parameters()), "step_s": step_s,
            "tokens_per_s": m["batch"] * m["seq"] / step_s["median"],
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
            "converted_linears": len(getattr(trainer.precision_plugin, "fp8_converted", []))}  # fmt: skip


def fp8_main(args: argparse.Namespace, start: float) -> int:
    """``--fp8``: every spec of :data:`FP8_SPECS` in turn, ratios to the first; JSON + markdown + PNG."""
    from precision_fsdp.float8 import hardware_problem

    no_torchao = 'torchao is not installed: pip install "precision-fsdp[fp8]"'
    reason = hardware_problem() if find_spec("torchao") else no_torchao
    if reason is not None:
        print(f"fp8 GPU benchmark skipped: {reason}")
        return 0
    import torch

    m = {**FP8_MODEL, "layers": args.layers or FP8_MODEL["layers"]}
    results = [fp8_fit(spec, m, args.warmup + args.steps, args.warmup) for spec in FP8_SPECS]
    for r in results:
        r["tokens_per_s_vs_bf16_mixed"] = r["tokens_per_s"] / results[0]["tokens_per_s"]
        r["memory_vs_bf16_mixed"] = r["peak_memory_gib"] / results[0]["peak_memory_gib"]
    rows = [[r["spec"], f"{r['parameters']:,}", r["converted_linears"], f"{r['tokens_per_s']:,.0f}",
             f"{r['tokens_per_s_vs_bf16_mixed']:.3f}", f"{r['peak_memory_gib']:.2f}",
             f"{r['memory_vs_bf16_mixed']:.3f}"] for r in results]  # fmt: skip
    header = ["spec", "parameters", "fp8 Linears", "tokens/s", "vs bf16-mixed", "peak GiB", "vs bf16-mixed"]
    name = torch.cuda.get_device_name(0)
    body = f"{name}; model {m}; {args.steps} steps after {args.warmup} warm-up.\n\n" + report.md_table(header, rows)

    def plot(plt: Any) -> Any:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for j, key in enumerate(("tokens_per_s_vs_bf16_mixed", "memory_vs_bf16_mixed")):
            ax.bar([i + (j - 0.5) * 0.4 for i in range(len(results))], [r[key] for r in results], 0.4, label=key)
        ax.set_xticks(range(len(results)), [r["spec"] for r in results], fontsize=8)
        ax.legend(fontsize=8)
        return fig

    paths = report.write(args.out, "fp8-gpu", "GPU: FP8 against bf16-mixed", body, plot, start, quick=False,
                         machine={**report.machine_info(), "gpu": name}, config={"model": m, "steps": args.steps,
                         "warmup": args.warmup}, results=results, findings=[])  # fmt: skip
    print(f"gpu_bench --fp8 -> {paths[0]}")
    return 0


# ---- in the driver -------------------------------------------------------------------------------------------
def analyse(raw: dict[str, Any], m: dict[str, int], peak: float | None, gpus: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, rounds in raw["samples"].items():
        setup, precision, variant = key.split("|")
        s = report.summarize([t for r in rounds for t in r])
        tps = m["batch"] * m["seq"] * gpus / s["median"]
        entry = out.setdefault(f"{setup}|{precision}", {"variants": {}, "ratios": {}})
        entry["variants"][variant] = dict(step_s=s, tokens_per_s=tps, mfu=mfu(tps, m, peak, gpus), rounds=rounds)
    for entry in out.values():
        v = entry["variants"]
        for a, b in (("ours", "builtin"), ("ours", "hand"), ("builtin", "hand")):
            if a in v and b in v:
                pa, pb = ([t for r in v[x]["rounds"] for t in r] for x in (a, b))
                entry["ratios"][f"{a}/{b}"] = report.ratio(pa, pb, v[a]["rounds"], v[b]["rounds"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=0, help="GPUs to use (default: all visible)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting new fits after this many s")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense half-precision peak per GPU")
    parser.add_argument("--out", type=Path, default=report.ROOT / "build" / "benchmarks")
    parser.add_argument("--fp8", action="store_true", help="fp8-tensorwise/-rowwise vs bf16-mixed, ~1B GPT, one GPU")
    parser.add_argument("--layers", type=int, default=0, help="--fp8: GPT blocks (default 18; fewer for small GPUs)")
    args = parser.parse_args(argv)
    if args.fp8:
        return fp8_main(args, time.perf_counter())
    import torch

    if not torch.cuda.is_available():
        print("gpu_bench.py needs a CUDA GPU; none is visible here.", file=sys.stderr)
        return 2
    name, world = torch.cuda.get_device_name(0), args.devices or torch.cuda.device_count()
    peak = peak_tflops(name, args.peak_tflops)
    config = {"model": MODEL, "flops_per_token": flops_per_token(MODEL), "peak_tflops_per_gpu": peak, "gpus": world,
              "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup, "budget_s": args.budget_s,
              "setups": args.setups.split(","), "precisions": args.precisions.split(",")}  # fmt: skip
    start, threads, cwd = time.perf_counter(), max(1, (os.cpu_count() or 2) // world), Path(__file__).parent
    raw = run_ranks("gpu_bench:worker", config, world=world, threads=threads, timeout=args.budget_s + 300, cwd=cwd)
    results = analyse(raw, MODEL, peak, world)
    rows = []
    for key, e in results.items():
        for v, x in e["variants"].items():
            ratios = [report.fmt_ratio(e["ratios"][r]) if v == "ours" and r in e["ratios"] else "" for r in RATIOS]
            rows.append([*key.split("|"), v, f"{x['step_s']['median'] * 1e3:.2f}", f"{x['tokens_per_s']:,.0f}",
                         "-" if x["mfu"] is None else f"{x['mfu']:.1%}", *ratios])  # fmt: skip
    body = (
        f"{name} x {world}; model {MODEL}; {args.rounds} interleaved rounds x {args.steps} steps ({args.warmup} "
        f"warm-up steps dropped per fit); MFU at {peak} TFLOP/s per GPU.\n\n"
        + report.md_table(["setup", "precision", "variant", "step ms", "tokens/s", "MFU", *RATIOS], rows)
        + "".join(f"\n\nFailed: {k}: {e}" for k, e in raw["errors"].items())
        + (f"\n\nNot run (budget spent): {', '.join(raw['skipped'])}" if raw["skipped"] else "")
    )

    def plot(plt: Any) -> Any:
        fig, ax = plt.subplots(figsize=(9, 4))
        for i, e in enumerate(results.values()):
            for j, v in enumerate(VARIANTS):
                if v in e["variants"]:
                    label = v if i == 0 else None
                    ax.bar(i + (j - 1) * 0.27, e["variants"][v]["tokens_per_s"], 0.27, color=f"C{j}", label=label)
        ax.set_xticks(range(len(results)), [k.replace("|", "\n") for k in results], fontsize=7)
        ax.set_ylabel("tokens/s (all GPUs)")
        ax.legend(fontsize=8)
        return fig

    findings = [f"{k} ours/builtin = {report.fmt_ratio(r)}: {r['verdict']}" for k, e in results.items()
                if (r := e["ratios"].get("ours/builtin"))]  # fmt: skip
    results_all = {"by_setup": results, "errors": raw["errors"], "skipped": raw["skipped"]}
    paths = report.write(args.out, "gpu", "GPU: step overhead and throughput", body, plot, start, quick=False,
                         machine={**report.machine_info(), "gpu": name}, config=config, results=results_all,
                         findings=findings)  # fmt: skip
    print(f"gpu_bench: {time.perf_counter() - start:.0f} s -> {paths[0]}")
    return 1 if raw["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
