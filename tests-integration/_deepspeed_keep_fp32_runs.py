"""Rank code for ``test_deepspeed_keep_fp32_fits.py``: a real 2-process DeepSpeed ZeRO-2 fit on DeepSpeed's CPU
accelerator with ``torch_autocast=True, keep_fp32=...``, recording dtypes by forward hooks (the model and its hooks
are ``_keep_fp32_runs.Head``'s, shared with the FSDP2 test; ``tests-integration`` is on the ranks' PYTHONPATH)."""

from __future__ import annotations

from typing import Any

import torch
from _keep_fp32_runs import WATCHED, Head
from lightning.pytorch import seed_everything
from torch import nn

import precision_base
from precision_testsupport.launch import world_size
from precision_testsupport.models import QUIET


def fit(args: dict[str, Any]) -> dict[str, Any] | None:
    world_size()
    torch.set_num_threads(1)
    seed_everything(5)
    model = Head()
    plugin = precision_base.resolve(args["spec"], torch_autocast=True, keep_fp32=("lm_head", nn.LayerNorm))
    trainer = precision_base.Trainer(
        precision_plugin=plugin, accelerator="cpu", devices=2, strategy="deepspeed_stage_2", max_steps=4, **QUIET
    )
    trainer.fit(model)
    strategy: Any = trainer.strategy  # a DeepSpeed strategy: its DeepSpeed config is `config`
    if trainer.global_rank != 0:
        return None
    weights = {name: model.net.get_submodule(name).weight for name in WATCHED}
    return {
        "seen": {k: sorted(map(list, v)) for k, v in model.seen.items()},
        "stored": {name: str(w.dtype) for name, w in weights.items()},
        # the dtype DeepSpeed reduces each weight's gradient in (its lower-precision-safe list marks parameters)
        "comm": {name: str(getattr(w, "comm_dtype", w.dtype)) for name, w in weights.items()},
        "zero_stage": strategy.config["zero_optimization"]["stage"],
        "losses": model.losses,
        "show": dict(plugin.describe()).get("keep_fp32"),
    }
