"""Training runs inside the ranks (started by ``precision_testsupport.launch.run_ranks``) on one of
:mod:`precision_testsupport.architectures` (``Task.model``; the same weights and batches in every run): ``ours``
(``precision_base.Trainer``), ``builtin`` (Lightning's precision plugin, same strategy; :func:`plugin`), ``amp``
(FSDP ``*-mixed`` only: Lightning's ``MixedPrecision`` plugin on the CPU, the work ours does inside the same
Lightning loop) and ``hand`` (no Lightning: the floor). FSDP2 runs under ``ModelParallelStrategy``, DeepSpeed under
precision-deepspeed's ``DeepSpeedCPUStrategy`` (Lightning's refuses the CPU). Each run returns per-step wall and
CPU times after ``warmup`` (slowest rank), losses, the model or engine.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import itertools
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from precision_base.plugin_support import precision_dtype
from precision_testsupport import architectures
from precision_testsupport.launch import ensure_process_group, run_ranks, world_size
from precision_testsupport.models import QUIET

OnStep = Callable[[Any, Any], None] | None
REDUCE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Task:
    width: int = 256
    depth: int = 2
    classes: int = 16
    batch: int = 32  # per rank
    lr: float = 1e-3
    seed: int = 1234
    model: str = "mlp"  # one of architectures.MODELS; width, depth and classes shape the MLP only

    def net(self) -> Any:
        return architectures.build(self.model, self.width, self.depth, self.classes, self.seed)


def in_ranks(target: str, args: dict[str, Any], world: int = 2, threads: int = 1) -> Any:
    """Run ``target`` (``"bench.<module>:<function>"``) in ``world`` ranks, DeepSpeed on its CPU accelerator."""
    env = {"DS_ACCELERATOR": "cpu", "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1", "PYTHONWARNINGS": "ignore"}
    bench_dir = Path(__file__).resolve().parents[1]  # the ranks' working directory: `bench` is importable there
    return run_ranks(target, args, world=world, threads=threads, timeout=1800, cwd=bench_dir, env=env)


def pin_to_own_cpu() -> list[int]:
    """Pin this rank to a CPU of its own (rank ``i`` to the ``i``-th usable CPU) when there are as many usable CPUs
    as ranks: ranks then never trade CPUs mid-step, which steadies step times. Returns the CPUs this rank may use."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    rank = int(os.environ.get("RANK", "0"))
    if cpus and len(cpus) >= world_size():
        os.sched_setaffinity(0, {cpus[rank]})
        return [cpus[rank]]
    return cpus


def norms_in_fp32(net: torch.nn.Module, out_dtype: torch.dtype | None) -> list[torch.nn.Module]:
    """What the plugins do by default under ``*-mixed`` with BatchNorm layers, in plain torch: each computes in
    float32 (autocast off inside; input, weight and bias read as float32, running statistics float32) and casts its
    output to ``out_dtype`` (``None``: left float32). Returns those layers (for FSDP2 to shard each on its own)."""
    import torch.nn.functional as F

    kinds = torch.nn.BatchNorm1d | torch.nn.BatchNorm2d | torch.nn.BatchNorm3d
    norms = [m for m in net.modules() if isinstance(m, kinds)]

    def fp32_forward(bn: Any) -> Callable[[torch.Tensor], torch.Tensor]:
        def forward(x: torch.Tensor) -> torch.Tensor:
            with torch.autocast(x.device.type, enabled=False):
                if bn.training and bn.track_running_stats:
                    bn.num_batches_tracked.add_(1)
                momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
                y = F.batch_norm(x.float(), bn.running_mean, bn.running_var, bn.weight.float(), bn.bias.float(),
                                 bn.training or bn.running_mean is None, momentum, bn.eps)  # fmt: skip
            return y if out_dtype is None else y.to(out_dtype)

        return forward

    for bn in norms:
        bn.float()  # running statistics and (FSDP2: in its own unit) weight and bias in float32
        bn.forward = fp32_forward(bn)
    return norms


def loader(task: Task, steps: int) -> torch.utils.data.DataLoader[Any]:
    """Exactly ``steps`` batches for this rank, its own slice of the same data (as Lightning's sampler gives)."""
    world, rank = world_size(), int(os.environ.get("RANK", "0"))
    data = architectures.data(task.model, steps * task.batch * world, task.width, task.classes, task.seed)
    sampler: Any = torch.utils.data.DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    return torch.utils.data.DataLoader(data, batch_size=task.batch, sampler=sampler)


