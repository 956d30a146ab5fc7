"""One 2-process FSDP2 training on CPU through precision_base.Trainer, run in 2 ranks by the fsdp integration tests.

``run_ranks("_fsdp_train.py:train", {"precision": ..., "out": ..., "inf_step": N})`` (from
:mod:`precision_testsupport.launch`) trains :class:`TinyMLP` for
EPOCHS x STEPS_PER_EPOCH steps, clipping gradients by norm, with ``precision_plugin="fsdp:<precision>"`` under
``ModelParallelStrategy`` (gloo), saving a distributed checkpoint at the end of every epoch. Then, in the same
processes, a second Trainer resumes from the checkpoint written after epoch RESUME_EPOCH and trains to the same end.
Checkpoints are taken at epoch ends so the resumed run sees the same batches in the same order as the uninterrupted
one. ``inf_step`` N fills rank 1's gradient shard with inf at step N (16-mixed). Rank 0 returns everything the
tests assert on.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import seed_everything
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.tensor import DTensor
from typing_extensions import override

from precision_base import Trainer
from precision_testsupport.launch import world_size
from precision_testsupport.models import TinyRegressor, dtype_name

EPOCHS = 4
STEPS_PER_EPOCH = 2
RESUME_EPOCH = 1  # resume from the checkpoint written at the end of epoch index 1 (after step 4)
BATCH = 8
WIDTH = 32


def _recording_reduce_scatter(dtypes: list[str]) -> Any:
    """A ReduceScatter that records the dtype it reduces in, then does what FSDP2's default does."""
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

    class Recording(DefaultReduceScatter):  # type: ignore[misc]
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, *args: Any, **kw: Any) -> Any:
            dtypes.append(dtype_name(input_tensor.dtype))
            return super().__call__(output_tensor, input_tensor, *args, **kw)

    return Recording()


