"""Training runs inside the ranks on one of :mod:`precision_testsupport.architectures` (the same weights and batches
in every run): ``ours``, ``builtin`` (Lightning's plugin, same strategy), ``amp`` (FSDP ``*-mixed``: Lightning's
``MixedPrecision`` on the CPU, ours' work in the same loop) and ``hand`` (no Lightning: the floor). DeepSpeed runs
under precision-deepspeed's ``DeepSpeedCPUStrategy`` (Lightning's refuses the CPU)."""

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

import lightning.pytorch as pl
import torch
import torch.distributed as dist
import torch.nn.functional as F
from lightning.pytorch.plugins import precision as pl_precision
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import precision_base
from precision_base.kit.plugin_support import precision_dtype
from precision_deepspeed import DeepSpeedCPUStrategy, DeepSpeedPrecision
from precision_fsdp import FSDP2Strategy
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


def pin_to_own_cpu() -> None:
    """Pin rank ``i`` to the ``i``-th usable CPU when there are enough (ranks never trade CPUs mid-step)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cpus and len(cpus) >= world_size():
        os.sched_setaffinity(0, {cpus[int(os.environ.get("RANK", "0"))]})


def norms_in_fp32(net: torch.nn.Module, out_dtype: torch.dtype | None) -> list[torch.nn.Module]:
    """The plugins' ``*-mixed`` BatchNorm in plain torch: float32 compute and statistics, the output cast to
    ``out_dtype`` (``None``: left float32). Returns those layers (for FSDP2 to shard each on its own)."""
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
    """Exactly ``steps`` batches: this rank's slice of the same data (as Lightning's sampler gives)."""
    world, rank = world_size(), int(os.environ.get("RANK", "0"))
    data = architectures.data(task.model, steps * task.batch * world, task.width, task.classes, task.seed)
    sampler: Any = torch.utils.data.DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    return torch.utils.data.DataLoader(data, batch_size=task.batch, sampler=sampler)


def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy in fp32 over the last dimension of ``out`` (classes or vocabulary), targets int64."""
    return torch.nn.functional.cross_entropy(out.float().flatten(0, -2), y.flatten())


class Clock:
    """Every step's start (wall and CPU time, after ``sync()``); a step lasts to the next start."""

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
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return list(values)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, list(values))
    return [max(g[i] for g in gathered) for i in range(min(len(g) for g in gathered))]


def with_every_rank(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with ``per_rank``: every rank's record, in rank order."""
    ensure_process_group()
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, record)
    return {**record, "per_rank": gathered}


def bench_module(net: Any, loss: Any, tick: Any, lr: float, on_step: OnStep = None, shard: Any = None) -> Any:
    """The LightningModule every Lightning variant trains: ``loss(net, batch)``, AdamW, ``tick()`` at every step's
    start and at the end, ``on_step`` before each optimizer step, ``shard`` over the blocks then ``net`` (FSDP2)."""

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


def train(trainer_cls: Any, module: Any, data: Any, steps: int, **kw: Any) -> Any:
    """Fit ``module`` on ``data`` for ``steps`` steps on this launch's CPUs (``kw`` may replace them); the Trainer."""
    kw = {"accelerator": "cpu", "devices": world_size(), "use_distributed_sampler": False, **kw}
    with tempfile.TemporaryDirectory() as root:
        trainer = trainer_cls(max_steps=steps, max_epochs=1, num_sanity_val_steps=0, limit_val_batches=0,
                              default_root_dir=root, **QUIET, **kw)  # fmt: skip
        trainer.fit(module, data)
    return trainer


def _lightning_fit(
    trainer_cls: Any, task: Task, steps: int, warmup: int, on_step: OnStep, shard: Any, **kw: Any
) -> Any:
    clock = Clock()
    module = bench_module(task.net(), lambda net, b: loss_fn(net(b[0]), b[1]), clock.tick, task.lr, on_step, shard)
    trainer = train(trainer_cls, module, loader(task, warmup + steps), warmup + steps, **kw)
    return clock.result(warmup, losses=module.losses, module=module, engine=trainer.model)


