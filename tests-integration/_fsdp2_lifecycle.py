"""Rank code for ``test_fsdp2_lifecycle.py``: the Lightning lifecycle and idioms under the default ``FSDP2Strategy``.

Every run goes through ``precision_base.Trainer(precision_plugin="fsdp:<p>", accelerator="cpu", devices=2)`` with no
strategy (``strategy="auto"`` picks ``precision_fsdp.FSDP2Strategy``) unless a scenario is about a strategy option;
2 ranks joined by gloo (``precision_testsupport.launch.run_ranks``). Rank 0 returns what the tests assert on.

* :func:`lifecycle`: fit (a distributed checkpoint per epoch), then validate / test / predict on the same Trainer;
  each of them on a fresh Trainer with a fresh model, without and with ``ckpt_path``; resume from the epoch-0
  checkpoint to the same end.
* :func:`precisions`: fit then validate / test / predict on the same Trainer, once per precision.
* :func:`idioms`: two optimizers with manual optimization (``toggle_optimizer`` and without), against Lightning's
  DDP; activation checkpointing on and off; a ``configure_model`` that shards itself; ``fp8-tensorwise`` with it.

The model, :class:`Net`, is the usual shape of a transformer: ``embed`` -> ``blocks`` (an ``nn.ModuleList`` of
:class:`Block`, each LayerNorm -> Linear -> GELU -> Linear with a residual) -> ``norm`` (LayerNorm) -> ``head``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from typing_extensions import override

import precision_base
from precision_testsupport.launch import world_size

WIDTH = 32
DEPTH = 2
SAMPLES = 32  # 2 ranks x batch 8: 2 steps per epoch
BATCH = 8
EPOCHS = 3
RESUME_EPOCH = 0  # resume from the checkpoint written at the end of epoch 0 (after step 2)
SEED = 7
FIT_ONLY: dict[str, Any] = dict(num_sanity_val_steps=0, check_val_every_n_epoch=1000)
"""Trainer arguments that keep validation out of ``fit`` (``limit_val_batches=0`` would empty ``validate`` too)."""


def dataset() -> TensorDataset:
    """Inputs, regression targets and each sample's index (the same in every rank and run)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, WIDTH, generator=g)
    w = torch.randn(WIDTH, 1, generator=g) / WIDTH**0.5
    return TensorDataset(x, torch.tanh(x @ w), torch.arange(SAMPLES))


class Block(nn.Module):
    """LayerNorm -> Linear -> GELU -> Linear, residual; counts how often its forward body runs."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.fc1 = nn.Linear(WIDTH, 2 * WIDTH)
        self.fc2 = nn.Linear(2 * WIDTH, WIDTH)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


class Net(LightningModule):
    """``embed`` -> ``blocks`` (ModuleList of :class:`Block`) -> ``norm`` -> ``head``; SGD with momentum (optimizer
    state to checkpoint). Records every training loss by global step and the validation/test losses."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(WIDTH, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, 1)
        self.losses: dict[int, float] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))

    def _loss(self, batch: Any) -> torch.Tensor:
        x, y, _ = batch
        return nn.functional.mse_loss(self(x).float(), y)

    @override
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.losses[self.global_step] = float(loss.detach())
        return loss

    @override
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch), sync_dist=True)

    @override
    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", self._loss(batch), sync_dist=True)

    @override
    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        x, _, index = batch
        return index.tolist(), self(x).float().flatten().tolist()

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.5)

    def _loader(self) -> DataLoader[Any]:
        return DataLoader(dataset(), batch_size=BATCH, shuffle=False)

    @override
    def train_dataloader(self) -> DataLoader[Any]:
        return self._loader()

    @override
    def val_dataloader(self) -> DataLoader[Any]:
        return self._loader()

    @override
    def test_dataloader(self) -> DataLoader[Any]:
        return self._loader()

    @override
    def predict_dataloader(self) -> DataLoader[Any]:
        return self._loader()


