"""FSDP2 under Lightning Fabric with your own ``parallelize_fn``, in 2 processes on CPU,
then save and load.

The plugin's ``fully_shard`` is the one line a ``parallelize_fn`` needs: the dtypes come
from the plugin. Runs as written on a CPU-only machine (Fabric starts the second
process)."""

import torch
from lightning.fabric.strategies import ModelParallelStrategy

from precision_base import Fabric, resolve_fabric


def main() -> None:
    # options as for the Trainer, e.g. reduce_dtype="bf16"
    plugin = resolve_fabric("fsdp:bf16-mixed")

    def parallelize(module: torch.nn.Module, device_mesh: object) -> torch.nn.Module:
        mesh = device_mesh["data_parallel"]  # type: ignore[index]
        plugin.fully_shard(module[0], mesh=mesh)  # each unit, then the root
        return plugin.fully_shard(module, mesh=mesh)

    strategy = ModelParallelStrategy(
        parallelize, data_parallel_size=2, tensor_parallel_size=1
    )
    fabric = Fabric(
        precision_plugin=plugin, strategy=strategy, accelerator="cpu", devices=2
    )
    fabric.launch()
    model = fabric.setup_module(
        torch.nn.Sequential(
            torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 1)
        )
    )
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-2))
    x = fabric.to_device(torch.randn(8, 16))
    losses = []
    for _ in range(4):
        loss = torch.nn.functional.mse_loss(model(x), x[:, :1])
        fabric.backward(loss)
        # the exact global norm of the sharded gradients
        fabric.clip_gradients(model, optimizer, max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    fabric.save("checkpoint", {"model": model, "optimizer": optimizer, "step": 4})
    state = {"model": model, "optimizer": optimizer, "step": 0}
    fabric.load("checkpoint", state)
    weight = next(model.parameters())
    fabric.print(
        plugin.spec,
        type(fabric.strategy).__name__,
        "parameters",
        weight.dtype,
        "loss falls",
        losses[-1] < losses[0],
    )
    fabric.print("loaded step", state["step"])
    # close the process group before the script ends, every process together (torch's
    # advice): a gloo group left open can abort a finished process at exit
    # ("terminate called without an active exception")
    fabric.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
