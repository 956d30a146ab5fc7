"""Real multi-process runs for this repository's tests, benchmarks and examples (not published).

``run_ranks``, ``world_size`` and ``leave_rank`` are the conformance kit's launcher,
:mod:`precision_base.testing.ranks` (each rank runs ``python -m precision_base.testing.ranks TARGET ARGS OUT``); a
failed run raises ``precision_base.errors.LaunchError``::

    from precision_testsupport.launch import run_ranks

    result = run_ranks("tests/_train.py:train", {"precision": "bf16-mixed"}, world=2)

``process_group`` is the in-process alternative: a real world of one, for unit tests of code that needs an
initialised process group (FSDP2's ``fully_shard``, DTensors). ``ensure_process_group`` joins the launch's group
inside a rank. A script run as a user would (Lightning's launcher starting its second process) ends with
``leave_rank(main())``: no abort at interpreter teardown. Importing this module imports no torch.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from precision_base.testing.ranks import leave_rank, run_ranks, world_size

__all__ = ["ensure_process_group", "leave_rank", "process_group", "run_ranks", "world_size"]


def ensure_process_group(backend: str = "gloo") -> None:
    """Join the launch's process group (from the environment ``run_ranks`` set) unless one exists."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend, rank=int(os.environ.get("RANK", "0")), world_size=world_size())


@contextlib.contextmanager
def process_group(backend: str = "gloo", store_dir: Path | str | None = None) -> Iterator[None]:
    """A real one-rank process group in this process for the block, unless one is initialised already.

    Args:
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (CUDA).
        store_dir: folder for the file store (default: a new temp dir).
    """
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    store = Path(store_dir or tempfile.mkdtemp(prefix="pg-")) / "store"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