def full_params(module: nn.Module) -> dict[str, list[float]]:
    """Every parameter, gathered (``full_tensor()`` is a collective: call it on every rank), as float lists."""
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in module.named_parameters():
        t = p.full_tensor() if isinstance(p, DTensor) else p
        out[name] = t.detach().float().flatten().tolist()
    return out


def trainer(spec: Any, root: Path, **kwargs: Any) -> Any:
    """``precision_base.Trainer(precision_plugin=spec, accelerator="cpu", devices=2)``; the other arguments only
    quieten or limit the run."""
    world_size()  # Lightning's teardown of the previous run deleted WORLD_SIZE
    options: dict[str, Any] = dict(
        logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=root, max_epochs=1
    )
    options.update(kwargs)
    return precision_base.Trainer(precision_plugin=spec, accelerator="cpu", devices=2, **options)


def stage(run: Any, name: str, model: Any, ckpt_path: str | None = None) -> dict[str, Any]:
    """``run.<name>(model, ckpt_path=...)``: the logged loss, or the predictions (this rank's, by sample index)."""
    result = getattr(run, name)(model, ckpt_path=ckpt_path)
    if name == "predict":
        return {str(i): v for indices, values in result for i, v in zip(indices, values, strict=True)}
    return dict(result[0])


def _fit(spec: str, root: Path, ckpt_path: str | None = None) -> tuple[Net, Any]:
    seed_everything(SEED, workers=True)
    model = Net()
    ckpt = ModelCheckpoint(dirpath=root / "ckpt", every_n_epochs=1, save_top_k=-1, save_on_train_epoch_end=True)
    run = trainer(spec, root, max_epochs=EPOCHS, callbacks=[ckpt], **FIT_ONLY)
    run.fit(model, ckpt_path=ckpt_path)
    return model, run


def lifecycle(args: dict[str, Any]) -> dict[str, Any] | None:
    """fit; validate/test/predict on the same Trainer; each alone on a fresh Trainer, without and with ckpt_path;
    resume from the epoch-0 checkpoint."""
    torch.set_num_threads(1)
    spec, out = f"fsdp:{args['precision']}", Path(args["out"])
    seed_everything(SEED, workers=True)
    initial = full_params(Net())
    model, run = _fit(spec, out / "full")
    final = full_params(model)
    ckpts = sorted((out / "full" / "ckpt").iterdir())
    last = str(next(p for p in ckpts if f"epoch={EPOCHS - 1}-" in p.name))
    resume_from = str(next(p for p in ckpts if f"epoch={RESUME_EPOCH}-" in p.name))
    same = {name: stage(run, name, model) for name in ("validate", "test", "predict")}
    fresh: dict[str, Any] = {}
    for name in ("validate", "test", "predict"):
        for label, path in (("untrained", None), ("ckpt", last)):
            seed_everything(SEED, workers=True)
            fresh[f"{name}-{label}"] = stage(trainer(spec, out / f"{name}-{label}"), name, Net(), ckpt_path=path)
    resumed, _ = _fit(spec, out / "resumed", ckpt_path=resume_from)
    resumed_final = full_params(resumed)
    if run.global_rank != 0:
        return None
    return {
        "strategy": type(run.strategy).__name__,
        "initial_params": initial,
        "final_params": final,
        "losses": model.losses,
        "last_ckpt": last,
        "same": same,
        "fresh": fresh,
        "resume_step": (RESUME_EPOCH + 1) * SAMPLES // (2 * BATCH),
        "resumed_losses": resumed.losses,
        "resumed_final_params": resumed_final,
    }


