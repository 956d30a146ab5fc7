"""Initialising FSDP2-sharded parameters on a CPU device mesh as the unsharded model would be initialised.

torch's DTensor random ops keep the ranks' draws apart only on accelerators (an RNG tracker gives each rank its own
offset); on a CPU mesh each rank draws its shard from its own generator, which the same seed left in the same state,
so the shards of a parameter initialised after sharding are copies of each other (torch only warns "DTensor random
operators may not have complete support on cpu device mesh").

* [`materialize`][precision_fsdp.sharding.sharded_init.materialize] initialises a sharded model left on the meta device
  by ``init_module(empty_init=True)``, as Lightning does (``to_empty``, then each module's ``reset_parameters``), except
  that on a CPU mesh ``reset_parameters`` runs on full-size tensors: every rank draws the values the unsharded model
  would get from the same seed, and keeps its own part of them. ``FSDP2Strategy`` runs it at both doors.
* [`duplicated_shards`][precision_fsdp.sharding.sharded_init.duplicated_shards] finds parameters initialised otherwise
  after sharding (a loop's own init after ``fabric.setup``): the plugin warns about them at the first optimizer step.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

import torch
import torch.distributed as dist

from precision_fsdp import _compat


def on_cpu_mesh(tensor: Any) -> bool:
    """Whether ``tensor`` is a DTensor sharded over a CPU device mesh of more than one rank."""
    return (
        isinstance(tensor, _compat.DTensor)
        and tensor.device_mesh.device_type == "cpu"
        and tensor.device_mesh.size() > 1
        and any(placement.is_shard() for placement in tensor.placements)
    )


def _local_part(full: torch.Tensor, like: Any) -> Optional[torch.Tensor]:
    """This rank's part of ``full`` as ``like`` (a DTensor with ``Shard`` / ``Replicate`` placements) holds it: the
    chunk of each sharded dimension at this rank's mesh coordinate (DTensor's ``Shard`` splits as ``torch.chunk``).
    ``None`` where the placements are of another kind or the part does not have the local tensor's shape."""
    mesh = like.device_mesh
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        return None
    part = full
    for mesh_dim, placement in enumerate(like.placements):
        if placement.is_replicate():
            continue
        if type(placement).__name__ != "Shard":  # _StridedShard, Partial: not split this way
            return None
        chunks = torch.chunk(part, mesh.size(mesh_dim), dim=placement.dim)
        index = coordinate[mesh_dim]
        part = chunks[index] if index < len(chunks) else part.narrow(placement.dim, 0, 0)
    local = _compat.local_tensor(like)
    return part if part.shape == local.shape else None


@contextmanager
def full_size_parameters(module: torch.nn.Module) -> Iterator[None]:
    """Inside: each of ``module``'s own parameters sharded over a CPU mesh is replaced by a plain full-size
    parameter; after: the original (sharded) parameter is back, holding this rank's part of the full one's values."""
    swapped: list[tuple[str, Any, torch.nn.Parameter]] = []
    for name, param in list(module.named_parameters(recurse=False)):
        if not on_cpu_mesh(param):
            continue
        local = _compat.local_tensor(param)
        if _local_part(torch.empty(param.shape, device="meta"), param) is None:
            continue  # placements this module cannot split: left to torch
        full = torch.nn.Parameter(
            torch.empty(param.shape, dtype=param.dtype, device=local.device), requires_grad=param.requires_grad
        )
        swapped.append((name, param, full))
        setattr(module, name, full)
    try:
        yield
    finally:
        with torch.no_grad():
            for name, param, full in swapped:
                setattr(module, name, param)
                part = _local_part(full.detach(), param)
                assert part is not None  # checked above, on the same shapes
                _compat.local_tensor(param).copy_(part)


def materialize(module: torch.nn.Module, device: torch.device) -> list[str]:
    """Initialise ``module``'s tensors left on the meta device (``init_module(empty_init=True)``) after sharding:
    ``to_empty(device)``, then ``reset_parameters()`` of every module holding parameters or buffers of its own, on
    full-size tensors where they are sharded over a CPU mesh (see the module docstring). Nothing happens when no
    tensor is on the meta device.

    Returns:
        The class names of modules holding tensors but no ``reset_parameters`` (left uninitialised, as Lightning
        leaves them; the caller warns).
    """
    if not any(t.is_meta for t in itertools.chain(module.parameters(), module.buffers())):
        return []
    module.to_empty(device=device)
    missing: list[str] = []
    for sub in module.modules():
        if not any(True for _ in itertools.chain(sub.parameters(recurse=False), sub.buffers(recurse=False))):
            continue
        reset = getattr(sub, "reset_parameters", None)
        if not callable(reset):
            missing.append(type(sub).__name__)
            continue
        with full_size_parameters(sub):
            reset()
    return sorted(set(missing))


