"""Real FSDP2 fits on CPU through each door a Lightning user has, run as a script by test_fsdp_cpu_training.py.

``python _fsdp_doors.py <scenario> <out_dir>``; Lightning's own launcher starts the second process for the 2-process
scenarios (the way a user's ``python train.py`` runs), which is why this is a script. Rank 0 writes
``<out_dir>/result.json``: one record per fit.

Scenarios:
    bare2: ``precision_base.Trainer(precision_plugin="fsdp:<p>", devices=2)`` with a LightningModule that has no
        ``configure_model`` (bf16-mixed, 32-true); plain ``lightning.Trainer`` with Lightning's
        ``ModelParallelStrategy`` and ``FSDPPrecision`` options in ``plugins=``; ``pytorch_lightning.Trainer`` with
        its own ``ModelParallelStrategy``; ``precision_base.pytorch_lightning.Trainer(precision_plugin=...,
        devices=2)`` (no configure_model); a 16-mixed overflow storm and a bf16-mixed one under
        ``check_finite_grads`` (last: they end in errors).
    bare1: the front-page line in one process (no ``devices``), every precision.
    resume: checkpoints resumed under another precision: 16-mixed -> bf16-mixed -> 16-mixed -> 32-true, then
        32-true -> bf16-true (refused; last).
The arguments besides ``precision_plugin``/``devices`` only limit the run (``max_steps``) or observe it (callbacks,
no logger, no progress bar); none chooses a strategy, accelerator or sharding.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

WIDTH = 16
BATCH = 8


def _data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH * 2 * 8, WIDTH, generator=g)
    return TensorDataset(x, torch.tanh(x[:, :1] * 2))


def make_module(pl: Any, *, shard_in_configure_model: bool, inf_loss: bool = False) -> Any:
    """A LightningModule class of the namespace ``pl`` (``lightning.pytorch`` or ``pytorch_lightning``)."""

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(WIDTH, WIDTH)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.gelu(self.linear(x)) + x

    class Net(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Linear(WIDTH, WIDTH)
            self.blocks = torch.nn.Sequential(Block(), Block())
            self.head = torch.nn.Linear(WIDTH, 1)
            self.losses: list[float] = []
            self.compute: set[str] = set()
            self.embed.register_forward_hook(lambda m, a, out: self.compute.add(str(out.dtype)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.blocks(self.embed(x)))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self(x).float(), y)
            if inf_loss:
                loss = loss * math.inf
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.5)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(_data(), batch_size=BATCH, shuffle=False)

    if shard_in_configure_model:

        def configure_model(self: Any) -> None:
            plugin = self.trainer.precision_plugin
            for block in self.blocks:
                plugin.fully_shard(block, mesh=self.device_mesh["data_parallel"])
            plugin.fully_shard(self, mesh=self.device_mesh["data_parallel"])

        Net.configure_model = configure_model
    return Net


def make_probe(pl: Any) -> Any:
    from precision_fsdp._compat import DTensor, FSDPModule

    class Probe(pl.Callback):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            self.facts: dict[str, Any] = {"scales": [], "grad_dtypes": set(), "param_sums": []}

        def on_train_start(self, trainer: Any, module: Any) -> None:
            plugin = trainer.precision_plugin
            self.facts.update(
                strategy=type(trainer.strategy).__name__,
                strategy_module=type(trainer.strategy).__module__,
                plugin=f"{type(plugin).__module__}.{type(plugin).__qualname__}",
                world_size=trainer.world_size,
                units=sorted(name or "<root>" for name, m in module.named_modules() if isinstance(m, FSDPModule)),
                param_dtypes=sorted({str(p.dtype) for p in module.parameters()}),
                all_dtensor=all(isinstance(p, DTensor) for p in module.parameters()),
                scaler=type(plugin.scaler).__name__ if getattr(plugin, "scaler", None) is not None else None,
                start_scale=plugin.scaler.get_scale() if getattr(plugin, "scaler", None) is not None else None,
                start_step=trainer.global_step,
            )

        def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
            self.facts["grad_dtypes"] |= {str(p.grad.dtype) for p in module.parameters() if p.grad is not None}

        def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
            scaler = getattr(trainer.precision_plugin, "scaler", None)
            self.facts["scales"].append(scaler.get_scale() if scaler is not None else None)
            local = [p.to_local() if isinstance(p, DTensor) else p for p in module.parameters()]
            self.facts["param_sums"].append(float(sum(t.detach().double().abs().sum() for t in local)))

    return Probe()


SEEN: dict[str, list[str]] = {"throughput": [], "reduce": []}
"""What the spies below recorded during the current fit."""


def _install_spies(pl: Any) -> None:
    """Record (then do) what cannot be observed otherwise on CPU, once per namespace:

    * the dtype Lightning's ThroughputMonitor asks FLOPs for: on CPU the lookup answers None for every dtype, so
      the argument is the only place the callback's compute dtype shows;
    * the dtype of every gradient reduce-scatter FSDP2 issues.
    """
    import torch.distributed as dist

    module = pl.callbacks.throughput_monitor
    if not getattr(module.get_available_flops, "spy", False):
        real_flops = module.get_available_flops

        def flops(device: Any, dtype: Any) -> Any:
            SEEN["throughput"].append(str(dtype))
            return real_flops(device, dtype)

        flops.spy = True  # type: ignore[attr-defined]
        module.get_available_flops = flops
    for name in ("reduce_scatter_single", "reduce_scatter_tensor"):  # FSDP2 calls the first on newer torch
        real = getattr(dist, name, None)
        if real is not None and not getattr(real, "spy", False):
            setattr(dist, name, _recording_reduce_scatter(real))


def _recording_reduce_scatter(real: Any) -> Any:
    def reduce_scatter(*args: Any, **kwargs: Any) -> Any:
        tensor = kwargs["input"] if "input" in kwargs else args[1]
        SEEN["reduce"].append(str(tensor.dtype))
        return real(*args, **kwargs)

    reduce_scatter.spy = True  # type: ignore[attr-defined]
    return reduce_scatter


QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


def fit(
    label: str, pl: Any, trainer_cls: Any, module_cls: Any, root: Path, ckpt: str | None = None, **kwargs: Any
) -> tuple[dict[str, Any], Any]:
    """One fit; returns its record and the trainer. Warnings and an exception are recorded, not raised."""
    _install_spies(pl)
    for seen in SEEN.values():
        seen.clear()
    torch.manual_seed(0)
    model = module_cls()
    probe = make_probe(pl)
    monitor = pl.callbacks.ThroughputMonitor(batch_size_fn=lambda batch: batch[0].shape[0])
    record: dict[str, Any] = {"label": label}
    trainer = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer = trainer_cls(callbacks=[probe, monitor], default_root_dir=root / label, **QUIET, **kwargs)
            trainer.fit(model, ckpt_path=ckpt)
        except Exception as exc:  # recorded for the test to assert on
            record["error"] = f"{type(exc).__name__}: {exc}"
    record.update(probe.facts)
    record["grad_dtypes"] = sorted(record["grad_dtypes"])
    record.update(
        losses=model.losses,
        compute=sorted(model.compute),
        throughput_dtype=list(SEEN["throughput"]),
        reduce_dtypes=sorted(set(SEEN["reduce"])),
        warnings=[str(w.message) for w in caught],
    )
    return record, trainer


def bare2(out: Path) -> list[dict[str, Any]]:
    import lightning.pytorch as pl
    import pytorch_lightning as ptl
    from lightning.pytorch.strategies import ModelParallelStrategy

    import precision_base
    from precision_fsdp import FSDPPrecision

    plain = make_module(pl, shard_in_configure_model=False)
    sharding = make_module(pl, shard_in_configure_model=True)
    records = []
    for precision in ("bf16-mixed", "32-true"):
        trainer_cls = partial(precision_base.Trainer, precision_plugin=f"fsdp:{precision}", devices=2)
        records.append(fit(f"bare-{precision}", pl, trainer_cls, plain, out, max_steps=6)[0])
    # plain lightning.Trainer, Lightning's own strategy, our plugin with non-default options in plugins=
    options = {"init_scale": 1024.0, "growth_factor": 4.0, "growth_interval": 2, "reduce_dtype": "bf16"}
    trainer_cls = partial(
        pl.Trainer,
        plugins=[FSDPPrecision("16-mixed", **options)],
        strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
        accelerator="cpu",
        devices=2,
    )
    records.append(fit("lightning-plain-16-mixed-options", pl, trainer_cls, sharding, out, max_steps=5)[0])
    # the user's own scaler, starting so high that the first steps overflow in fp16: it backs off by its own factor
    user_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24, backoff_factor=0.125)
    trainer_cls = partial(
        pl.Trainer,
        plugins=[FSDPPrecision("16-mixed", scaler=user_scaler)],
        strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
        accelerator="cpu",
        devices=2,
    )
    record = fit("lightning-plain-16-mixed-user-scaler", pl, trainer_cls, sharding, out, max_steps=6)[0]
    record["scaler_is_users"] = record.get("scaler") is not None and user_scaler.get_scale() == record["scales"][-1]
    records.append(record)
    # pytorch_lightning.Trainer, pytorch_lightning's strategy, the plugin built for that namespace
    trainer_cls = partial(
        ptl.Trainer,
        plugins=[precision_base.resolve("fsdp:bf16-mixed", namespace="pytorch_lightning")],
        strategy=ptl.strategies.ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
        accelerator="cpu",
        devices=2,
    )
    ptl_module = make_module(ptl, shard_in_configure_model=True)
    records.append(fit("pytorch_lightning-bf16-mixed", ptl, trainer_cls, ptl_module, out, max_steps=6)[0])
    # the front-page line through the pytorch_lightning door, a module that does not shard itself
    from precision_base.pytorch_lightning import Trainer as PTLTrainer

    trainer_cls = partial(PTLTrainer, precision_plugin="fsdp:bf16-mixed", devices=2)
    ptl_plain = make_module(ptl, shard_in_configure_model=False)
    records.append(fit("pytorch_lightning-bare-bf16-mixed", ptl, trainer_cls, ptl_plain, out, max_steps=6)[0])
    # an overflow storm: every step overflows; training must stop with a clear error (kept last: it raises)
    storm = make_module(pl, shard_in_configure_model=False, inf_loss=True)
    trainer_cls = partial(
        pl.Trainer, plugins=[FSDPPrecision("16-mixed", max_skipped_steps=4)], devices=2, strategy=_fsdp2(pl)
    )
    records.append(fit("overflow-storm", pl, trainer_cls, storm, out, max_steps=10)[0])
    # bf16-mixed with the finite-gradient check: non-finite steps are skipped on every rank, then training stops
    trainer_cls = partial(
        pl.Trainer,
        plugins=[FSDPPrecision("bf16-mixed", check_finite_grads=True, max_skipped_steps=3)],
        devices=2,
        strategy=_fsdp2(pl),
    )
    records.append(fit("finite-check-bf16-mixed", pl, trainer_cls, storm, out, max_steps=10)[0])
    return records


def _fsdp2(pl: Any) -> Any:
    from precision_base.namespaces import for_namespace
    from precision_fsdp import FSDP2Strategy

    return for_namespace(FSDP2Strategy, pl.__name__)()


def bare1(out: Path) -> list[dict[str, Any]]:
    import lightning.pytorch as pl

    import precision_base

    plain = make_module(pl, shard_in_configure_model=False)
    records = []
    for precision in ("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"):
        trainer_cls = partial(precision_base.Trainer, precision_plugin=f"fsdp:{precision}")
        records.append(fit(f"one-process-{precision}", pl, trainer_cls, plain, out, max_steps=6)[0])
    return records


def resume(out: Path) -> list[dict[str, Any]]:
    import lightning.pytorch as pl

    import precision_base

    plain = make_module(pl, shard_in_configure_model=False)
    records = []
    ckpt: str | None = None
    # "builtin-32-true": Lightning's own FSDPPrecision (plain lightning.Trainer; FSDP2Strategy shards with plain
    # fully_shard for a plugin without one), to show checkpoints move between the two classes both ways
    chain = [
        ("16-mixed", 2),
        ("bf16-mixed", 4),
        ("16-mixed", 6),
        ("32-true", 8),
        ("builtin-32-true", 10),
        ("32-true", 12),
        ("bf16-true", 14),
    ]
    for i, (precision, steps) in enumerate(chain):
        if precision.startswith("builtin-"):
            builtin = pl.plugins.precision.FSDPPrecision(precision.removeprefix("builtin-"))
            trainer_cls = partial(pl.Trainer, plugins=[builtin], strategy=_fsdp2(pl), devices=2)
        else:
            trainer_cls = partial(precision_base.Trainer, precision_plugin=f"fsdp:{precision}", devices=2)
        record, trainer = fit(f"resume-{i}-{precision}", pl, trainer_cls, plain, out, ckpt=ckpt, max_steps=steps)
        record["resumed_from"] = ckpt
        records.append(record)
        if "error" in record:
            break
        ckpt = str(out / f"step-{steps}.ckpt")
        trainer.save_checkpoint(ckpt)
    return records


def main() -> int:
    scenario, out = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    records = {"bare2": bare2, "bare1": bare1, "resume": resume}[scenario](out)
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        (out / "result.json").write_text(json.dumps(records))
    return 0


if __name__ == "__main__":
    from precision_testsupport.launch import leave_rank

    leave_rank(main())  # both processes (Lightning's launcher starts the second): no abort at interpreter teardown
