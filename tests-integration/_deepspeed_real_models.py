"""What runs inside the ranks of ``test_deepspeed_real_models.py``: real DeepSpeed engines on the CPU accelerator.

* :func:`fit_resnet`: a ``transformers`` ResNet built from a tiny ``ResNetConfig`` (BatchNorm2d in every block), trained
  by name through ``precision_base.Trainer(precision_plugin=SPEC, accelerator="cpu", devices=2)`` (ZeRO-2, the
  default); records losses, the BatchNorm running statistics before and after, and the dtypes seen by hooks.
* :func:`overflow_storm`: a model whose gradients are never finite, under ``deepspeed:bf16-mixed`` with
  ``max_skipped_steps=4``, through the Trainer door and the Fabric door; records the error and the warnings.
* :func:`autocast_fp16_engine`: DeepSpeed's own ``torch_autocast`` float16 mode (the mode the plugin refuses),
  ``deepspeed.initialize`` with ZeRO-2 and gradient clipping, stepped by hand; records per step what DeepSpeed's
  ZeRO optimizer and its GradScaler did. The plugin's refusal rests on this; if a DeepSpeed release fixes it, the
  test that reads this fails and the refusal should be revisited.
"""

from __future__ import annotations

import warnings
from typing import Any

QUIET: dict[str, Any] = dict(
    logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
)


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


# -- BatchNorm ---------------------------------------------------------------------------------------------------
def _resnet_module() -> Any:
    import lightning.pytorch as pl
    import torch
    from transformers import ResNetConfig, ResNetForImageClassification

    class ResNetClassifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            config = ResNetConfig(
                num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
                num_labels=4,
            )  # fmt: skip
            self.net = ResNetForImageClassification(config)
            self.losses: list[float] = []

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            logits = self.net(pixel_values=x).logits
            loss = torch.nn.functional.cross_entropy(logits.float(), y)
            self.losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    return ResNetClassifier()


def fit_resnets(args: dict[str, Any]) -> dict[str, Any] | None:
    """:func:`fit_resnet` for each of ``args["runs"]`` (name -> ``{"spec": ..., "options": ...}``), in turn."""
    from precision_testsupport.launch import world_size

    results = {}
    for name, run in args["runs"].items():
        world_size()  # Lightning's teardown of the previous fit deleted WORLD_SIZE
        results[name] = fit_resnet({**run, "steps": args["steps"]})
    return results if _rank() == 0 else None


def fit_resnet(args: dict[str, Any]) -> dict[str, Any] | None:
    """Train the ResNet under ``args["spec"]`` (``args["options"]``: plugin options) for ``args["steps"]`` steps."""
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import precision_base

    pl.seed_everything(7)
    model = _resnet_module()
    norms = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.BatchNorm2d)]
    before = {n: m.running_mean.detach().clone() for n, m in norms}
    seen: dict[str, set[tuple[str, str, str]]] = {}

    def record(name: str) -> Any:
        def hook(module: torch.nn.Module, inputs: Any, output: Any) -> None:
            # (input dtype, weight dtype as stored, output dtype) at each BatchNorm's forward
            seen.setdefault(name, set()).add((_name(inputs[0].dtype), _name(module.weight.dtype), _name(output.dtype)))

        return hook

    for name, module in norms:
        module.register_forward_hook(record(name))
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 3, 16, 16, generator=gen), torch.randint(0, 4, (64,), generator=gen))
    plugin = precision_base.resolve(args["spec"], **args.get("options", {}))
    trainer = precision_base.Trainer(
        precision_plugin=plugin, accelerator="cpu", devices=2, max_steps=args["steps"], num_sanity_val_steps=0,
        **QUIET,
    )  # fmt: skip
    trainer.fit(model, DataLoader(data, batch_size=8, shuffle=False))
    engine = trainer.model
    after = {n: m for n, m in norms}
    result = {
        "zero_stage": engine.zero_optimization_stage(),
        "losses": model.losses,
        "running_mean_dtypes": sorted({_name(m.running_mean.dtype) for m in after.values()}),
        "running_var_dtypes": sorted({_name(m.running_var.dtype) for m in after.values()}),
        "running_mean_changed": all(not torch.equal(before[n], m.running_mean.float()) for n, m in after.items()),
        "batches_tracked": sorted({int(m.num_batches_tracked) for m in after.values()}),
        "seen": {n: sorted(v) for n, v in seen.items()},
        "conv_weight_dtypes": sorted(
            {_name(m.weight.dtype) for m in engine.module.modules() if isinstance(m, torch.nn.Conv2d)}
        ),
        "dtypes": dict(trainer.precision_plugin.dtypes().rows()),
        "notes": list(trainer.precision_plugin.dtypes().notes),
    }
    return result if _rank() == 0 else None


