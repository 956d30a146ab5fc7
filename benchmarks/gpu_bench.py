"""GPU benchmark, one command on one CUDA GPU (``nox -s gpu``; at most about 8 minutes): one JSON + markdown + PNG.

Sections (each started only while its share of the time budget lasts; what did not run is listed): ``fits``, ours
vs the built-in (``Trainer(precision=...)``) on TinyGPT (:data:`MODEL`) under FSDP1, FSDP2, ZeRO-2 and ZeRO-3 at
every precision the GPU supports, in interleaved rounds; ``fp8``, fp8-tensorwise / fp8-rowwise vs bf16-mixed on
:data:`FP8_MODEL`, ``torch.compile`` off and on (each block). Every fit runs in one rank process that journals each
result as it finishes: a run stopped by the time limit still reports every fit it completed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from bench import report
from precision_testsupport.launch import run_ranks
from tools.docgen import benchmark_index

SECTIONS = ("fits", "fp8")
SETUPS = ("fsdp1", "fsdp2", "zero2", "zero3")
FSDP_PRECISIONS = ("32-true", "16-true", "16-mixed", "bf16-true", "bf16-mixed")
DEEPSPEED_PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")
VARIANTS = ("ours", "builtin")
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "H800": 989.0, "GH200": 989.0, "A100": 312.0, "A800": 312.0,
               "L40S": 362.0, "L40": 181.0, "L4": 121.0, "A10G": 70.0, "A10": 125.0, "RTX 4090": 165.0,
               "RTX 3090": 71.0, "V100": 125.0, "T4": 65.0}  # fmt: skip
MODEL = {"vocab": 8192, "d_model": 512, "layers": 6, "heads": 8, "seq": 512, "batch": 8}
FP8_SPECS = ("fsdp:bf16-mixed", "fsdp:fp8-tensorwise", "fsdp:fp8-rowwise")
FP8_MODEL = {"vocab": 32000, "d_model": 2048, "layers": 18, "heads": 16, "seq": 1024, "batch": 8}  # ~1B parameters
SHARE = {"fits": 0.5, "fp8": 0.5}  # of the budget, when both sections run
ORDER = ("bf16-mixed", "16-mixed", "32-true", "bf16-true", "16-true")  # the fits' order: most used first, every setup


def peak_tflops(name: str, override: float | None = None) -> float | None:
    """Dense bf16/fp16 tensor-core peak TFLOP/s of a GPU from its name (longest matching key), or ``override``."""
    return override or next((PEAK_TFLOPS[k] for k in sorted(PEAK_TFLOPS, key=len, reverse=True) if k in name), None)


def flops_per_token(m: dict[str, int]) -> float:
    """Training FLOPs per token: 6 x (blocks + tied output projection) + 6 x layers x seq x d_model (attention)."""
    d, n = m["d_model"], m["layers"]
    return 6.0 * (n * 12 * d**2 + m["vocab"] * d) + 6.0 * n * m["seq"] * d


def mfu(tokens_per_s: float, m: dict[str, int], peak: float | None, gpus: int) -> float | None:
    return tokens_per_s * flops_per_token(m) / (peak * 1e12 * gpus) if peak else None


def precisions_for(setup: str, bf16: bool) -> list[str]:
    """The precisions a setup runs on a GPU; bf16 ones only where the GPU supports bf16."""
    allowed = DEEPSPEED_PRECISIONS if setup.startswith("zero") else FSDP_PRECISIONS
    return [p for p in allowed if bf16 or not p.startswith("bf16")]


def plan(args: argparse.Namespace, bf16: bool = True) -> dict[str, Any]:
    """What a run does: the fits in order (ours and the built-in in a shuffled order, per round) and the fp8 fits."""
    rng = random.Random(0)
    fits = []
    if "fits" in args.sections:
        for r in range(args.rounds):
            for precision in ORDER:
                for setup in (s for s in args.setups if precision in precisions_for(s, bf16)):
                    fits += [{"round": r, "setup": setup, "precision": precision, "variant": v}
                             for v in rng.sample(VARIANTS, len(VARIANTS))]  # fmt: skip
    fp8 = [{"spec": s, "compile": c} for c in (False, True) for s in FP8_SPECS] if "fp8" in args.sections else []
    shares = {s: SHARE[s] / sum(SHARE[x] for x in args.sections) for s in args.sections}
    return {"fits": fits, "fp8": fp8, "budget_s": {s: args.budget_s * shares[s] for s in args.sections},
            "model": MODEL, "fp8_model": {**FP8_MODEL, "layers": args.layers or FP8_MODEL["layers"]},
            "steps": args.steps, "warmup": args.warmup, "fp8_steps": args.fp8_steps}  # fmt: skip


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = report.parser(__doc__)
    parser.add_argument("--budget-s", type=float, default=400.0, help="time for the fits of both sections (s)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated: {', '.join(SECTIONS)}")
    parser.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated: {', '.join(SETUPS)}")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of the fits section")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per fit")
    parser.add_argument("--warmup", type=int, default=5, help="steps dropped at the start of every fit")
    parser.add_argument("--fp8-steps", type=int, default=15, help="timed steps per fp8 fit (after --warmup)")
    parser.add_argument("--layers", type=int, default=0, help="fp8 model blocks (default 18: ~1B parameters)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense half-precision peak of the GPU")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit; needs no GPU")
    parser.add_argument("--fp8", action="store_true", help="the fp8 section only (same as --sections fp8)")
    parser.add_argument("--only", default=None, help="the same as --sections (rerun a part)")
    parser.add_argument("--no-index", action="store_true", help="no index pages beside the report (the GPU node)")
    args = report.parse(parser, argv)
    chosen = "fp8" if args.fp8 else args.only or args.sections
    args.sections = report.choose(parser, "section", chosen, SECTIONS)
    args.setups = report.choose(parser, "setup", args.setups, SETUPS)
    if args.steps < 2 or args.warmup < 0 or args.budget_s <= 0:
        parser.error("--steps must be at least 2, --warmup at least 0 and --budget-s positive")
    return args


# ---- inside the rank -------------------------------------------------------------------------------------------
def tokens(m: dict[str, int], steps: int, seed: int) -> list[Any]:
    """``steps`` batches of random token ids (int64, ``(batch, seq + 1)``)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, m["vocab"], (m["batch"], m["seq"] + 1), generator=gen) for _ in range(steps)]


