"""precision-deepspeed: a real DeepSpeed engine (ZeRO stage 2) on its CPU accelerator, 2 CPU processes, gloo.

``train`` runs in each of the 2 processes (started by ``examples/demo.py``). With ``strategy="auto"`` the plugin
picks precision-deepspeed's ``DeepSpeedCPUStrategy`` on CPU; the plugin renders the precision section of the
DeepSpeed config (printed once per precision, below its table), and ``gradient_clip_val`` reaches DeepSpeed's
``gradient_clipping``.
"""

from __future__ import annotations

import json
from typing import Any

BEFORE = [
    "DeepSpeed compiles its CPU communication op (deepspeed_shm_comm) the first time it trains on a machine: that run",
    "waits a minute or two; later runs load the build from TORCH_EXTENSIONS_DIR (default ~/.cache/torch_extensions).",
]


def trainer_kwargs() -> dict[str, Any]:
    """Everything the demo passes to ``precision_base.Trainer`` besides the plugin name and the run's length."""
    return {"accelerator": "cpu", "devices": 2, "gradient_clip_val": 1.0}


def plugin_lines(plugin: Any) -> list[str]:
    return [f"DeepSpeed config section: {json.dumps(plugin.precision_section(), sort_keys=True)}"]


def train(args: dict[str, Any]) -> dict[str, Any] | None:
    import torch
    from lightning.pytorch import seed_everything

    from precision_base import Trainer
    from precision_testsupport.models import QUIET, TinyRegressor, dtype_name

    seed_everything(0, verbose=False)
    torch.set_num_threads(1)
    model = TinyRegressor(features=16, hidden=32, optimizer="adamw", lr=1e-2)
    trainer = Trainer(precision_plugin=f"deepspeed:{args['precision']}", max_epochs=3, **trainer_kwargs(), **QUIET)
    trainer.fit(model)
    if trainer.global_rank != 0:
        return None
    engine: Any = trainer.model  # the DeepSpeed engine
    return {
        "strategy": type(trainer.strategy).__name__,
        "zero_stage": engine.zero_optimization_stage(),
        "gradient_clipping": engine.gradient_clipping(),
        "steps": len(model.losses),
        "loss": f"{model.losses[0]:.4f} -> {model.losses[-1]:.4f}",
        "engine parameters": sorted({dtype_name(p.dtype) for p in engine.module.parameters()}),
        "reduction": dtype_name(engine.communication_data_type),
    }
