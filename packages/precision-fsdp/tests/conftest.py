"""Fixtures for precision-fsdp's unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist


def single_process_group(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[None]:
    """Body of a fixture: a real one-rank process group on ``backend``, unless one already exists."""
    if dist.is_initialized():
        yield
        return
    store = Path(tmp_path_factory.mktemp("pg")) / "store"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def world_of_one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A real single-process gloo process group, so FSDP2 (``fully_shard``) and DTensors work in one process."""
    yield from single_process_group(tmp_path_factory, "gloo")


@pytest.fixture
def cpu_mesh(world_of_one: None) -> object:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (1,))


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