def _hand_loop(task: Task, steps: int, warmup: int, dtype: torch.dtype, model: Any, opt: Any, backward: Any,
               update: Any, on_step: OnStep, forward: Any = None) -> dict[str, Any]:  # fmt: skip
    """The hand-written loops: ``forward`` (default: ``model``) of the inputs, floating ones in ``dtype`` (as
    ``convert_input``), :func:`loss_fn`, ``backward(loss)``, ``on_step(model, opt)``, ``update()``."""
    clock, losses, forward = Clock(), [], forward or model
    for x, y in loader(task, warmup + steps):
        clock.tick()
        loss = loss_fn(forward(x.to(dtype) if x.is_floating_point() else x), y)
        losses.append(float(loss.detach()))
        backward(loss)
        if on_step is not None:  # e.g. a measurement, on unscaled gradients
            on_step(model, opt)
        update()
    clock.tick()
    return clock.result(warmup, losses=losses)


def fsdp(variant: str, precision: str, task: Task, steps: int, warmup: int, reduce: str = "", on_step: OnStep = None,
         **options: Any) -> Any:  # fmt: skip
    """FSDP2 fit. ``ours`` / ``builtin`` / ``amp`` / ``hand`` shard the blocks, then the model (in ``configure_model``
    or by hand), ``ours-whole`` the model as one unit; ``ours-blocks`` (``FSDP2Strategy(auto_wrap_policy={Block})``)
    and ``ours-default`` (the plugin's own strategy) have no ``configure_model``. ``reduce`` ("fp32", "bf16", "fp16")
    overrides the reduce dtype; ``options``: ours' plugin options."""
    if variant == "hand":
        return _fsdp_hand(precision, task, steps, warmup, reduce, on_step)
    if reduce:
        options["reduce_dtype"] = reduce
    if variant in ("ours-blocks", "ours-default"):
        kw = {"precision_plugin": plugin("fsdp", "ours", precision, **options)}
        if variant == "ours-blocks":  # the user's block set
            kw["strategy"] = FSDP2Strategy(auto_wrap_policy={type(block) for block in task.net().blocks})
        return _lightning_fit(precision_base.Trainer, task, steps, warmup, on_step, None, **kw)
    trainer, by_block, kw = fsdp2_variant(variant.removesuffix("-whole"), precision, **options)

    def whole(module: Any, mesh: Any, is_root: bool) -> None:
        if is_root:  # the model itself, not one of its blocks
            by_block(module, mesh, is_root)

    return _lightning_fit(trainer, task, steps, warmup, on_step, whole if variant == "ours-whole" else by_block, **kw)


def plugin(backend: str, variant: str, precision: str, **options: Any) -> Any:
    """The precision plugin of ``variant`` ("ours", with ``options``, or "builtin") for ``backend`` at ``precision``."""
    if variant == "builtin":
        builtin = pl_precision.FSDPPrecision if backend == "fsdp" else pl_precision.DeepSpeedPrecision
        return builtin(precision)  # type: ignore[arg-type]
    if backend == "fsdp":
        return precision_base.resolve(f"fsdp:{precision}", **options)
    return DeepSpeedPrecision(precision, **options)


def _policies(low: torch.dtype, reduce: torch.dtype, cast_in_blocks: bool) -> dict[bool, Any]:
    """FSDP2 policies of the root (``True``, casting its inputs) and the blocks (``False``; ``cast_in_blocks``)."""
    return {root: MixedPrecisionPolicy(param_dtype=low, reduce_dtype=reduce, cast_forward_inputs=root or cast_in_blocks)
            for root in (True, False)}  # fmt: skip


def fsdp2_variant(variant: str, precision: str, **options: Any) -> tuple[Any, Any, dict[str, Any]]:
    """FSDP2 under ``ModelParallelStrategy``: the Trainer class, ``shard(module, mesh, is_root)`` for
    ``configure_model`` and the Trainer's arguments. ``builtin``: ``fully_shard`` with a policy from
    ``FSDPPrecision.mixed_precision_config`` (what a user of the built-in writes)."""
    kw: dict[str, Any] = {"strategy": ModelParallelStrategy(data_parallel_size=world_size(), tensor_parallel_size=1)}
    if variant == "ours":
        ours = kw["precision_plugin"] = plugin("fsdp", "ours", precision, **options)
        return precision_base.Trainer, lambda m, mesh, root: ours.fully_shard(m, mesh=mesh), kw
    if variant == "amp":  # Lightning's autocast plugin on the CPU, the fp32-reducing policy written by the user
        amp = _policies(precision_dtype(precision), REDUCE[options.get("reduce_dtype") or "fp32"], False)
        kw["plugins"] = [pl_precision.MixedPrecision(precision, device="cpu")]  # type: ignore[arg-type]
        return pl.Trainer, lambda m, mesh, root: fully_shard(m, mesh=mesh, mp_policy=amp[root]), kw
    builtin = plugin("fsdp", "builtin", precision)
    mp: Any = builtin.mixed_precision_config
    policy = MixedPrecisionPolicy(param_dtype=mp.param_dtype, reduce_dtype=mp.reduce_dtype)
    kw["plugins"] = [builtin]
    return pl.Trainer, lambda m, mesh, root: fully_shard(m, mesh=mesh, mp_policy=policy), kw


