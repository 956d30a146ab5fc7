"""Run every CPU benchmark and write JSON, markdown and a PNG per benchmark (``nox -s bench`` runs this).

    python benchmarks/run.py                 # everything, into docs/benchmarks/ (about 15 minutes on 2 cores)
    python benchmarks/run.py --quick         # smoke run (under 2 minutes), into benchmarks/_quick/
    python benchmarks/run.py --only discovery,numerics
    python benchmarks/run.py --out /tmp/results

Benchmarks: ``overhead-fsdp``, ``overhead-deepspeed`` (per-step time: ours vs Lightning's built-in vs a
hand-written loop), ``discovery`` (fresh-interpreter cost of finding and resolving plugins), ``memory`` (bytes
per rank under FSDP2 and ZeRO 1/2/3), ``numerics`` (final loss against 32-true). ``docs/benchmarks/index.md``
is rebuilt from whatever results the output folder holds. On a CUDA machine run ``benchmarks/gpu_bench.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench.machine import machine_info  # noqa: E402
from bench.report import DOCS  # noqa: E402

BENCHMARKS = ("overhead-fsdp", "overhead-deepspeed", "discovery", "memory", "numerics")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few samples: a smoke test of every benchmark")
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: docs/benchmarks, or benchmarks/_quick with --quick)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "precision-plugins-bench",
        help="where the discovery benchmark keeps its venvs between runs",
    )
    parser.add_argument("--keep-going", action="store_true", help="run the other benchmarks when one fails")
    args = parser.parse_args(argv)
    chosen = [b.strip() for b in args.only.split(",") if b.strip()] or list(BENCHMARKS)
    unknown = [b for b in chosen if b not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    args.chosen = chosen
    if args.out is None:
        args.out = HERE / "_quick" if args.quick else DOCS
    return args


def run_one(name: str, args: argparse.Namespace) -> list[Path]:
    machine = machine_info()
    logs = args.cache / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if name.startswith("overhead-"):
        from bench import overhead

        return overhead.run(args.quick, machine, args.out, backends=[name.removeprefix("overhead-")], log_dir=logs)
    if name == "discovery":
        from bench import discovery

        return discovery.run(args.quick, machine, args.out, args.cache)
    if name == "memory":
        from bench import memory

        return memory.run(args.quick, machine, args.out, log_dir=logs)
    if name == "numerics":
        from bench import numerics

        return numerics.run(args.quick, machine, args.out, log_dir=logs)
    raise ValueError(name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DS_BUILD_OPS", "0")
    os.environ.setdefault("DS_SKIP_CUDA_CHECK", "1")
    total = time.perf_counter()
    durations: dict[str, float] = {}
    failed: list[str] = []
    for name in args.chosen:
        start = time.perf_counter()
        print(f"[bench] {name} ...", flush=True)
        try:
            paths = run_one(name, args)
        except Exception:
            failed.append(name)
            traceback.print_exc()
            if not args.keep_going:
                break
            continue
        finally:
            durations[name] = time.perf_counter() - start
        print(f"[bench] {name}: {durations[name]:.0f} s -> {', '.join(str(p) for p in paths)}", flush=True)
    from bench import index

    index.write(args.out, durations)
    print(
        f"[bench] total {time.perf_counter() - total:.0f} s; "
        + ", ".join(f"{k} {v:.0f} s" for k, v in durations.items())
    )
    if failed:
        print(f"[bench] FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
