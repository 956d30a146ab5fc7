"""Real DeepSpeed training on CPU in 2 processes (ranks started by :func:`precision_testsupport.launch.run_ranks`).

    run_script(["--stage", "2", "--precisions", "32-true,bf16-mixed"], out=tmp / "result.json")

For each precision, in one launch: an uninterrupted run of ``EPOCHS`` epochs (A), a run of ``SAVE_AFTER`` epochs
that saves a DeepSpeed checkpoint (B), and a run that resumes from B's checkpoint to ``EPOCHS`` epochs (C). Rank 0
returns what it saw (engine dtypes, losses per step, the full fp32 master weights after each run), also written to
``out``. The tests import :func:`run_script` and assert on it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from precision_testsupport.launch import run_ranks

HERE = Path(__file__).resolve().parent
EPOCHS = 3
SAVE_AFTER = 1
BATCHES_PER_RANK = 2
BATCH = 8
CPU_PRECISIONS = ("32-true", "bf16-true", "bf16-mixed")
STALE_LOCK_S = 15 * 60  # a first build of the op takes 1-3 min here, even on loaded cores


def extensions_dir() -> str:
    """A torch-extensions folder of this DeepSpeed, torch and Python version's own, for ``TORCH_EXTENSIONS_DIR``.

    DeepSpeed compiles its CPU shared-memory op on first use into that folder; environments with other versions
    sharing one folder rebuild it over each other (seen: a module of another version loaded, lacking
    ``vector_kernel_level``). A build killed half-way leaves its ``lock`` file behind, and every later build in the
    folder waits for it to go; a lock older than ``STALE_LOCK_S`` is removed here, saying so.
    """
    import sys
    import time
    from importlib import metadata

    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    name = f"deepspeed-{metadata.version('deepspeed')}-torch-{metadata.version('torch')}-{python}"
    folder = Path.home() / ".cache" / "torch_extensions" / name
    for lock in folder.glob("*/lock"):
        age = time.time() - lock.stat().st_mtime
        if age > STALE_LOCK_S:
            print(f"removing a DeepSpeed build lock left {age / 60:.0f} min ago: {lock}", file=sys.stderr)
            lock.unlink(missing_ok=True)
    return str(folder)


def run_script(args: list[str], out: Path, timeout: float = 600) -> dict[str, Any]:
    """Run :func:`train` with command-line style ``args`` in 2 ranks; return rank 0's result (also in ``out``)."""
    env = {"OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": extensions_dir(), "PYTHONWARNINGS": "ignore"}
    result = dict(run_ranks(f"{Path(__file__)}:train", {"argv": [*args, "--out", str(out)]}, world=2, threads=1,
                            timeout=timeout, cwd=out.parent, env=env))  # fmt: skip
    out.write_text(json.dumps(result))
    return result


# --------------------------------------------------------------------------------------------------------------
# everything below runs inside the training processes


def _build(precision: str, stage: int, workdir: str, epochs: int, options: dict[str, Any]) -> tuple[Any, Any, Any]:
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    import precision_base
    from precision_deepspeed import DeepSpeedCPUStrategy, DeepSpeedPrecision
    from precision_testsupport.launch import world_size
    from precision_testsupport.models import TinyRegressor, regression_data

    loader = DataLoader(regression_data(16, BATCH * BATCHES_PER_RANK * 2), batch_size=BATCH, shuffle=False)
    world_size()  # Lightning's teardown of the previous fit deleted WORLD_SIZE
    pl.seed_everything(1234, workers=True)
    model = TinyRegressor(features=16, hidden=32, optimizer="adamw", lr=1e-2)
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
    name = lambda dt: str(dt).replace("torch.", "")  # noqa: E731
    facts["seen"] = {"input": name(model.input_dtypes[0]), "compute": name(model.compute_dtypes[0])}
    facts["plugin"] = {"dtypes": dict(trainer.precision_plugin.dtypes().rows())}
    facts["global_step"] = trainer.global_step
    return trainer, facts


def train(args: dict[str, Any]) -> dict[str, Any] | None:
    """Run inside each rank: ``args["argv"]`` are the options below; rank 0 returns the results."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--stage", type=int, required=True)
    parser.add_argument("--precisions", default=",".join(CPU_PRECISIONS))
    parser.add_argument("--options", default="{}", help="JSON keyword options for DeepSpeedPrecision")
    parser.add_argument("--out", required=True)
    opts = parser.parse_args(args["argv"])
    options = json.loads(opts.options)
    results: dict[str, Any] = {}
    root = Path(opts.out).resolve().parent
    for precision in opts.precisions.split(","):
        workdir = str(root / f"work-{precision}-{opts.stage}")
        ckpt = str(Path(workdir) / "after-save")
        _, full = _fit(precision, opts.stage, workdir, EPOCHS, options)
        saver, first = _fit(precision, opts.stage, workdir, SAVE_AFTER, options)
        saver.save_checkpoint(ckpt)
        _, resumed = _fit(precision, opts.stage, workdir, EPOCHS, options, ckpt_path=ckpt)
        results[precision] = {"full": full, "first": first, "resumed": resumed}
    import torch.distributed as dist

    return results if not dist.is_initialized() or dist.get_rank() == 0 else None
