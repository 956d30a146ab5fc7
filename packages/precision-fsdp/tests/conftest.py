"""Fixtures for precision-fsdp's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from precision_testsupport.launch import process_group


@pytest.fixture(scope="module")
def world_of_one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A real single-process gloo process group, so FSDP2 (``fully_shard``) and DTensors work in one process."""
    with process_group("gloo", tmp_path_factory.mktemp("pg")):
        yield


@pytest.fixture
def fsdp2_on_cpu() -> None:
    """Skips, with the exact reason, where the installed torch's FSDP2 cannot run on a CPU (torch < 2.7; GPUs are
    unaffected). tests/test_compat.py proves the detection right in every cell by a real FSDP2 step."""
    from precision_fsdp._compat import fsdp2_cpu_problem

    problem = fsdp2_cpu_problem()
    if problem is not None:
        pytest.skip(f"FSDP2 on CPU needs a newer torch: {problem}")


@pytest.fixture
def cpu_mesh(world_of_one: None, fsdp2_on_cpu: None) -> object:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (1,))
