"""Rank code for ``test_keep_fp32.py``: real 2-process FSDP2 fits with ``keep_fp32``, recording dtypes by hooks."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from lightning.pytorch import seed_everything
from torch import nn

import precision_base
from precision_testsupport.launch import world_size
from precision_testsupport.models import QUIET, TinyRegressor

WATCHED = ("embed", "norm", "hidden", "lm_head")


class Head(TinyRegressor):
    """A Linear -> LayerNorm -> Linear -> Linear ("lm_head") regression; hooks record, per watched module and
    forward, the dtype of its weight while it computes, of its output, and whether autocast was on inside."""

    def __init__(self) -> None:
        super().__init__(features=8, hidden=0, samples=128, batch_size=16)
        self.net = nn.Sequential(
            OrderedDict(
                embed=nn.Linear(8, 16), norm=nn.LayerNorm(16), hidden=nn.Linear(16, 16), lm_head=nn.Linear(16, 1)
            )
        )
        self.seen: dict[str, set[tuple[str, str, bool]]] = {name: set() for name in WATCHED}
        self._autocast: dict[str, bool] = {}

    def on_fit_start(self) -> None:
        for name in WATCHED:
            module = self.net.get_submodule(name)

            def pre(mod: nn.Module, args: Any, name: str = name) -> None:
                self._autocast[name] = torch.is_autocast_enabled("cpu")

            def post(mod: nn.Module, args: Any, output: torch.Tensor, name: str = name) -> None:
                weight = mod.weight
                self.seen[name].add((str(weight.dtype), str(output.dtype), self._autocast[name]))

            module.register_forward_pre_hook(pre)  # after the plugin's (autocast already off in kept modules)
            module.register_forward_hook(post, prepend=True)  # before the plugin's output cast and FSDP's reshard


def fit(args: dict[str, Any]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    torch.set_num_threads(1)
    for spec in args["specs"]:
        world_size()
        seed_everything(5)
        model = Head()
        plugin = precision_base.resolve(spec, keep_fp32=("lm_head", nn.LayerNorm))
        trainer = precision_base.Trainer(
            precision_plugin=plugin,
            accelerator="cpu",
            devices=2,
            max_steps=4,
            **QUIET,
        )
        trainer.fit(model)
        sharded = {
            name: str(model.net.get_submodule(name).weight.dtype) for name in WATCHED
        }  # the sharded (stored) parameters
        out[spec] = {
            "seen": {k: sorted(map(list, v)) for k, v in model.seen.items()},
            "sharded": sharded,
            "losses": model.losses,
            "show": dict(plugin.describe()).get("keep_fp32 (FSDP2 only)"),
        }
    return out if trainer.global_rank == 0 else None