def measure(fit: Callable[[Callable[[], None]], list[float]], warmup: int, device: str) -> dict[str, Any]:
    """Time ``fit(tick)`` (which returns the losses): per-step seconds after ``warmup``, the last loss, peak memory."""
    import torch

    from bench.runs import Clock

    cuda = device == "cuda"
    if cuda:
        gc.collect()  # the previous fit's Trainer and model (reference cycles) must not count in this peak
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    clock = Clock(torch.cuda.synchronize if cuda else lambda: None)
    start = time.perf_counter()
    losses = fit(clock.tick)
    times = clock.result(warmup)["times"]
    return {"step_s": report.summarize(times), "times": times, "losses": losses, "final_loss": losses[-1],
            "peak_memory_bytes": torch.cuda.max_memory_allocated() if cuda else None,
            "fit_s": time.perf_counter() - start}  # fmt: skip


def lightning_fit(setup: str, variant: str, precision: str, net: Any, data: list[Any], accelerator: str = "cuda",
                  compile_blocks: bool = False) -> Callable[[Callable[[], None]], list[float]]:  # fmt: skip
    """``fit(tick)`` training ``net`` on ``data`` (one batch per step) under ``setup`` with ours or the built-in."""

    def fit(tick: Callable[[], None]) -> list[float]:
        import lightning.pytorch as pl
        import torch
        from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy

        import precision_base
        from bench.runs import bench_module, fsdp2_variant, loss_fn, train
        from precision_testsupport.models import GPTBlock

        shard = None
        if setup == "fsdp2":
            trainer_cls, shard, kw = fsdp2_variant(variant, precision)
        elif setup == "single":  # the fp8 section: the plugin picks its own strategy
            trainer_cls, kw = precision_base.Trainer, {"precision_plugin": precision_base.resolve(precision)}
        else:
            backend = "deepspeed" if setup.startswith("zero") else "fsdp"
            trainer_cls = precision_base.Trainer if variant == "ours" else pl.Trainer
            kw = {"precision_plugin": precision_base.resolve(f"{backend}:{precision}")} if variant == "ours" else {
                "precision": precision}  # fmt: skip
            kw["strategy"] = (FSDPStrategy(auto_wrap_policy={GPTBlock}) if backend == "fsdp"
                              else DeepSpeedStrategy(stage=int(setup[-1])))  # fmt: skip
        if compile_blocks:
            for block in net.blocks:
                block.compile()
        module = bench_module(net, lambda n, t: loss_fn(n(t[:, :-1]), t[:, 1:]), tick, 1e-4, shard=shard)
        loader = torch.utils.data.DataLoader(data, batch_size=None)
        trainer = train(trainer_cls, module, loader, len(data), accelerator=accelerator, **kw)
        fit.converted = len(getattr(trainer.precision_plugin, "fp8_converted", []))  # type: ignore[attr-defined]
        return list(module.losses)

    return fit


