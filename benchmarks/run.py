"""Run the CPU benchmarks (see benchmarks/README.md): each writes <name>.json, .md and .png, then index.md."""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench import discovery, index, memory, memory_real, numerics, overhead, report

OVERHEAD = {overhead.name_of(b, m): (b, m) for m in ("mlp", "llama", "resnet") for b in ("fsdp", "deepspeed")}
OPTIONAL = tuple(n for n in ("audit",) if importlib.util.find_spec(f"bench.{n}"))  # bench/<name>.py with run()
BENCHMARKS = (*OVERHEAD, "discovery", "memory", "memory-real", "numerics", *OPTIONAL)
DOCS = report.ROOT / "docs" / "benchmarks"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few samples: a smoke test of every benchmark")
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, default=report.ROOT / "build" / "benchmarks", help="output folder")
    where.add_argument("--update-docs", action="store_true", help=f"write into {DOCS.relative_to(report.ROOT)}")
    cache = Path(tempfile.gettempdir()) / "precision-plugins-bench"
    parser.add_argument("--cache", type=Path, default=cache, help="where discovery keeps its venvs between runs")
    parser.add_argument("--keep-going", action="store_true", help="run the other benchmarks when one fails")
    args = parser.parse_args(argv)
    chosen = [b.strip() for b in args.only.split(",") if b.strip()] or list(BENCHMARKS)
    if unknown := [b for b in chosen if b not in BENCHMARKS]:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    if args.update_docs and args.quick:
        parser.error("--update-docs publishes results: run it without --quick")
    out = DOCS if args.update_docs else args.out
    failed = []
    for name in chosen:
        start = time.perf_counter()
        print(f"[bench] {name} ...", flush=True)
        try:
            machine = report.machine_info()
            if name in OVERHEAD:
                paths = overhead.run(args.quick, machine, out, *OVERHEAD[name])
            elif name in OPTIONAL:
                paths = importlib.import_module(f"bench.{name}").run(args.quick, machine, out)
            elif name == "discovery":
                paths = discovery.run(args.quick, machine, out, args.cache)
            else:
                paths = {"memory": memory, "memory-real": memory_real, "numerics": numerics}[name].run(
                    args.quick, machine, out
                )
        except Exception:
            failed.append(name)
            traceback.print_exc()
            if not args.keep_going:
                break
        else:
            print(f"[bench] {name}: {time.perf_counter() - start:.0f} s -> {', '.join(map(str, paths))}", flush=True)
    print(f"[bench] index: {index.write(out)}")
    if failed:
        print(f"[bench] FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