class TinyMLP(TinyRegressor):
    """TinyRegressor (Linear(32, 32) -> GELU -> Linear(32, 1), SGD with momentum), sharded by the plugin's
    ``fully_shard`` (``net``, then the root), recording the reduce-scatter dtypes, the dtypes of the first Linear in
    forward, and each step's loss; ``inf_step`` fills rank 1's gradient shard of ``net[0].weight`` with inf."""

    def __init__(self, inf_step: int = -1) -> None:
        super().__init__(features=WIDTH, hidden=WIDTH, lr=0.1, samples=BATCH * STEPS_PER_EPOCH * 2, batch_size=BATCH)
        self.inf_step = inf_step
        self.seen: dict[str, Any] = {"losses": {}, "reduce_dtypes": [], "compute_dtypes": [], "param_dtypes_fwd": []}

    @override
    def configure_model(self) -> None:
        plugin: Any = self.trainer.precision_plugin
        mesh = self.device_mesh["data_parallel"]  # type: ignore[index]
        plugin.fully_shard(self.net, mesh=mesh)  # the one line: dtypes come from the plugin
        plugin.fully_shard(self, mesh=mesh)
        recorder = _recording_reduce_scatter(self.seen["reduce_dtypes"])
        for module in (self.net, self):
            module.set_custom_reduce_scatter(recorder)

        def record(module: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
            self.seen["compute_dtypes"].append(dtype_name(output.dtype))
            self.seen["param_dtypes_fwd"].append(dtype_name(module.weight.dtype))

        self.net[0].register_forward_hook(record)  # type: ignore[index]

    @override
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.seen["losses"][self.global_step] = self.losses[-1]
        return loss

    @override
    def on_after_backward(self) -> None:
        if self.global_step == self.inf_step and self.global_rank == 1:
            # only rank 1 sees inf: the found-inf flag must still make both ranks skip
            grad = self.net[0].weight.grad  # type: ignore[index]  # 32x32: each rank's shard is non-empty
            (grad.to_local() if isinstance(grad, DTensor) else grad).fill_(math.inf)


def full_params(module: torch.nn.Module) -> dict[str, list[float]]:
    out = {}
    for name, p in module.named_parameters():
        t = p.full_tensor() if isinstance(p, DTensor) else p
        out[name] = t.detach().float().flatten().tolist()
    return out


class Probe(Callback):
    """Records per-step scaler state, the sharded parameter dtypes and the full weights before/after each step."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, Any]] = {}
        self.sharded: dict[str, Any] = {}

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.sharded = {
            name: {"dtype": dtype_name(p.dtype), "dtensor": isinstance(p, DTensor)}
            for name, p in pl_module.named_parameters()
        }
        scaler = trainer.precision_plugin.scaler
        self.start_scale = scaler.get_scale() if scaler is not None else None

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.steps[trainer.global_step] = {
            "before": full_params(pl_module),
            "grad_dtypes": sorted({dtype_name(g.dtype) for g in grads}),
        }

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step - 1
        scaler = trainer.precision_plugin.scaler
        entry = self.steps.setdefault(step, {})
        entry["after"] = full_params(pl_module)
        entry["scale_after"] = scaler.get_scale() if scaler is not None else None


def fit(precision: str, root: Path, inf_step: int, ckpt_path: str | None) -> tuple[TinyMLP, Probe, Any]:
    world_size()  # Lightning's teardown of the previous fit deleted WORLD_SIZE
    seed_everything(7, workers=True)
    model = TinyMLP(inf_step=inf_step)
    probe = Probe()
    ckpt = ModelCheckpoint(dirpath=root / "ckpt", every_n_epochs=1, save_top_k=-1, save_on_train_epoch_end=True)
    trainer = Trainer(
        precision_plugin=f"fsdp:{precision}",
        strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
        accelerator="cpu",
        devices=2,
        max_epochs=EPOCHS,
        callbacks=[probe, ckpt],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        gradient_clip_val=1.0,
        gradient_clip_algorithm="norm",
    )
    trainer.fit(model, ckpt_path=ckpt_path)
    return model, probe, trainer


def train(args: dict[str, Any]) -> dict[str, Any] | None:
    """Both fits in this rank; rank 0 returns the result the tests assert on."""
    precision, out, inf_step = args["precision"], Path(args["out"]), int(args.get("inf_step", -1))
    torch.set_num_threads(1)

    model, probe, trainer = fit(precision, out / "full", inf_step, None)
    ckpts = sorted((out / "full" / "ckpt").iterdir())
    resume_from = next(p for p in ckpts if f"epoch={RESUME_EPOCH}-" in p.name)
    saved_plugin_state = None
    if trainer.global_rank == 0:
        meta = torch.load(resume_from / "meta.pt", weights_only=False)
        saved_plugin_state = meta.get(type(trainer.precision_plugin).__qualname__)
    plugin_repr = repr(trainer.precision_plugin)
    dtypes = dict(trainer.precision_plugin.dtypes().rows())

    model2, probe2, _trainer2 = fit(precision, out / "resumed", -1, str(resume_from))
    final, resumed_final = full_params(model), full_params(model2)  # full_tensor() is a collective: every rank
    if trainer.global_rank != 0:
        return None
    plugin = trainer.precision_plugin
    return {
        "precision": precision,
        "plugin": plugin_repr,
        "plugin_type": f"{type(plugin).__module__}.{type(plugin).__qualname__}",
        "scaler_type": type(plugin.scaler).__name__ if plugin.scaler else None,
        "table": dtypes,
        "resume_step": (RESUME_EPOCH + 1) * STEPS_PER_EPOCH,
        "sharded": probe.sharded,
        "compute_dtypes": sorted(set(model.seen["compute_dtypes"])),
        "param_dtypes_fwd": sorted(set(model.seen["param_dtypes_fwd"])),
        "reduce_dtypes": sorted(set(model.seen["reduce_dtypes"])),
        "losses": model.seen["losses"],
        "steps": probe.steps,
        "start_scale": probe.start_scale,
        "saved_plugin_state": saved_plugin_state,
        "resumed_losses": model2.seen["losses"],
        "resumed_steps": probe2.steps,
        "resumed_start_scale": probe2.start_scale,
        "final_params": final,
        "resumed_final_params": resumed_final,
        "world_size": trainer.world_size,
    }
