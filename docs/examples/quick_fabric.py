"""The same name with Lightning Fabric: ``precision_base.Fabric`` is
``lightning.fabric.Fabric`` with ``precision_plugin=``. Runs as written on a CPU-only
machine. The model is set up first and the optimizer made from the set-up (sharded)
model's parameters: FSDP2 replaces every parameter, so an optimizer made before it would
hold stale ones (``fabric.setup(model, optimizer)`` is refused with
``StaleOptimizerError``)."""

import torch

from precision_base import Fabric

if __name__ == "__main__":
    fabric = Fabric(precision_plugin="fsdp:bf16-mixed")
    fabric.launch()
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 1)
    )
    model = fabric.setup_module(model)
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-3))
    for _ in range(4):
        x = torch.randn(8, 16, device=fabric.device)
        loss = torch.nn.functional.mse_loss(model(x).float(), x[:, :1])
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    print(
        type(fabric.strategy).__name__,
        type(fabric.strategy.precision).__name__,
        f"loss {loss.item():.3f}",
    )