def precisions(args: dict[str, Any]) -> dict[str, Any] | None:
    """For each precision: fit (1 epoch), then validate, test and predict on the same Trainer."""
    torch.set_num_threads(1)
    out = Path(args["out"])
    results: dict[str, Any] = {}
    rank = 0
    for precision in args["precisions"]:
        seed_everything(SEED, workers=True)
        model = Net()
        run = trainer(f"fsdp:{precision}", out / precision, enable_checkpointing=False, **FIT_ONLY)
        run.fit(model)
        entry: dict[str, Any] = {"losses": model.losses, "strategy": type(run.strategy).__name__}
        for name in ("validate", "test", "predict"):
            try:
                entry[name] = stage(run, name, model)
            except Exception as err:  # the test shows what the user would see
                entry[name] = {"error": f"{type(err).__name__}: {err}"}
        entry["param_dtypes"] = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
        rank = run.global_rank
        results[precision] = entry
    return results if rank == 0 else None


# -- idioms ----------------------------------------------------------------------------------------------------------
class Mlp(nn.Module):
    """Two Linear layers held directly (no container): under every policy one FSDP2 unit holding its own
    parameters, so the unit is an FSDP2 root."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(inputs, WIDTH)
        self.fc2 = nn.Linear(WIDTH, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


class Gan(LightningModule):
    """The GAN pattern of Lightning's manual-optimization docs: a generator and a discriminator step per batch,
    each with its own optimizer, ``toggle_optimizer`` around each (``toggle=False``: no toggling, gradients zeroed
    before each step). ``shard``: ``configure_model`` shards both networks and the module itself through the
    precision plugin (default ``reshard_after_forward``: each network is an FSDP2 root)."""

    def __init__(self, toggle: bool, shard: bool = False) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.toggle, self.shard = toggle, shard
        self.generator = Mlp(8, WIDTH)
        self.discriminator = Mlp(WIDTH, 1)
        self.losses: list[list[float]] = []

    @override
    def configure_model(self) -> None:
        if not self.shard:
            return
        plugin: Any = self.trainer.precision_plugin
        mesh = self.device_mesh["data_parallel"]  # type: ignore[index]
        for module in (self.generator, self.discriminator, self):
            plugin.fully_shard(module, mesh=mesh)

    @override
    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, _, index = batch
        z = torch.sin(index[:, None].float() + torch.arange(8.0))  # the same noise under every strategy
        g_opt, d_opt = self.optimizers()  # type: ignore[misc]
        if self.toggle:
            self.toggle_optimizer(g_opt)
        else:
            g_opt.zero_grad()
        g_loss = nn.functional.softplus(-self.discriminator(self.generator(z))).mean()
        self.manual_backward(g_loss)
        g_opt.step()
        g_opt.zero_grad()
        if self.toggle:
            self.untoggle_optimizer(g_opt)
            self.toggle_optimizer(d_opt)
        else:
            d_opt.zero_grad()
        fake = self.generator(z).detach()
        real_loss = nn.functional.softplus(-self.discriminator(x)).mean()
        d_loss = real_loss + nn.functional.softplus(self.discriminator(fake)).mean()
        self.manual_backward(d_loss)
        d_opt.step()
        d_opt.zero_grad()
        if self.toggle:
            self.untoggle_optimizer(d_opt)
        self.losses.append([float(g_loss.detach()), float(d_loss.detach())])

    @override
    def configure_optimizers(self) -> Any:
        return (
            torch.optim.SGD(self.generator.parameters(), lr=0.1, momentum=0.5),
            torch.optim.SGD(self.discriminator.parameters(), lr=0.1, momentum=0.5),
        )

    @override
    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(dataset(), batch_size=BATCH, shuffle=False)


def _gan(toggle: bool, out: Path, *, shard: bool = False, ddp: bool = False) -> dict[str, Any]:
    seed_everything(SEED, workers=True)
    model = Gan(toggle, shard)
    quiet = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    try:
        if ddp:  # the reference: Lightning's own Trainer and DDP, fp32
            import lightning.pytorch as pl

            world_size()
            strategy = "ddp_find_unused_parameters_true"  # toggle_optimizer leaves the other network out of a loss
            reference = pl.Trainer(
                accelerator="cpu", devices=2, strategy=strategy, max_epochs=2, default_root_dir=out, **quiet
            )
            reference.fit(model)
        else:
            trainer("fsdp:32-true", out, max_epochs=2, enable_checkpointing=False).fit(model)
    except Exception as err:  # the test shows what the user would see
        return {"error": f"{type(err).__name__}: {err}"}
    return {"losses": model.losses, "params": full_params(model)}


class ForwardCalls(Callback):
    """Per training step: how many times the forward body of each Block ran (forward and any recompute)."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    @override
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        for block in pl_module.blocks:
            block.calls = 0

    @override
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.calls.append([block.calls for block in pl_module.blocks])


