"""precision_testsupport.launch: real ranks joined by gloo, a clear error when one fails, a world of one in-process."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from precision_base.errors import LaunchError
from precision_testsupport.launch import process_group, run_ranks

torch = pytest.importorskip("torch")

RANKS = textwrap.dedent("""
    import os

    import torch
    import torch.distributed as dist

    from precision_testsupport.launch import ensure_process_group, world_size


    def total(args):
        ensure_process_group()
        value = torch.tensor([float(os.environ["RANK"]) + args["add"]])
        dist.all_reduce(value)
        return {"sum": value.item(), "world": world_size(), "rank": dist.get_rank()}


    def fail(args):
        if os.environ["RANK"] == "1":
            raise RuntimeError("rank 1 refuses")
        ensure_process_group()  # rank 0 waits for rank 1 here, which never comes
        return {}
""")


@pytest.mark.slow
def test_two_ranks_share_a_gloo_group_and_rank_0_answers(tmp_path: Path) -> None:
    (tmp_path / "ranks.py").write_text(RANKS)
    result = run_ranks(f"{tmp_path / 'ranks.py'}:total", {"add": 10.0}, world=2, timeout=120)
    assert result == {"sum": 21.0, "world": 2, "rank": 0}  # (0 + 10) + (1 + 10), answered by rank 0


@pytest.mark.slow
def test_the_failing_rank_is_named_with_its_log_while_the_other_waits(tmp_path: Path) -> None:
    (tmp_path / "ranks.py").write_text(RANKS)
    with pytest.raises(LaunchError, match=r"(?s)rank 1 exited 1.*rank 1 refuses"):
        run_ranks(f"{tmp_path / 'ranks.py'}:fail", {}, world=2, timeout=120)


def test_process_group_is_a_real_world_of_one(tmp_path: Path) -> None:
    import torch.distributed as dist

    with process_group("gloo", tmp_path):
        assert (dist.get_world_size(), dist.get_rank()) == (1, 0)
        value = torch.ones(2)
        dist.all_reduce(value)
        assert value.tolist() == [1.0, 1.0]
    assert not dist.is_initialized()


LEAVES = textwrap.dedent("""
    import atexit
    import sys

    import torch.distributed as dist

    from precision_testsupport.launch import leave_rank

    real_destroy = dist.destroy_process_group


    def destroy(*args, **kwargs):
        real_destroy(*args, **kwargs)
        print(f" group closed: {not dist.is_initialized()}", end="")


    dist.destroy_process_group = destroy
    atexit.register(lambda: print(" interpreter teardown ran", flush=True))
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    print("result written", end="")  # no newline: only a flush shows it
    leave_rank(3)
""")


def test_leave_rank_closes_the_group_flushes_and_skips_the_interpreter_teardown(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "leaves.py"
    script.write_text(LEAVES)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout == "result written group closed: True"  # and no atexit handler: no interpreter teardown