def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy in fp32 over the last dimension of ``out`` (classes or vocabulary), targets int64."""
    return torch.nn.functional.cross_entropy(out.float().flatten(0, -2), y.flatten())


def cast_input(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Floating inputs to ``dtype`` (what the plugins' ``convert_input`` does); token ids stay int64."""
    return x.to(dtype) if x.is_floating_point() else x


class Clock:
    """Start of every step (wall and process CPU time, after ``sync()``: e.g. ``torch.cuda.synchronize``); a step
    lasts to the next start (fetch to optimizer step)."""

    def __init__(self, sync: Callable[[], Any] = lambda: None) -> None:
        self.wall, self.cpu, self.sync = list[float](), list[float](), sync

    def tick(self) -> None:
        self.sync()
        self.wall.append(time.perf_counter())
        self.cpu.append(time.process_time())

    def result(self, warmup: int, **extra: Any) -> dict[str, Any]:
        def steps(ts: list[float]) -> list[float]:
            return slowest_rank([b - a for a, b in itertools.pairwise(ts)][warmup:])

        return {"times": steps(self.wall), "cpu_times": steps(self.cpu), **extra}


def slowest_rank(values: list[float]) -> list[float]:
    """Element-wise maximum over the ranks (a step ends when its slowest rank ends)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return list(values)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, list(values))
    return [max(g[i] for g in gathered) for i in range(min(len(g) for g in gathered))]


def with_every_rank(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (this rank's figures) with ``per_rank``: every rank's record, gathered in rank order (the process
    group is started when no fit has started it)."""
    import torch.distributed as dist

    ensure_process_group()
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, record)
    return {**record, "per_rank": gathered}


def bench_module(net: Any, loss: Any, tick: Any, lr: float, on_step: OnStep = None, shard: Any = None) -> Any:
    """The LightningModule every Lightning variant trains: ``loss(net, batch)``, AdamW, ``tick()`` at every step's
    start and at the end, ``on_step(module, optimizer)`` before each optimizer step, and in ``configure_model``
    ``shard(module, mesh, is_root)`` over ``net.blocks`` then ``net`` (FSDP2). Records ``losses``."""
    import lightning.pytorch as pl

    class Bench(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net, self.losses = net, list[float]()

        def configure_model(self) -> None:
            for module in [*self.net.blocks, self.net] if shard is not None else []:
                shard(module, self.device_mesh["data_parallel"], module is self.net)  # type: ignore[index]

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            tick()

        def on_train_end(self) -> None:
            tick()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            value: torch.Tensor = loss(self.net, batch)
            self.losses.append(float(value.detach()))
            return value

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            if on_step is not None:
                on_step(self, optimizer)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=lr)

    return Bench()


def _lightning_fit(
    trainer_cls: Any, task: Task, steps: int, warmup: int, on_step: OnStep, shard: Any, **kw: Any
) -> Any:
    """Fit :func:`bench_module` on the task for ``warmup + steps`` steps on CPU."""
    clock = Clock()
    module = bench_module(task.net(), lambda net, b: loss_fn(net(b[0]), b[1]), clock.tick, task.lr, on_step, shard)
    with tempfile.TemporaryDirectory() as root:
        limits = dict(max_steps=warmup + steps, max_epochs=1, num_sanity_val_steps=0, limit_val_batches=0)
        # the loaders carry their own DistributedSampler
        kw.update(limits, default_root_dir=root, use_distributed_sampler=False, **QUIET)
        trainer = trainer_cls(accelerator="cpu", devices=world_size(), **kw)
        trainer.fit(module, loader(task, warmup + steps))
    return clock.result(warmup, losses=module.losses, module=module, engine=trainer.model)