def _fsdp_hand(precision: str, task: Task, steps: int, warmup: int, reduce: str, on_step: OnStep) -> Any:
    """What ``ours`` does in plain torch: FSDP2 policy, autocast, GradScaler, AdamW, float32 BatchNorm units."""
    ensure_process_group()
    low, mixed = precision_dtype(precision), precision.endswith("-mixed")
    storage = torch.float32 if mixed else low
    # under *-mixed the blocks take their inputs as given (only the root casts), as under amp
    policy = _policies(low, REDUCE[reduce] if reduce else torch.float32 if mixed else storage, not mixed)
    net, mesh = task.net().to(storage), init_device_mesh("cpu", (world_size(),))
    fp32 = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
    for norm in norms_in_fp32(net, None) if mixed else []:
        fully_shard(norm, mesh=mesh, mp_policy=fp32)
    for module in [*net.blocks, net]:
        fully_shard(module, mesh=mesh, mp_policy=policy[module is net])
    opt = torch.optim.AdamW(net.parameters(), lr=task.lr)
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "16-mixed")  # passes everything through when disabled

    def forward(x: torch.Tensor) -> Any:
        with torch.autocast("cpu", dtype=low) if mixed else contextlib.nullcontext():
            return net(x)

    def backward(loss: torch.Tensor) -> None:
        scaler.scale(loss).backward()
        scaler.unscale_(opt)

    def update() -> None:
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    return {**_hand_loop(task, steps, warmup, storage, net, opt, backward, update, on_step, forward), "module": net}


def deepspeed(variant: str, precision: str, task: Task, steps: int, warmup: int, stage: int = 2, options: Any = None,
              extra_config: dict[str, Any] | None = None, on_step: OnStep = None) -> Any:  # fmt: skip
    """DeepSpeed fit (ZeRO ``stage``): ``ours`` / ``builtin`` / ``hand``; ``extra_config`` is merged into the config."""
    strategy = DeepSpeedCPUStrategy(stage=stage, logging_batch_size_per_gpu=task.batch)
    strategy.config.update(copy.deepcopy(extra_config or {}))  # type: ignore[union-attr]
    if variant != "hand":
        chosen = plugin("deepspeed", variant, precision, **(options or {}))
        kw: dict[str, Any] = {"precision_plugin": chosen} if variant == "ours" else {"plugins": [chosen]}
        trainer = precision_base.Trainer if variant == "ours" else pl.Trainer
        result = _lightning_fit(trainer, task, steps, warmup, on_step, None, strategy=strategy, **kw)
    else:  # deepspeed.initialize with the config ours ends up with, then forward, backward, step
        import deepspeed as ds

        ensure_process_group()
        config = DeepSpeedPrecision(precision).deepspeed_config(
            {**copy.deepcopy(strategy.config or {}), "gradient_accumulation_steps": 1, "gradient_clipping": 0.0}
        )
        low, net = precision_dtype(precision), task.net()
        if precision.endswith("-true"):
            net = net.to(low)  # as the plugin's convert_module does
        elif precision.endswith("-mixed"):
            norms_in_fp32(net, low)  # as the plugin does in DeepSpeed's native mode: fp32 compute from the half copies
        engine, *_ = ds.initialize(model=net, optimizer=torch.optim.AdamW(net.parameters(), lr=task.lr), config=config)
        result = _hand_loop(task, steps, warmup, low, engine, engine.optimizer, engine.backward, engine.step, on_step)
        result["engine"] = engine
    gc.collect()
    return result


def run(backend: str, variant: str, precision: str, task: Task, steps: int, warmup: int, **kw: Any) -> dict[str, Any]:
    """One fit of ``backend``; a ``-lowreduce`` variant (FSDP ``*-mixed``) reduces in the compute dtype."""
    if variant.endswith("-lowreduce"):
        kw["reduce"] = {"16-mixed": "fp16", "bf16-mixed": "bf16"}[precision]
        variant = variant.removesuffix("-lowreduce")
    return dict((fsdp if backend == "fsdp" else deepspeed)(variant, precision, task, steps, warmup, **kw))
