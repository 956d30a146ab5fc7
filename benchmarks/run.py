"""Run the CPU benchmarks (see benchmarks/README.md): each writes <name>.json, .md and .png, then index.md."""

from __future__ import annotations

import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench import audit, discovery, measure, memory, numerics, overhead, report
from tools.docgen import benchmark_index

CACHE = Path(tempfile.gettempdir()) / "precision-plugins-bench"
MODELS, BACKENDS = ("mlp", "llama", "resnet"), ("fsdp", "deepspeed")  # the overhead benchmarks, in this order


def benchmarks(cache: Path = CACHE) -> dict[str, Callable[[bool], dict[str, Any]]]:
    """Every benchmark, in the order they run: name -> ``run(quick)``, its data for :func:`bench.report.save`."""
    every = {overhead.name_of(b, m): partial(overhead.run, backend=b, model=m) for m in MODELS for b in BACKENDS}
    every["discovery"] = partial(discovery.run, cache=cache)
    every.update({"memory": memory.run, "memory-real": memory.run_real, "numerics": numerics.run, "audit": audit.run})
    return {**every, "measure": measure.run}


def main(argv: list[str] | None = None) -> int:
    names = list(benchmarks())
    parser = report.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="few samples: a smoke test of every benchmark")
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(names)}")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where discovery keeps its venvs between runs")
    parser.add_argument("--keep-going", action="store_true", help="run the other benchmarks when one fails")
    args = report.parse(parser, argv)
    chosen = report.choose(parser, "benchmark", args.only or ",".join(names), names)
    if args.update_docs and args.quick:
        parser.error("--update-docs publishes results: run it without --quick")
    runs, failed = benchmarks(args.cache), []
    for name in chosen:
        start = time.perf_counter()
        print(f"[bench] {name} ...", flush=True)
        try:
            machine = report.machine_info()
            paths = report.save(args.out, name, start, quick=args.quick, machine=machine, **runs[name](args.quick))
        except Exception:
            failed.append(name)
            traceback.print_exc()
            if not args.keep_going:
                break
        else:
            print(f"[bench] {name}: {time.perf_counter() - start:.0f} s -> {', '.join(map(str, paths))}", flush=True)
    print(f"[bench] index: {benchmark_index.write(args.out)}")
    if failed:
        print(f"[bench] FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
