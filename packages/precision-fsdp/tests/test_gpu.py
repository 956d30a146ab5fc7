"""FSDP1 on a real CUDA GPU, in one process: skipped where torch sees no CUDA GPU (FSDP1 cannot run on CPU: torch
raises "FSDP needs a non-CPU accelerator device"). The 2-GPU Trainer runs live in tests-integration/gpu_fsdp_check.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from lightning.pytorch.plugins.precision import FSDPPrecision as BuiltinFSDPPrecision

from precision_fsdp import FSDPPrecision
from precision_testsupport.launch import process_group
from precision_testsupport.models import mlp

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="FSDP1 needs a CUDA GPU and none is visible to torch"),
]


@pytest.fixture(scope="module")
def cuda_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with process_group("nccl", tmp_path_factory.mktemp("pg")):
        yield


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
def test_fsdp1_dtypes_scaler_and_exact_clipping(precision: str, cuda_world: None) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    if precision == "bf16-mixed" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    plugin = FSDPPrecision(precision)
    model = FullyShardedDataParallel(mlp().cuda(), mixed_precision=plugin.mixed_precision_config, device_id=0)
    plugin.connect(model, [], [])
    assert plugin.fsdp_version == 1
    assert plugin.device_type == "cuda"
    if precision == "16-mixed":
        assert isinstance(plugin.scaler, ShardedGradScaler)
    seen: list[torch.dtype] = []
    model.module[0].register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    with plugin.forward_context():
        out = model(plugin.convert_input(torch.randn(4, 8, device="cuda")))
    assert seen == [getattr(torch, plugin.dtypes().compute)]
    out.float().pow(2).sum().mul(1000).backward()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    plugin.clip_grad_by_norm(optimizer, 0.5)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.float().norm() for p in model.parameters()]))
    torch.testing.assert_close(norm.cpu(), torch.tensor(0.5), rtol=1e-3, atol=1e-4)


def test_scaler_state_moves_between_ours_and_builtin() -> None:
    ours = FSDPPrecision("16-mixed", init_scale=1024.0, growth_interval=9)
    builtin = BuiltinFSDPPrecision("16-mixed")  # its ShardedGradScaler is enabled on a CUDA machine
    builtin.load_state_dict(ours.state_dict())
    assert builtin.state_dict()["scale"] == 1024.0
    assert builtin.state_dict()["growth_interval"] == 9
    back = FSDPPrecision("16-mixed")
    back.load_state_dict(builtin.state_dict())
    assert back.state_dict() == ours.state_dict()
