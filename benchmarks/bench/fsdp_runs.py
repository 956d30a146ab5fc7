"""FSDP2 training runs on CPU, three ways, for the same model, data and precision (runs inside each rank).

* ``ours``: ``precision_base.Trainer(precision_plugin=<precision_fsdp.FSDPPrecision>)`` under Lightning's
  ``ModelParallelStrategy``; ``configure_model`` shards with ``plugin.fully_shard`` (the plugin's
  ``MixedPrecisionPolicy``).
* ``builtin``: ``lightning.pytorch.Trainer(plugins=[lightning's FSDPPrecision])`` under the same strategy;
  ``configure_model`` shards with a ``MixedPrecisionPolicy`` built from the built-in's ``mixed_precision_config``
  (its param/reduce dtypes), which is what a user of the built-in would write for FSDP2.
* ``hand``: no Lightning: ``fully_shard`` with the same policy as ``ours``, ``torch.autocast("cpu")`` for
  ``*-mixed``, ``torch.amp.GradScaler("cpu")`` for ``16-mixed``, ``AdamW`` -- the floor for what ``ours`` does.

Each run returns the duration of every step after ``warmup`` (the slowest rank's), and the losses.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch

from bench.task import (
    LOW_DTYPES,
    StepClock,
    TaskConfig,
    build_net,
    ensure_process_group,
    lightning_clock_callback,
    lightning_module,
    lightning_trainer_kwargs,
    loader,
    loss_fn,
    max_across_ranks,
    world_size,
)

Sharder = Callable[[torch.nn.Module, Any], Any]


def _lightning_module(cfg: TaskConfig, shard: Sharder, losses: list[float], on_step: Callable[..., None] | None) -> Any:
    def configure_model(module: Any) -> None:
        mesh = module.device_mesh["data_parallel"]
        for block in module.net.blocks:
            shard(block, mesh)
        shard(module.net, mesh)

    return lightning_module(cfg, losses, on_step, configure_model)


def _strategy(world: int) -> Any:
    from lightning.pytorch.strategies import ModelParallelStrategy

    return ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1)


def our_plugin(precision: str, reduce: str | None = None) -> Any:
    from precision_base import resolve

    return resolve(f"fsdp:{precision}", **({"reduce_dtype": reduce} if reduce else {}))


def builtin_plugin(precision: str) -> Any:
    from lightning.pytorch.plugins.precision import FSDPPrecision

    return FSDPPrecision(precision)  # type: ignore[arg-type]


def builtin_policy(plugin: Any) -> Any:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mp = plugin.mixed_precision_config
    return MixedPrecisionPolicy(param_dtype=mp.param_dtype, reduce_dtype=mp.reduce_dtype)


def run_lightning(
    variant: str,
    precision: str,
    cfg: TaskConfig,
    steps: int,
    warmup: int,
    *,
    reduce: str | None = None,
    on_step: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """``variant`` ``"ours"`` or ``"builtin"``: a Lightning fit of ``warmup + steps`` steps."""
    import lightning.pytorch as pl
    from torch.distributed.fsdp import fully_shard

    import precision_base

    world = world_size()
    losses: list[float] = []
    clock = StepClock()
    if variant == "ours":
        plugin = our_plugin(precision, reduce)

        def shard(module: torch.nn.Module, mesh: Any) -> Any:
            return plugin.fully_shard(module, mesh=mesh)

        trainer_cls: Any = precision_base.Trainer
        extra: dict[str, Any] = {"precision_plugin": plugin}
    elif variant == "builtin":
        plugin = builtin_plugin(precision)
        policy = builtin_policy(plugin)

        def shard(module: torch.nn.Module, mesh: Any) -> Any:
            return fully_shard(module, mesh=mesh, mp_policy=policy)

        trainer_cls = pl.Trainer
        extra = {"plugins": [plugin]}
    else:
        raise ValueError(variant)
    module = _lightning_module(cfg, shard, losses, on_step)
    with tempfile.TemporaryDirectory() as root:
        trainer = trainer_cls(
            strategy=_strategy(world),
            devices=world,
            callbacks=[lightning_clock_callback(clock)],
            **lightning_trainer_kwargs(warmup + steps, root),
            **extra,
        )
        trainer.fit(module, loader(cfg, warmup + steps, int(os.environ["RANK"]), world))
    return {
        "times": max_across_ranks(clock.intervals(warmup)),
        "cpu_times": max_across_ranks(clock.cpu_intervals(warmup)),
        "losses": losses,
        "module": module,
    }


def hand_policy(precision: str, reduce: str | None) -> tuple[Any, torch.dtype]:
    """The ``MixedPrecisionPolicy`` and storage dtype ``ours`` uses, written out by hand."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    low = LOW_DTYPES[precision]
    mixed = precision.endswith("-mixed")
    storage = torch.float32 if mixed else low
    reduce_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[reduce] if reduce else None
    if reduce_dtype is None:
        reduce_dtype = torch.float32 if mixed else storage
    return MixedPrecisionPolicy(param_dtype=low, reduce_dtype=reduce_dtype, cast_forward_inputs=True), storage


def run_hand(
    precision: str,
    cfg: TaskConfig,
    steps: int,
    warmup: int,
    *,
    reduce: str | None = None,
    on_step: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """The same training as ``ours`` with plain torch: FSDP2, autocast, GradScaler, AdamW."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    ensure_process_group()
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(cfg.seed)
    policy, storage = hand_policy(precision, reduce)
    net = build_net(cfg).to(storage)
    mesh = init_device_mesh("cpu", (world,))
    for block in net.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(net, mesh=mesh, mp_policy=policy)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr)
    mixed = precision.endswith("-mixed")
    scaler = torch.amp.GradScaler("cpu") if precision == "16-mixed" else None
    losses: list[float] = []
    clock = StepClock()
    for x, y in loader(cfg, warmup + steps, rank, world):
        clock.tick()
        x = x.to(storage)
        ctx = torch.autocast("cpu", dtype=LOW_DTYPES[precision]) if mixed else contextlib.nullcontext()
        with ctx:
            out = net(x)
        loss = loss_fn(out, y)
        losses.append(float(loss.detach()))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            if on_step is not None:
                on_step(net, opt)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            if on_step is not None:
                on_step(net, opt)
            opt.step()
        opt.zero_grad(set_to_none=True)
    clock.tick()
    return {
        "times": max_across_ranks(clock.intervals(warmup)),
        "cpu_times": max_across_ranks(clock.cpu_intervals(warmup)),
        "losses": losses,
        "module": net,
    }


def run(variant: str, precision: str, cfg: TaskConfig, steps: int, warmup: int, **kw: Any) -> dict[str, Any]:
    """Dispatch: ``ours``, ``builtin``, ``hand``, and ``ours-lowreduce`` / ``hand-lowreduce`` (``reduce_dtype`` = the
    compute dtype instead of fp32, for ``*-mixed``)."""
    low = {"16-mixed": "fp16", "bf16-mixed": "bf16"}.get(precision)
    if variant == "hand":
        return run_hand(precision, cfg, steps, warmup, **kw)
    if variant == "hand-lowreduce":
        return run_hand(precision, cfg, steps, warmup, reduce=low, **kw)
    if variant == "ours-lowreduce":
        return run_lightning("ours", precision, cfg, steps, warmup, reduce=low, **kw)
    return run_lightning(variant, precision, cfg, steps, warmup, **kw)