def fsdp(
    variant: str, precision: str, task: Task, steps: int, warmup: int, reduce: str = "", on_step: OnStep = None
) -> Any:
    """FSDP2 fit: ``ours`` / ``builtin`` / ``amp`` / ``hand`` (sharding the blocks, then the model, in
    ``configure_model`` or by hand) or ``ours-blocks`` (ours under ``FSDP2Strategy(auto_wrap_policy={Block})``, no
    ``configure_model``); ``reduce`` ("fp32", "bf16", "fp16") overrides the reduce dtype."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    if variant == "hand":
        return _fsdp_hand(precision, task, steps, warmup, reduce, on_step)
    if variant == "ours-blocks":  # no configure_model: FSDP2Strategy shards by the user's block set
        from precision_fsdp import FSDP2Strategy

        blocks = FSDP2Strategy(auto_wrap_policy={type(block) for block in task.net().blocks})
        trainer, _shard, kw = fsdp2_variant("ours", precision, **({"reduce_dtype": reduce} if reduce else {}))
        return _lightning_fit(trainer, task, steps, warmup, on_step, None, strategy=blocks, **kw)
    trainer, shard, kw = fsdp2_variant(variant, precision, **({"reduce_dtype": reduce} if reduce else {}))
    strategy = ModelParallelStrategy(data_parallel_size=world_size(), tensor_parallel_size=1)
    return _lightning_fit(trainer, task, steps, warmup, on_step, shard, strategy=strategy, **kw)


def plugin(backend: str, variant: str, precision: str, **options: Any) -> Any:
    """The precision plugin of ``variant`` for ``backend`` ("fsdp", "deepspeed") at ``precision``: ``ours``
    (``precision_base.resolve("fsdp:...")``, ``precision_deepspeed.DeepSpeedPrecision``; with ``options``) or
    ``builtin`` (Lightning's ``FSDPPrecision``, ``DeepSpeedPrecision``)."""
    from lightning.pytorch.plugins import precision as lightning

    import precision_base

    if variant == "builtin":
        builtin = lightning.FSDPPrecision if backend == "fsdp" else lightning.DeepSpeedPrecision
        return builtin(precision)  # type: ignore[arg-type]
    if backend == "fsdp":
        return precision_base.resolve(f"fsdp:{precision}", **options)
    from precision_deepspeed import DeepSpeedPrecision

    return DeepSpeedPrecision(precision, **options)


def fsdp2_variant(variant: str, precision: str, **options: Any) -> tuple[Any, Any, dict[str, Any]]:
    """FSDP2 under Lightning: the Trainer class, ``shard(module, mesh, is_root)`` for ``configure_model`` and the
    Trainer's precision argument. ``ours``: our plugin and its ``fully_shard``; ``builtin``: Lightning's
    ``FSDPPrecision`` and ``fully_shard`` with a policy from its ``mixed_precision_config`` (what a user of the
    built-in writes); ``amp`` (``*-mixed``): Lightning's ``MixedPrecision(precision, device="cpu")`` and
    ``fully_shard`` with a low-precision compute, fp32-reduce policy (the blocks' without the input cast)."""
    import lightning.pytorch as pl
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    import precision_base

    if variant == "ours":
        ours = plugin("fsdp", "ours", precision, **options)
        return precision_base.Trainer, lambda m, mesh, root: ours.fully_shard(m, mesh=mesh), {"precision_plugin": ours}
    if variant == "amp":  # Lightning's autocast plugin on the CPU, the fp32-reducing policy written by the user
        from lightning.pytorch.plugins.precision import MixedPrecision

        low = precision_dtype(precision)
        reduce = REDUCE[options["reduce_dtype"]] if options.get("reduce_dtype") else torch.float32
        amp = {root: MixedPrecisionPolicy(param_dtype=low, reduce_dtype=reduce, cast_forward_inputs=root)
               for root in (True, False)}  # fmt: skip  # the blocks take their inputs as given, as ours
        autocast = MixedPrecision(precision, device="cpu")  # type: ignore[arg-type]
        return pl.Trainer, lambda m, mesh, root: fully_shard(m, mesh=mesh, mp_policy=amp[root]), {"plugins": [autocast]}
    builtin = plugin("fsdp", "builtin", precision)
    mp: Any = builtin.mixed_precision_config
    policy = MixedPrecisionPolicy(param_dtype=mp.param_dtype, reduce_dtype=mp.reduce_dtype)
    return pl.Trainer, lambda m, mesh, root: fully_shard(m, mesh=mesh, mp_policy=policy), {"plugins": [builtin]}


def _fsdp_hand(precision: str, task: Task, steps: int, warmup: int, reduce: str, on_step: OnStep) -> Any:
    """What ``ours`` does, written with plain torch: FSDP2 policy, autocast, GradScaler, AdamW; under ``*-mixed``
    BatchNorm layers in float32, each its own FSDP2 unit with a float32 policy (:func:`norms_in_fp32`)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    ensure_process_group()
    low, mixed = precision_dtype(precision), precision.endswith("-mixed")
    storage = torch.float32 if mixed else low
    policy = MixedPrecisionPolicy(
        param_dtype=low, reduce_dtype=REDUCE[reduce] if reduce else torch.float32 if mixed else storage
    )
    net, mesh = task.net().to(storage), init_device_mesh("cpu", (world_size(),))
    inner = MixedPrecisionPolicy(  # under *-mixed the blocks take their inputs as given (only the root casts)
        param_dtype=policy.param_dtype, reduce_dtype=policy.reduce_dtype, cast_forward_inputs=not mixed
    )
    fp32 = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
    for norm in norms_in_fp32(net, None) if mixed else []:
        fully_shard(norm, mesh=mesh, mp_policy=fp32)
    for module in [*net.blocks, net]:
        fully_shard(module, mesh=mesh, mp_policy=policy if module is net else inner)
    opt = torch.optim.AdamW(net.parameters(), lr=task.lr)
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "16-mixed")  # passes everything through when disabled
    clock, losses = Clock(), []
    for x, y in loader(task, warmup + steps):
        clock.tick()
        with torch.autocast("cpu", dtype=low) if mixed else contextlib.nullcontext():
            out = net(cast_input(x, storage))
        loss = loss_fn(out, y)
        losses.append(float(loss.detach()))
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        if on_step is not None:  # e.g. a measurement, on unscaled gradients
            on_step(net, opt)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    clock.tick()
    return clock.result(warmup, losses=losses, module=net)


def deepspeed(variant: str, precision: str, task: Task, steps: int, warmup: int, stage: int = 2, options: Any = None,
              extra_config: dict[str, Any] | None = None, on_step: OnStep = None) -> Any:  # fmt: skip
    """DeepSpeed fit (ZeRO ``stage``): ``ours`` / ``builtin`` / ``hand``; ``extra_config`` is merged into the config."""
    import deepspeed as ds
    import lightning.pytorch as pl

    import precision_base
    from precision_deepspeed import DeepSpeedCPUStrategy, DeepSpeedPrecision

    strategy = DeepSpeedCPUStrategy(stage=stage, logging_batch_size_per_gpu=task.batch)
    strategy.config.update(copy.deepcopy(extra_config or {}))  # type: ignore[union-attr]
    if variant != "hand":
        chosen = plugin("deepspeed", variant, precision, **(options or {}))
        kw: dict[str, Any] = {"precision_plugin": chosen} if variant == "ours" else {"plugins": [chosen]}
        trainer = precision_base.Trainer if variant == "ours" else pl.Trainer
        result = _lightning_fit(trainer, task, steps, warmup, on_step, None, strategy=strategy, **kw)
        gc.collect()
        return result
    # hand: deepspeed.initialize with the config ours ends up with, then forward, backward, step
    ensure_process_group()
    config = DeepSpeedPrecision(precision).deepspeed_config(
        {**copy.deepcopy(strategy.config or {}), "gradient_accumulation_steps": 1, "gradient_clipping": 0.0}
    )
    low, net = precision_dtype(precision), task.net()
    if precision.endswith("-true"):
        net = net.to(low)  # as the plugin's convert_module does
    elif precision.endswith("-mixed"):
        norms_in_fp32(net, low)  # as the plugin does in DeepSpeed's native mode: float32 compute from the half copies
    engine, *_ = ds.initialize(model=net, optimizer=torch.optim.AdamW(net.parameters(), lr=task.lr), config=config)
    clock, losses = Clock(), []
    for x, y in loader(task, warmup + steps):
        clock.tick()
        loss = loss_fn(engine(cast_input(x, low)), y)
        losses.append(float(loss.detach()))
        engine.backward(loss)
        if on_step is not None:
            on_step(engine, engine.optimizer)
        engine.step()
    clock.tick()
    gc.collect()
    return clock.result(warmup, losses=losses, engine=engine)


def run(backend: str, variant: str, precision: str, task: Task, steps: int, warmup: int, **kw: Any) -> dict[str, Any]:
    """One fit of ``backend`` ("fsdp" or "deepspeed"); a ``-lowreduce`` variant (FSDP ``*-mixed``) reduces in the
    compute dtype instead of fp32."""
    if variant.endswith("-lowreduce"):
        kw["reduce"] = {"16-mixed": "fp16", "bf16-mixed": "bf16"}[precision]
        variant = variant.removesuffix("-lowreduce")
    return dict((fsdp if backend == "fsdp" else deepspeed)(variant, precision, task, steps, warmup, **kw))
