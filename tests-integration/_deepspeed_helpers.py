"""Real DeepSpeed training on CPU in 2 processes, run as a script so Lightning's launcher can re-execute it.

    python tests-integration/_deepspeed_helpers.py --stage 2 --precisions 32-true,bf16-mixed --out result.json

For each precision, in one launch: an uninterrupted run of ``EPOCHS`` epochs (A), a run of ``SAVE_AFTER`` epochs
that saves a DeepSpeed checkpoint (B), and a run that resumes from B's checkpoint to ``EPOCHS`` epochs (C). Rank 0
writes what it saw (engine dtypes, losses per step, the full fp32 master weights after each run) to ``--out``.
The tests import :func:`run_script` and assert on that file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EPOCHS = 3
SAVE_AFTER = 1
BATCHES_PER_RANK = 2
BATCH = 8
CPU_PRECISIONS = ("32-true", "bf16-true", "bf16-mixed")


def extensions_dir() -> str:
    """A torch-extensions folder of this DeepSpeed version's own.

    DeepSpeed compiles its CPU shared-memory op on first use into ``TORCH_EXTENSIONS_DIR``; environments with other
    DeepSpeed versions sharing the default folder rebuild it over each other (seen: a module of another version
    loaded, lacking ``vector_kernel_level``).
    """
    from importlib import metadata

    version = metadata.version("deepspeed")
    return str(Path.home() / ".cache" / "torch_extensions" / f"deepspeed-{version}")


def run_script(args: list[str], out: Path, timeout: float = 600) -> dict[str, Any]:
    """Run this file as a script with ``args`` and return the JSON it wrote to ``out``."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TORCH_EXTENSIONS_DIR", extensions_dir())
    env.pop("LOCAL_RANK", None)
    cmd = [sys.executable, str(Path(__file__)), *args, "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=str(out.parent))
    if proc.returncode != 0 or not out.exists():
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}\n"
            f"--- stderr ---\n{proc.stderr[-8000:]}"
        )
    return dict(json.loads(out.read_text()))


# --------------------------------------------------------------------------------------------------------------
# everything below runs inside the training processes


def _build(precision: str, stage: int, workdir: str, epochs: int, options: dict[str, Any]) -> tuple[Any, Any, Any]:
    import lightning.pytorch as pl
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    import precision_base
    from precision_deepspeed import DeepSpeedCPUStrategy, DeepSpeedPrecision

    class Probe(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
            self.register_buffer("offset", torch.zeros(1))
            self.seen: dict[str, str] = {}
            self.losses: list[float] = []

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            hidden = self.net(x)
            out = hidden + self.offset
            self.seen.setdefault("input", str(x.dtype).replace("torch.", ""))
            self.seen.setdefault("compute", str(hidden.dtype).replace("torch.", ""))
            loss = nn.functional.mse_loss(out.float(), y.float())
            self.losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH * BATCHES_PER_RANK * 2, 16, generator=gen)
    y = (x[:, :4].sum(dim=1, keepdim=True) * 0.5).tanh()
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=False)

    pl.seed_everything(1234, workers=True)
    model = Probe()
    plugin = DeepSpeedPrecision(precision, **options)
    # three ways in: a strategy instance, strategy="auto" (Lightning's default ZeRO stage 2), a registry name
    strategy: Any = {1: DeepSpeedCPUStrategy(stage=1), 2: "auto", 3: "deepspeed_stage_3"}[stage]
    trainer = precision_base.Trainer(
        precision_plugin=plugin,
        strategy=strategy,
        accelerator="cpu",
        devices=2,
        max_epochs=epochs,
        gradient_clip_val=1.0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=workdir,
        num_sanity_val_steps=0,
    )
    return trainer, model, loader


def _engine_facts(trainer: Any) -> dict[str, Any]:
    import torch
    from deepspeed.utils import safe_get_full_fp32_param

    engine = trainer.model
    optimizer = engine.optimizer
    flat = getattr(optimizer, "single_partition_of_fp32_groups", None) or getattr(
        optimizer, "fp32_partitioned_groups_flat", None
    )
    full = [safe_get_full_fp32_param(p) for p in engine.module.parameters()]
    name = lambda dt: str(dt).replace("torch.", "")  # noqa: E731
    buckets = getattr(optimizer, "ipg_buckets", None)
    return {
        "zero_stage": engine.zero_optimization_stage(),
        "module_params": sorted({name(p.dtype) for p in engine.module.parameters()}),
        "module_buffers": sorted({name(b.dtype) for b in engine.module.buffers()}),
        "master": sorted({name(t.dtype) for t in flat}) if flat else None,
        "communication": name(engine.communication_data_type),
        "param_comm_dtypes": sorted({name(getattr(p, "comm_dtype", p.dtype)) for p in engine.module.parameters()}),
        "reduction_buckets": sorted(name(k) for k in buckets) if isinstance(buckets, dict) else None,
        "gradient_clipping": engine.gradient_clipping(),
        "fp16_enabled": engine.fp16_enabled(),
        "bf16_enabled": engine.bfloat16_enabled(),
        "config_section": {k: trainer.strategy.config.get(k) for k in ("fp16", "bf16", "torch_autocast")},
        "weights": [t.detach().to(torch.float64).flatten().tolist() for t in full],
    }


def _fit(precision: str, stage: int, workdir: str, epochs: int, options: dict[str, Any], **fit_kwargs: Any) -> Any:
    trainer, model, loader = _build(precision, stage, workdir, epochs, options)
    trainer.fit(model, loader, **fit_kwargs)
    facts = _engine_facts(trainer)
    facts["losses"] = model.losses
    facts["seen"] = model.seen
    facts["plugin"] = {"dtypes": dict(trainer.precision_plugin.dtypes().rows())}
    facts["global_step"] = trainer.global_step
    return trainer, facts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stage", type=int, required=True)
    parser.add_argument("--precisions", default=",".join(CPU_PRECISIONS))
    parser.add_argument("--options", default="{}", help="JSON keyword options for DeepSpeedPrecision")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    options = json.loads(args.options)
    results: dict[str, Any] = {}
    root = Path(args.out).resolve().parent
    for precision in args.precisions.split(","):
        workdir = str(root / f"work-{precision}-{args.stage}")
        ckpt = str(Path(workdir) / "after-save")
        _, full = _fit(precision, args.stage, workdir, EPOCHS, options)
        saver, first = _fit(precision, args.stage, workdir, SAVE_AFTER, options)
        saver.save_checkpoint(ckpt)
        _, resumed = _fit(precision, args.stage, workdir, EPOCHS, options, ckpt_path=ckpt)
        results[precision] = {"full": full, "first": first, "resumed": resumed}
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
