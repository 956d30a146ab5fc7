"""A Fabric loop's ``state`` on ``fabric.load``: stateful entries are restored in place, from either checkpoint layout.

``fabric.save(path, state)`` writes each stateful entry (anything with ``state_dict`` and ``load_state_dict`` that is
not the model or an optimizer: a stateful dataloader, a sampler, a counter object) as its ``state_dict()``. On load,
Lightning's one-file path calls the object's ``load_state_dict`` with it; its sharded (folder) path, the default of
``ModelParallelStrategy``, puts the saved dict into ``state`` instead, so the object the loop holds is never restored.
[`restorable_entries`][precision_fsdp.loop_state.restorable_entries] before the load and
[`restore_entries`][precision_fsdp.loop_state.restore_entries] after it give both layouts the one-file behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def _stateful(value: Any) -> bool:
    if isinstance(value, (torch.nn.Module, torch.optim.Optimizer)):
        return False  # restored by Lightning's load in place, in both layouts
    return callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))


def restorable_entries(state: Any) -> dict[str, Any]:
    """The stateful entries of ``state`` (a dict of the loop's objects; anything else: none), by key."""
    if not isinstance(state, dict):
        return {}
    return {key: value for key, value in state.items() if _stateful(value)}


def restore_entries(state: Any, stateful: Mapping[str, Any]) -> None:
    """After the load: each entry of ``stateful`` that the load replaced by its saved dict gets that dict through
    ``load_state_dict`` and is put back, so ``state[key]`` is again the object the loop holds."""
    if not isinstance(state, dict):
        return
    for key, obj in stateful.items():
        saved = state.get(key)
        if saved is not obj and isinstance(saved, Mapping):
            obj.load_state_dict(saved)
            state[key] = obj
