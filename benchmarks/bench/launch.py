"""Start N training processes the way ``torchrun`` would, run one function in each, collect rank 0's result.

Each rank runs ``python -m bench.worker <module:function> <args.json> <out.json>`` with ``MASTER_ADDR``,
``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and ``NODE_RANK`` set. Lightning then sees processes
created externally (its ``LightningEnvironment``) and launches nothing itself, so a benchmark never re-runs its
own script; ``torch.distributed`` and DeepSpeed read the same variables. Threads per rank default to
``cores // N`` so that N ranks do not oversubscribe the CPU.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parents[1]


class LaunchError(RuntimeError):
    """A rank failed or timed out; the message carries the tail of each rank's log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(rank: int, world: int, port: int, threads: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one rank: the distributed variables, thread counts, DeepSpeed on its CPU accelerator."""
    env = dict(os.environ if base is None else base)
    for key in ("GROUP_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "SLURM_JOB_NAME"):
        env.pop(key, None)  # never let Lightning mistake this for torchelastic or SLURM
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(world),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        NODE_RANK="0",
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        DS_ACCELERATOR="cpu",
        DS_BUILD_OPS="0",
        DS_SKIP_CUDA_CHECK="1",
        PYTHONHASHSEED="0",
        PYTHONWARNINGS="ignore",
        PYTHONPATH=os.pathsep.join([str(BENCH_DIR), *filter(None, [env.get("PYTHONPATH")])]),
    )
    return env


def launch(
    target: str,
    args: dict[str, Any],
    *,
    world: int = 2,
    threads: int | None = None,
    timeout: float = 600.0,
    log_dir: Path | None = None,
) -> Any:
    """Run ``target`` (``"module:function"``, called as ``function(args)``) in ``world`` ranks; return rank 0's result.

    Raises:
        LaunchError: a rank exited non-zero, or the run took longer than ``timeout`` seconds (all ranks are killed).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = threads or max(1, cores // world)
    work = Path(tempfile.mkdtemp(prefix="bench-", dir=log_dir))
    (work / "args.json").write_text(json.dumps(args))
    out = work / "out.json"
    port = free_port()
    procs = []
    logs = []
    for rank in range(world):
        log = open(work / f"rank{rank}.log", "w")  # noqa: SIM115 - closed below
        logs.append(log)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.worker", target, str(work / "args.json"), str(out)],
                env=rank_env(rank, world, port, threads),
                cwd=str(BENCH_DIR),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    deadline = time.monotonic() + timeout
    failed: list[str] = []
    try:
        for rank, proc in enumerate(procs):
            left = max(1.0, deadline - time.monotonic())
            try:
                code = proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                failed.append(f"rank {rank} timed out after {timeout:.0f} s")
                break
            if code != 0:
                failed.append(f"rank {rank} exited {code}")
                break
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
    if failed or not out.exists():
        tails = []
        for rank in range(world):
            text = (work / f"rank{rank}.log").read_text(errors="replace")
            tails.append(f"--- rank {rank} log ({work / f'rank{rank}.log'}) ---\n{text[-6000:]}")
        raise LaunchError(f"{target} in {world} ranks: {'; '.join(failed) or 'no result written'}\n" + "\n".join(tails))
    return json.loads(out.read_text())