MISSING_RESET = (
    "Parameter initialization incomplete: {names} hold parameters or buffers but define no reset_parameters(), so "
    "after init_module(empty_init=True) their memory is uninitialised. Define reset_parameters() on them, or create "
    "the model without empty_init."
)
"""The warning for modules [`materialize`][precision_fsdp.sharding.sharded_init.materialize] could not initialise."""


def duplicated_shards(parameters: Iterable[tuple[str, Any]]) -> list[str]:
    """Names of the parameters sharded over a CPU mesh (one dimension, every process) whose shard holds more than
    one value and the same values on every rank: a random initialisation run after sharding, drawn alike by every
    rank. Collective: every rank calls it with the same parameters (one integer ``all_gather`` of 4 numbers a
    parameter).
    """
    if not dist.is_available() or not dist.is_initialized():
        return []
    world = dist.get_world_size()
    candidates = [
        (name, _compat.local_tensor(p))
        for name, p in parameters
        if on_cpu_mesh(p) and p.device_mesh.ndim == 1 and p.device_mesh.size() == world
    ]
    if not candidates:
        return []
    rows = []
    with torch.no_grad():
        for _name, local in candidates:
            values = local.detach().double().flatten()
            varied = bool(values.numel() > 1 and bool((values != values[0]).any()))
            rows.append([float(values.numel()), float(values.sum()), float((values * values).sum()), float(varied)])
    # exchanged as the float64 values' bits: an integer collective, which the precision audit leaves out of the
    # dtypes it compares (it is the plugin's check, not training's gathering)
    mine = torch.tensor(rows, dtype=torch.float64).view(torch.int64)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    return [
        name
        for i, (name, _local) in enumerate(candidates)
        if rows[i][3] == 1.0 and all(torch.equal(other[i], mine[i]) for other in every)
    ]


DUPLICATED = (
    "{spec}: {count} parameter(s) sharded over the CPU device mesh hold the same values on every rank ({names}): "
    "they were initialised at random after FSDP2 sharded them, and on a CPU mesh torch's DTensor random ops draw every "
    "rank's shard alike, so each shard repeats the others. Initialise them in the modules' reset_parameters() "
    "(FSDP2Strategy runs it on full-size tensors after init_module(empty_init=True)), or before sharding."
)
"""The warning at the first optimizer step for what
[`duplicated_shards`][precision_fsdp.sharding.sharded_init.duplicated_shards] finds."""


class ShardedInitCheck:
    """[`duplicated_shards`][precision_fsdp.sharding.sharded_init.duplicated_shards] once per optimizer, at its first
    step (a run's initialisation is over by then): the plugin calls it before every optimizer step, at both doors, and
    warns with [`DUPLICATED`][precision_fsdp.sharding.sharded_init.DUPLICATED]. Parameters are named from the model the
    plugin last converted (``watch``), else by position and shape. A pickled check remembers nothing."""

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._model: Optional[weakref.ref[torch.nn.Module]] = None
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()

    def watch(self, model: torch.nn.Module) -> None:
        """Name parameters after ``model`` (the model being trained)."""
        self._model = weakref.ref(model)

    def __call__(self, optimizer: Any, spec: str, warn: Callable[[str, type[Warning]], None]) -> None:
        if optimizer in self._seen:
            return
        self._seen.add(optimizer)
        model = self._model() if self._model is not None else None
        if model is not None:
            named = list(model.named_parameters())
        else:
            groups = getattr(optimizer, "param_groups", None)
            params = [p for group in groups for p in group["params"]] if isinstance(groups, list) else []
            named = [(f"parameter {i} of shape {tuple(p.shape)}", p) for i, p in enumerate(params)]
        names = duplicated_shards(named)
        if names:
            from precision_base import PrecisionPluginWarning

            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            warn(DUPLICATED.format(spec=spec, count=len(names), names=shown), PrecisionPluginWarning)

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._clear()


__all__ = [
    "DUPLICATED",
    "MISSING_RESET",
    "ShardedInitCheck",
    "duplicated_shards",
    "full_size_parameters",
    "materialize",
    "on_cpu_mesh",
]
