"""Lightning Fabric: the same name, ``precision_base.Fabric(precision_plugin="fsdp:bf16-mixed")``, 2 CPU processes.

``train`` runs in each of the 2 processes (started by ``examples/demo.py``). ``strategy="auto"`` becomes
``precision_fsdp.fabric.FSDP2Strategy``, which shards the model with FSDP2 by a default policy and the plugin's
dtypes; the loop is plain Fabric: ``fabric.setup``, ``fabric.backward``, ``optimizer.step``.
"""

from __future__ import annotations

from typing import Any

SPEC = "fsdp:bf16-mixed"


def train(args: dict[str, Any]) -> dict[str, Any] | None:
    import torch

    from precision_base import Fabric
    from precision_testsupport.models import dtype_name, mlp, regression_data

    torch.set_num_threads(1)
    fabric = Fabric(precision_plugin=args["spec"], accelerator="cpu", devices=2)
    fabric.launch()
    fabric.seed_everything(0)
    module = mlp(features=16, hidden=32, out=1)
    model = fabric.setup_module(module)
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = fabric.to_device(regression_data(16, samples=64)[fabric.global_rank :: 2])
    compute: list[str] = []
    model.module[0].register_forward_hook(lambda _m, _a, out: compute.append(dtype_name(out.dtype)))
    losses = []
    for _ in range(8):
        loss = torch.nn.functional.mse_loss(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    if fabric.global_rank != 0:
        return None
    plugin = fabric.strategy.precision
    return {
        "plugin": f"{type(plugin).__module__}.{type(plugin).__qualname__}",
        "strategy": type(fabric.strategy).__name__,
        "loss": f"{losses[0]:.4f} -> {losses[-1]:.4f}",
        "sharded parameters": sorted({dtype_name(p.dtype) for p in model.parameters()}),
        "compute": compute[-1],
    }