def _checkpointing(on: bool, out: Path) -> dict[str, Any]:
    from precision_fsdp import FSDP2Strategy

    seed_everything(SEED, workers=True)
    model, calls = Net(), ForwardCalls()
    strategy = FSDP2Strategy(activation_checkpointing=(Block,) if on else None)
    run = trainer("fsdp:32-true", out, strategy=strategy, callbacks=[calls], enable_checkpointing=False, **FIT_ONLY)
    run.fit(model)
    return {
        "calls": calls.calls,
        "losses": model.losses,
        "params": full_params(model),
        "checkpointed": run.strategy.checkpointed,
    }


class SelfSharded(Net):
    """:class:`Net` whose ``configure_model`` shards each block, then the rest, through the precision plugin, and
    makes no other call (no ``prepare_for_sharding``)."""

    @override
    def configure_model(self) -> None:
        plugin: Any = self.trainer.precision_plugin
        mesh = self.device_mesh["data_parallel"]  # type: ignore[index]
        for block in self.blocks:
            plugin.fully_shard(block, mesh=mesh)
        for module in (self.embed, self.norm, self.head, self):
            plugin.fully_shard(module, mesh=mesh)


def _self_sharded(spec: Any, out: Path) -> dict[str, Any]:
    seed_everything(SEED, workers=True)
    model = SelfSharded()
    run = trainer(spec, out, strategy="auto", enable_checkpointing=False, **FIT_ONLY)
    try:
        run.fit(model)
        validated = stage(run, "validate", model)
    except Exception as err:  # the test shows what the user would see
        return {"error": f"{type(err).__name__}: {err}"}
    return {
        "strategy": type(run.strategy).__name__,
        "losses": model.losses,
        "validate": validated,
        "converted": list(getattr(run.precision_plugin, "fp8_converted", [])),
        "linear_classes": sorted({type(m).__name__ for m in model.modules() if isinstance(m, nn.Linear)}),
    }


def idioms(args: dict[str, Any]) -> dict[str, Any] | None:
    """Two optimizers (manual optimization, with and without toggle_optimizer; default sharding and a
    configure_model that shards) against DDP; activation checkpointing on/off; a self-sharding configure_model
    under bf16-mixed and (``fp8``) fp8-tensorwise with emulation."""
    torch.set_num_threads(1)
    out = Path(args["out"])
    result: dict[str, Any] = {}
    # one reference: without toggling, each optimizer's gradients are zeroed before its loss's backward, so both
    # variants compute the same update
    result["gan-ddp"] = _gan(True, out / "gan-ddp", ddp=True)
    result["gan-toggle"] = _gan(True, out / "gan-toggle")
    result["gan-no-toggle"] = _gan(False, out / "gan-no-toggle")
    result["gan-toggle-configure_model"] = _gan(True, out / "gan-toggle-cm", shard=True)
    result["checkpointing-on"] = _checkpointing(True, out / "ac-on")
    result["checkpointing-off"] = _checkpointing(False, out / "ac-off")
    result["self-sharded"] = _self_sharded("fsdp:bf16-mixed", out / "self-sharded")
    if args.get("fp8"):
        result["self-sharded-fp8"] = _self_sharded(
            precision_base.resolve("fsdp:fp8-tensorwise", fp8_emulate=True), out / "self-sharded-fp8"
        )
    return result if int(torch.distributed.get_rank()) == 0 else None
