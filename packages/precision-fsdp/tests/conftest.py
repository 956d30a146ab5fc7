"""Fixtures for precision-fsdp's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from precision_base.testing.launch import process_group


@pytest.fixture(scope="module")
def world_of_one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A real single-process gloo process group, so FSDP2 (``fully_shard``) and DTensors work in one process."""
    with process_group("gloo", tmp_path_factory.mktemp("pg")):
        yield


@pytest.fixture
def cpu_mesh(world_of_one: None) -> object:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (1,))
