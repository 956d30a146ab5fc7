"""The conformance kit's launcher: N real ranks joined by a gloo process group (the audited 2-process fit runs in it).

``run_ranks`` starts every rank itself, the way ``torchrun`` does (``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``,
``RANK``, ``LOCAL_RANK``, ``NODE_RANK``), so Lightning sees processes created externally and launches nothing; no
script has to be re-run by Lightning's launcher. Each rank runs ``python -m precision_base.testing.ranks TARGET
ARGS OUT``, imports ``TARGET`` (``"package.module:function"`` or ``"path/to/file.py:function"``), calls
``function(args)`` and rank 0 writes the JSON-serialisable return value::

    from precision_base.testing.ranks import run_ranks

    result = run_ranks("tests/_train.py:train", {"precision": "bf16-mixed"}, world=2)

A plugin's own multi-process tests can use it too. Importing this module imports no torch. A script whose second
process Lightning's launcher starts ends with ``leave_rank(main())`` for the same clean exit as these ranks.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from precision_base.errors import LaunchError

__all__ = ["leave_rank", "run_ranks", "world_size"]

_NOT_OURS = ("GROUP_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "SLURM_JOB_NAME")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_env(rank: int, world: int, port: int, threads: int, extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _NOT_OURS}  # never mistaken for torchelastic or SLURM
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(world),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        NODE_RANK="0",
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PYTHONHASHSEED="0",
    )
    env.update(extra)
    return env


def run_ranks(
    target: str,
    args: Mapping[str, Any],
    *,
    world: int = 2,
    threads: int | None = None,
    timeout: float = 600.0,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    log_dir: Path | None = None,
) -> Any:
    """Run ``target`` in ``world`` processes and return what rank 0's call returned.

    Args:
        target: ``"package.module:function"`` or ``"path/to/file.py:function"``; called as ``function(dict(args))``
            in every rank; rank 0's return value must be JSON-serialisable.
        args: JSON-serialisable arguments.
        world: number of ranks.
        threads: ``OMP_NUM_THREADS`` per rank (default: usable cores // world, at least 1).
        timeout: seconds for the whole run; then every rank is killed.
        cwd: working directory of the ranks (on ``sys.path`` there, as for ``python -m``); default: a temp dir.
        env: extra environment variables for every rank.
        log_dir: where the per-rank logs go (a new folder inside it); default: the system temp dir.

    Raises:
        LaunchError: a rank exited non-zero or timed out, or rank 0 wrote no result.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = threads or max(1, cores // world)
    work = Path(tempfile.mkdtemp(prefix="ranks-", dir=log_dir))
    (work / "args.json").write_text(json.dumps(dict(args)))
    out = work / "out.json"
    port = _free_port()
    cmd = [sys.executable, "-m", "precision_base.testing.ranks", target, str(work / "args.json"), str(out)]
    logs = [open(work / f"rank{rank}.log", "w") for rank in range(world)]  # noqa: SIM115 - closed below
    procs = [
        subprocess.Popen(
            cmd,
            env=_rank_env(rank, world, port, threads, env or {}),
            cwd=str(cwd or work),
            stdout=logs[rank],
            stderr=subprocess.STDOUT,
        )
        for rank in range(world)
    ]
    deadline = time.monotonic() + timeout
    failed = ""
    try:  # the first rank to fail names the failure (the others may be blocked in a collective waiting for it)
        codes = [proc.poll() for proc in procs]
        while not failed and any(code != 0 for code in codes):
            failed = next((f"rank {r} exited {c}" for r, c in enumerate(codes) if c not in (None, 0)), "")
            if not failed and time.monotonic() > deadline:
                failed = f"timed out after {timeout:.0f} s"
            time.sleep(0.05)
            codes = [proc.poll() for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
    if failed or not out.exists():
        tails = "\n".join(
            f"--- rank {rank} ({work / f'rank{rank}.log'}) ---\n"
            + (work / f"rank{rank}.log").read_text(errors="replace")[-6000:]
            for rank in range(world)
        )
        raise LaunchError(f"{target} in {world} ranks: {failed or 'rank 0 wrote no result'}\n{tails}")
    return json.loads(out.read_text())


_WORLD = int(os.environ.get("WORLD_SIZE", "1"))


def world_size() -> int:
    """This launch's world size; puts ``WORLD_SIZE`` back, which Lightning's environment deletes in its teardown.

    Call it before a second ``Trainer`` in the same rank (DeepSpeed reads the variable again).
    """
    os.environ["WORLD_SIZE"] = str(_WORLD)
    return _WORLD


def _load(target: str) -> Callable[[dict[str, Any]], Any]:
    where, _, name = target.rpartition(":")
    if where.endswith(".py"):
        path = Path(where).resolve()
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module  # so that pickling and dataclasses find it
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    function: Callable[[dict[str, Any]], Any] = getattr(module, name)
    return function


def _main(argv: list[str]) -> int:
    target, args_path, out_path = argv
    result = _load(target)(json.loads(Path(args_path).read_text()))
    if int(os.environ.get("RANK", "0")) == 0:
        tmp = Path(out_path + ".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(out_path)
    return 0


def _close_process_group() -> None:
    """Tear down a process group the target left open, every rank together: exiting with gloo's threads still
    running can abort a rank at interpreter shutdown ("terminate called without an active exception", exit -6)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def leave_rank(code: int = 0) -> NoReturn:
    """End a rank whose work is done and whose results are written: close the process group it left open (every
    rank together), flush stdout and stderr, and exit with ``code`` without the interpreter's teardown.

    That teardown is where a gloo thread still joinable aborts the process after the fact ("terminate called
    without an active exception", exit -6; seen with torch 2.13 on CPU about once in 70 two-process runs, plain
    Lightning DDP included). Call it only on success: an exception should propagate as usual (traceback, exit 1).
    """
    _close_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave_rank(_main(sys.argv[1:]))
