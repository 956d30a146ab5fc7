"""DeepSpeed training runs on CPU, three ways, for the same model, data, ZeRO stage and precision (inside each rank).

* ``ours``: ``precision_base.Trainer(precision_plugin="deepspeed:<precision>")`` with
  ``precision_deepspeed.DeepSpeedCPUStrategy(stage=...)``.
* ``builtin``: ``lightning.pytorch.Trainer(plugins=[lightning's DeepSpeedPrecision])`` with the same strategy.
  Lightning's own ``DeepSpeedStrategy`` refuses the CPU, so both Lightning variants need precision-deepspeed's
  strategy; only the precision plugin differs between them.
* ``hand``: no Lightning: ``deepspeed.initialize`` with the same DeepSpeed config the strategy builds (ZeRO
  section, micro-batch size, the plugin's precision section), then ``engine(x)``, ``engine.backward``,
  ``engine.step`` -- the floor.
"""

from __future__ import annotations

import copy
import gc
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


def _lightning_module(cfg: TaskConfig, losses: list[float], on_step: Callable[..., None] | None) -> Any:
    return lightning_module(cfg, losses, on_step)


def strategy(stage: int, batch: int, extra_config: dict[str, Any] | None = None) -> Any:
    from precision_deepspeed import DeepSpeedCPUStrategy

    s = DeepSpeedCPUStrategy(stage=stage, logging_batch_size_per_gpu=batch)
    if extra_config:
        assert s.config is not None
        s.config.update(copy.deepcopy(extra_config))
    return s


def run_lightning(
    variant: str,
    precision: str,
    cfg: TaskConfig,
    steps: int,
    warmup: int,
    *,
    stage: int = 2,
    options: dict[str, Any] | None = None,
    extra_config: dict[str, Any] | None = None,
    on_step: Callable[..., None] | None = None,
) -> dict[str, Any]:
    import lightning.pytorch as pl

    import precision_base

    world = world_size()
    losses: list[float] = []
    clock = StepClock()
    if variant == "ours":
        from precision_deepspeed import DeepSpeedPrecision

        trainer_cls: Any = precision_base.Trainer
        extra: dict[str, Any] = {"precision_plugin": DeepSpeedPrecision(precision, **(options or {}))}
    elif variant == "builtin":
        from lightning.pytorch.plugins.precision import DeepSpeedPrecision as LightningDeepSpeedPrecision

        trainer_cls = pl.Trainer
        extra = {"plugins": [LightningDeepSpeedPrecision(precision)]}  # type: ignore[arg-type]
    else:
        raise ValueError(variant)
    module = _lightning_module(cfg, losses, on_step)
    with tempfile.TemporaryDirectory() as root:
        trainer = trainer_cls(
            strategy=strategy(stage, cfg.batch, extra_config),
            devices=world,
            callbacks=[lightning_clock_callback(clock)],
            **lightning_trainer_kwargs(warmup + steps, root),
            **extra,
        )
        trainer.fit(module, loader(cfg, warmup + steps, int(os.environ["RANK"]), world))
    result = {
        "times": max_across_ranks(clock.intervals(warmup)),
        "cpu_times": max_across_ranks(clock.cpu_intervals(warmup)),
        "losses": losses,
        "engine": trainer.model,
    }
    del trainer
    gc.collect()
    return result


def hand_config(precision: str, stage: int, batch: int, extra_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The DeepSpeed config ``ours`` ends up with, built without Lightning."""
    from precision_deepspeed import DeepSpeedPrecision

    config = copy.deepcopy(strategy(stage, batch).config)
    config.update(copy.deepcopy(extra_config or {}))
    config.update(gradient_accumulation_steps=1, gradient_clipping=0.0)
    return DeepSpeedPrecision(precision).deepspeed_config(config)


def run_hand(
    precision: str,
    cfg: TaskConfig,
    steps: int,
    warmup: int,
    *,
    stage: int = 2,
    extra_config: dict[str, Any] | None = None,
    on_step: Callable[..., None] | None = None,
) -> dict[str, Any]:
    import deepspeed
    import torch.distributed as dist

    ensure_process_group()
    world, rank = dist.get_world_size(), dist.get_rank()
    net = build_net(cfg)
    if precision.endswith("-true") and precision != "32-true":
        net = net.to(LOW_DTYPES[precision])  # as the plugin's convert_module does
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr)
    engine, _, _, _ = deepspeed.initialize(
        model=net, optimizer=opt, config=hand_config(precision, stage, cfg.batch, extra_config)
    )
    in_dtype = LOW_DTYPES[precision]
    losses: list[float] = []
    clock = StepClock()
    for x, y in loader(cfg, warmup + steps, rank, world):
        clock.tick()
        out = engine(x.to(in_dtype))
        loss = loss_fn(out, y)
        losses.append(float(loss.detach()))
        engine.backward(loss)
        if on_step is not None:
            on_step(engine, engine.optimizer)
        engine.step()
    clock.tick()
    result = {
        "times": max_across_ranks(clock.intervals(warmup)),
        "cpu_times": max_across_ranks(clock.cpu_intervals(warmup)),
        "losses": losses,
        "engine": engine,
    }
    gc.collect()
    return result


def run(variant: str, precision: str, cfg: TaskConfig, steps: int, warmup: int, **kw: Any) -> dict[str, Any]:
    """Dispatch: ``ours``, ``builtin``, ``hand``."""
    if variant == "hand":
        kw.pop("options", None)
        return run_hand(precision, cfg, steps, warmup, **kw)
    return run_lightning(variant, precision, cfg, steps, warmup, **kw)