# -- steps that never update ---------------------------------------------------------------------------------------
def _never_finite_module() -> Any:
    import lightning.pytorch as pl
    import torch

    class NeverFinite(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            (x,) = batch
            return self.layer(x).float().pow(2).mean() * float("inf")  # the gradients are inf/NaN on every step

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    return NeverFinite()


def overflow_storm(args: dict[str, Any]) -> dict[str, Any] | None:
    """Both doors, ``deepspeed:bf16-mixed`` with ``max_skipped_steps=args["limit"]``, gradients never finite."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import precision_base
    from precision_testsupport.launch import world_size

    limit = args["limit"]
    out: dict[str, Any] = {}

    def caught(run: Any) -> dict[str, Any]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                steps = run()
                error: Any = None
            except precision_base.OverflowStormError as exc:
                steps, error = None, {"type": type(exc).__name__, "message": str(exc)}
        storm = [str(w.message) for w in seen if w.category is RuntimeWarning and "in a row" in str(w.message)]
        return {"error": error, "warnings": storm, "steps": steps}

    def trainer_door() -> Any:
        model = _never_finite_module()
        trainer = precision_base.Trainer(
            precision_plugin=precision_base.resolve("deepspeed:bf16-mixed", max_skipped_steps=limit),
            accelerator="cpu", devices=2, max_steps=3 * limit, **QUIET,
        )  # fmt: skip
        trainer.fit(model, DataLoader(TensorDataset(torch.randn(16 * limit, 8)), batch_size=4))
        return trainer.global_step

    out["trainer"] = caught(trainer_door)
    world_size()  # Lightning's teardown of the fit deleted WORLD_SIZE

    def fabric_door() -> Any:
        fabric = precision_base.Fabric(
            precision_plugin=precision_base.resolve_fabric("deepspeed:bf16-mixed", max_skipped_steps=limit),
            accelerator="cpu", devices=2,
        )  # fmt: skip
        fabric.launch()
        module = torch.nn.Linear(8, 1)
        model, optimizer = fabric.setup(module, torch.optim.AdamW(module.parameters(), lr=1e-2))
        steps = 0
        for _ in range(3 * limit):
            loss = model(torch.randn(4, 8)).float().pow(2).mean() * float("inf")
            fabric.backward(loss)
            optimizer.step()
            steps += 1
        return steps

    out["fabric"] = caught(fabric_door)
    return out if _rank() == 0 else None


# -- DeepSpeed's torch_autocast float16 mode, without the plugin -------------------------------------------------------
def autocast_fp16_engine(args: dict[str, Any]) -> dict[str, Any] | None:
    """``deepspeed.initialize`` in DeepSpeed's torch_autocast float16 mode (ZeRO-2, ``gradient_clipping``), on the
    small regression model of issue 18; ``args["target_scale"]`` scales the targets (larger: larger gradients)."""
    import deepspeed
    import torch

    from precision_deepspeed import _compat
    from precision_testsupport.models import regression_data

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 2},
        "fp16": {"enabled": False},
        "bf16": {"enabled": False},
        "torch_autocast": {"enabled": True, "dtype": "float16"},
    }
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    data = regression_data(16, 64)
    rows = []
    for step in range(args["steps"]):
        x, y = data.tensors[0][step * 8 : (step + 1) * 8], data.tensors[1][step * 8 : (step + 1) * 8]
        out = engine(x)
        loss = (out.float() - y * args["target_scale"]).pow(2).mean()
        engine.backward(loss)
        engine.step()
        scaler = engine.optimizer.torch_autocast_gradscaler
        norm = engine.get_global_grad_norm()
        rows.append({
            "applied": bool(engine.was_step_applied()),
            "gradscaler_scale": float(scaler.get_scale()),
            "optimizer_loss_scale": float(engine._get_optimizer_loss_scale()),
            "plugin_reads": _compat.engine_loss_scale(engine),
            "grad_norm": None if norm is None else float(norm),
        })  # fmt: skip
    result = {"rows": rows, "skipped_steps": int(engine.skipped_steps)}
    return result if _rank() == 0 else None
