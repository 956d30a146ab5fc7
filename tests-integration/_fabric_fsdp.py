"""2-process FSDP2 training on CPU through ``precision_base.Fabric(precision_plugin="fsdp:<precision>")``.

``run_ranks("_fabric_fsdp.py:train_all", {"precisions": [...], "out": ...})`` trains, for each precision, an
MLP (Linear(32, 32) -> ReLU -> Linear(32, 1)) for STEPS steps under Fabric's own ``ModelParallelStrategy`` with a
user ``parallelize_fn`` that is the plugin's one-line ``fully_shard``, clipping gradients by norm every step and
saving with ``fabric.save`` after SAVE_AT steps; then a second Fabric in the same processes loads that checkpoint
with ``fabric.load`` and trains the remaining steps. Under 16-mixed, rank 1's gradient shard is filled with inf at
INF_STEP. Rank 0 returns everything the tests assert on.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from _fsdp_train import _recording_reduce_scatter, full_params
from lightning.fabric import seed_everything
from lightning.fabric.strategies import ModelParallelStrategy
from torch.distributed.tensor import DTensor

from precision_base import Fabric, resolve_fabric
from precision_testsupport.launch import world_size
from precision_testsupport.models import dtype_name, mlp, regression_data

STEPS = 6
SAVE_AT = 3
INF_STEP = 1
BATCH = 8
WIDTH = 32


def _run(precision: str, inf_step: int, *, load_from: Path | None, save_to: Path | None) -> dict[str, Any]:
    world_size()  # Fabric's teardown may have deleted WORLD_SIZE
    seed_everything(7)
    seen: dict[str, Any] = {"reduce": [], "compute": [], "weight_fwd": []}

    def parallelize(module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
        plugin = fabric.strategy.precision
        plugin.fully_shard(module[0], mesh=device_mesh["data_parallel"])  # the one line, per unit
        return plugin.fully_shard(module, mesh=device_mesh["data_parallel"])  # type: ignore[no-any-return]

    # 16-mixed: an instance with a scaler option (resolve_fabric takes every option resolve() takes), so that the
    # only skipped step is the one with the injected inf (fp16 overflows on its own at the default 2**16)
    spec = f"fsdp:{precision}"
    chosen = resolve_fabric(spec, init_scale=1024.0) if precision == "16-mixed" else spec
    fabric = Fabric(
        precision_plugin=chosen,
        strategy=ModelParallelStrategy(parallelize, data_parallel_size=2, tensor_parallel_size=1),
        accelerator="cpu",
        devices=2,
    )
    fabric.launch()
    plugin: Any = fabric.strategy.precision
    model = fabric.setup_module(mlp(features=WIDTH, hidden=WIDTH, out=1, seed=3))
    recorder = _recording_reduce_scatter(seen["reduce"])
    for unit in (model.module[0], model.module):
        unit.set_custom_reduce_scatter(recorder)

    def record_weight(module: torch.nn.Module, args: Any) -> None:  # after FSDP2's pre-forward gathered it
        seen["weight_fwd"].append(dtype_name(module.weight.dtype))

    def record_output(module: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
        seen["compute"].append(dtype_name(output.dtype))

    model.module[0].register_forward_pre_hook(record_weight)
    model.module[0].register_forward_hook(record_output)
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    sharded = {n: [dtype_name(p.dtype), isinstance(p, DTensor)] for n, p in model.named_parameters()}
    start = 0
    if load_from is not None:
        state: dict[str, Any] = {"model": model, "optimizer": optimizer, "scaler": {}, "step": 0}
        fabric.load(load_from, state)
        plugin.load_state_dict(state["scaler"])
        start = int(state["step"])
    data = regression_data(WIDTH, samples=BATCH * 2 * STEPS, seed=5)
    rank = fabric.global_rank
    steps: dict[int, dict[str, Any]] = {}
    for step in range(start, STEPS):
        x, y = data[step * 2 * BATCH : (step + 1) * 2 * BATCH]
        x, y = fabric.to_device((x[rank::2], y[rank::2]))
        loss = torch.nn.functional.mse_loss(model(x), y)
        fabric.backward(loss)
        grad_dtypes = sorted({dtype_name(p.grad.dtype) for p in model.parameters() if p.grad is not None})
        if step == inf_step and rank == 1:
            grad = model.module[0].weight.grad
            (grad.to_local() if isinstance(grad, DTensor) else grad).fill_(math.inf)
        scale_before = plugin.scaler.get_scale() if plugin.scaler is not None else None
        norm = fabric.clip_gradients(model, optimizer, max_norm=1.0, error_if_nonfinite=False)  # 16-mixed overflow
        before = full_params(model)
        optimizer.step()
        optimizer.zero_grad()
        after = full_params(model)
        steps[step] = {
            "loss": fabric.all_reduce(loss.detach().float(), reduce_op="mean").item(),
            "grad_dtypes": grad_dtypes,
            "norm": float(norm),
            "changed": before != after,
            "scale_before": scale_before,
            "scale_after": plugin.scaler.get_scale() if plugin.scaler is not None else None,
        }
        if save_to is not None and step + 1 == SAVE_AT:
            state = {"model": model, "optimizer": optimizer, "scaler": plugin.state_dict(), "step": SAVE_AT}
            fabric.save(save_to, state)
    return {
        "plugin_type": f"{type(plugin).__module__}.{type(plugin).__qualname__}",
        "strategy_type": type(fabric.strategy).__name__,
        "scaler": None if plugin.scaler is None else f"{type(plugin.scaler).__name__}({plugin.device_type})",
        "device_type": plugin.device_type,
        "table": dict(plugin.dtypes(2).rows()),
        "sharded": sharded,
        "compute": sorted(set(seen["compute"])),
        "weight_fwd": sorted(set(seen["weight_fwd"])),
        "reduce": sorted(set(seen["reduce"])),
        "steps": steps,
        "final": full_params(model),
    }


def _auto(spec: str, options: dict[str, Any]) -> dict[str, Any]:
    """Two steps under ``strategy="auto"`` (Fabric picks ``precision_fsdp.fabric.FSDP2Strategy``, which shards by its
    default policy): the strategy's class, the model's layer classes after setup, and the losses."""
    world_size()
    seed_everything(7)
    fabric = Fabric(precision_plugin=resolve_fabric(spec, **options), accelerator="cpu", devices=2)
    fabric.launch()
    layers: list[torch.nn.Module] = []
    for _ in range(3):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = fabric.setup_module(torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1)))
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.05))
    data = regression_data(WIDTH, samples=BATCH * 2 * 2, seed=5)
    losses = []
    for step in range(2):
        x, y = data[step * 2 * BATCH : (step + 1) * 2 * BATCH]
        x, y = fabric.to_device((x[fabric.global_rank :: 2], y[fabric.global_rank :: 2]))
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(fabric.all_reduce(loss.detach().float(), reduce_op="mean").item())
    return {
        "strategy_type": f"{type(fabric.strategy).__module__}.{type(fabric.strategy).__qualname__}",
        "float8": [  # per Linear: whether it became torchao's Float8Linear (FSDP2 may subclass it as a unit)
            any(c.__name__ == "Float8Linear" for c in type(m).__mro__) for m in model.module if _is_linear(m)
        ],
        "all_dtensor": all(isinstance(p, DTensor) for p in model.parameters()),
        "losses": losses,
    }


def _is_linear(module: torch.nn.Module) -> bool:
    return isinstance(module, torch.nn.Linear)


def train_all(args: dict[str, Any]) -> dict[str, Any] | None:
    """Every precision in ``args["precisions"]``, each an uninterrupted run then a resumed one; rank 0 returns."""
    torch.set_num_threads(1)
    out = Path(args["out"])
    results: dict[str, Any] = {}
    for precision in args["precisions"]:
        inf_step = INF_STEP if precision == "16-mixed" else -1
        ckpt = out / precision / "ckpt"
        full = _run(precision, inf_step, load_from=None, save_to=ckpt)
        resumed = _run(precision, inf_step, load_from=ckpt, save_to=None)
        results[precision] = {"full": full, "resumed": resumed}
    results["auto"] = {spec: _auto(spec, options) for spec, options in args.get("auto", {}).items()}
    return results if int(torch.distributed.get_rank()) == 0 else None
