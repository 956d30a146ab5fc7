"""precision_testsupport.launch: real ranks joined by gloo, a clear error when one fails, a world of one in-process."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from precision_testsupport.launch import LaunchError, process_group, run_ranks

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