def _journal(path: str, record: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def worker(args: dict[str, Any]) -> dict[str, Any]:
    """Inside the rank: the fits, then the fp8 fits, each while its section's budget lasts (an fp8 fit: while the
    longest so far, at least 60 s, still fits); a line per fit, or its error, in the journal."""
    import torch

    from precision_testsupport.models import TinyGPT

    p, journal, deadline, longest = args["plan"], args["journal"], time.time(), {"fit": 0.0, "fp8": 60.0}
    for kind, fits, m, steps, seed in (("fit", p["fits"], p["model"], p["steps"], 1000),
                                       ("fp8", p["fp8"], p["fp8_model"], p["fp8_steps"], 0)):  # fmt: skip
        deadline = max(deadline, time.time()) + p["budget_s"].get("fits" if kind == "fit" else "fp8", 0.0)
        for fit in fits:
            net = None
            if time.time() + longest[kind] > deadline:
                _journal(journal, {"kind": kind, **fit, "skipped": "time budget spent"})
                continue
            try:
                with torch.device("cuda"):
                    net = TinyGPT(**{k: v for k, v in m.items() if k != "batch"})
                data = tokens(m, p["warmup"] + steps, seed)
                if kind == "fit":
                    lf = lightning_fit(fit["setup"], fit["variant"], fit["precision"], net, data)
                else:
                    lf = lightning_fit("single", "ours", fit["spec"], net, data, compile_blocks=fit["compile"])
                record = {"kind": kind, **fit, **measure(lf, p["warmup"], "cuda")}
                if kind == "fp8":
                    longest[kind] = max(longest[kind], record["fit_s"])
                    record.update(parameters=sum(x.numel() for x in net.parameters()),
                                  converted_linears=getattr(lf, "converted", 0))  # fmt: skip
                _journal(journal, record)
            except Exception as exc:
                _journal(journal, {"kind": kind, **fit, "error": f"{type(exc).__name__}: {exc}"[:800]})
            del net
            torch.cuda.empty_cache()
    return {"done": True}


# ---- in the driver -------------------------------------------------------------------------------------------
def analyse(records: list[dict[str, Any]], m8: dict[str, int], peak: float | None) -> dict[str, Any]:
    """Fits grouped by (setup, precision): per variant the pooled step summary, peak memory, final loss; ratios."""
    by: dict[str, Any] = {}
    for r in (r for r in records if r["kind"] == "fit" and "step_s" in r):
        v = by.setdefault(f"{r['setup']}|{r['precision']}", {"variants": {}, "ratios": {}})["variants"]
        e = v.setdefault(r["variant"], {"rounds": [], "peak_memory_bytes": [], "final_loss": []})
        e["rounds"].append(r["times"])
        e["peak_memory_bytes"].append(r["peak_memory_bytes"])
        e["final_loss"].append(r["final_loss"])
    for entry in by.values():
        v = entry["variants"]
        step_s, entry["ratios"] = report.compare({x: e["rounds"] for x, e in v.items()}, [("ours", "builtin")])
        for x, e in v.items():
            e["step_s"] = step_s[x]
            e["tokens_per_s"] = MODEL["batch"] * MODEL["seq"] / e["step_s"]["median"]
        if "ours" in v and "builtin" in v:
            entry["memory_ours/builtin"] = max(v["ours"]["peak_memory_bytes"]) / max(v["builtin"]["peak_memory_bytes"])
    fp8 = [r for r in records if r["kind"] == "fp8" and "step_s" in r]
    for r in fp8:
        r["tokens_per_s"] = m8["batch"] * m8["seq"] / r["step_s"]["median"]
        r["mfu"] = mfu(r["tokens_per_s"], m8, peak, 1)
        base = next((b for b in fp8 if b["spec"] == FP8_SPECS[0] and b["compile"] == r["compile"]), None)
        r["tokens_per_s_vs_bf16_mixed"] = r["tokens_per_s"] / base["tokens_per_s"] if base else None
        r["memory_vs_bf16_mixed"] = r["peak_memory_bytes"] / base["peak_memory_bytes"] if base else None
    return {"fits": by, "fp8": fp8,
            "errors": [r for r in records if "error" in r],
            "skipped": [r for r in records if "skipped" in r]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    p = plan(args)
    if args.dry_run:
        print(f"gpu_bench plan: {len(p['fits'])} fits (setups {', '.join(args.setups)}; {args.rounds} round(s); "
              f"bf16 precisions only where the GPU supports bf16) within {p['budget_s'].get('fits', 0):.0f} s, "
              f"{len(p['fp8'])} fp8 fits within {p['budget_s'].get('fp8', 0):.0f} s; "
              f"results into {args.out}")  # fmt: skip
        for fit in p["fits"]:
            print(f"  fit  {fit['setup']:6} {fit['precision']:10} {fit['variant']:8} round {fit['round'] + 1}")
        for fit in p["fp8"]:
            print(f"  fp8  {fit['spec']:20} compile {'on' if fit['compile'] else 'off'}")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_bench.py needs a CUDA GPU and none is visible (torch.cuda.is_available() is False; torch "
              f"{torch.__version__}). Run it on a machine with one CUDA GPU and a CUDA build of torch, or pass "
              "--dry-run to see the plan.", file=sys.stderr)  # fmt: skip
        return 2
    start = time.perf_counter()
    p = plan(args, bf16=torch.cuda.is_bf16_supported())
    name = torch.cuda.get_device_name(0)
    fp8_problem = None
    if "fp8" in args.sections:
        from precision_fsdp.float8.config import hardware_problem

        fp8_problem = hardware_problem() if find_spec("torchao") else "torchao is not installed (precision-fsdp[fp8])"
        if fp8_problem:
            p["fp8"] = []
            spare = p["budget_s"].pop("fp8")  # to the fits where they run (--only fp8: nothing is left to run)
            if "fits" in p["budget_s"]:
                p["budget_s"]["fits"] += spare
    config = {"plan": p, "rounds": args.rounds, "peak_tflops": peak_tflops(name, args.peak_tflops),
              "fp8_problem": fp8_problem, "gpus": 1}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    journal = args.out / "gpu-journal.jsonl"  # beside the report: a run stopped early keeps every finished fit
    journal.write_text("")
    env = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]}
    failure = None
    try:
        report_timeout = sum(p["budget_s"].values()) + 45.0  # a fit that started in time may run past the budget
        run_ranks("gpu_bench:worker", {"plan": p, "journal": str(journal)}, world=1, threads=os.cpu_count(),
                  timeout=report_timeout, cwd=Path(__file__).parent, env=env)  # fmt: skip
    except Exception as exc:  # the journal still holds every completed fit
        failure = f"{type(exc).__name__}: {str(exc)[:2000]}"
    records = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    results = analyse(records, p["fp8_model"], config["peak_tflops"])
    results["run_failure"] = failure
    machine = {**report.machine_info(), "gpu": name}
    paths = report.save(args.out, "gpu", start, quick=False, machine=machine, config=config, results=results)
    if not args.no_index:  # the folder's index pages
        benchmark_index.write(args.out)
    print(f"gpu_bench: {time.perf_counter() - start:.0f} s -> {paths[0]}" + (f" ({failure})" if failure else ""))
    return 1 if failure or results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
