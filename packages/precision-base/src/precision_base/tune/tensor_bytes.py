"""The bytes of training state one process holds: its parameters, their gradients and its optimizer's state.

A trial ([`precision_base.tune.trial`][]) counts them in the last step, just before its optimizer step (the gradients
and the state of the earlier steps are all there), next to the memory figure the machine gives (on a CPU the RSS, which
also holds the interpreter, the libraries and the activations' high-water mark). Only this process's part is counted: a
sharded parameter (FSDP2's ``DTensor``, FSDP1's flat parameter, DeepSpeed ZeRO-3's partition) by its local shard. Every
storage is counted once, so views of one flat buffer (FSDP1, DeepSpeed's low-precision groups) and a parameter that is
also the optimizer's are not counted twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def _local(tensor: Any) -> Any:
    """This process's part of ``tensor``: a ``DTensor``'s local shard, a ZeRO-3 parameter's partition."""
    partition = getattr(tensor, "ds_tensor", None)  # DeepSpeed ZeRO-3 keeps the local part beside an empty parameter
    if partition is not None:
        return partition
    to_local = getattr(tensor, "to_local", None)  # torch.distributed.tensor.DTensor
    return to_local() if callable(to_local) else tensor


def _within(value: Any, depth: int = 3) -> Iterator[Any]:
    """The tensors in ``value``: itself, or those in its lists, tuples and dicts (keys too), ``depth`` levels down."""
    if isinstance(value, (list, tuple)) and depth:
        for item in value:
            yield from _within(item, depth - 1)
    elif isinstance(value, dict) and depth:
        for key, item in value.items():
            yield from _within(key, depth - 1)
            yield from _within(item, depth - 1)
    else:
        yield value
        yield getattr(value, "grad", None)


def _optimizer_tensors(optimizer: Any, seen: set[int]) -> Iterator[Any]:
    """The tensors ``optimizer`` and every optimizer it wraps (Lightning's ``LightningOptimizer``, DeepSpeed's ZeRO
    optimizers) hold in their attributes: parameter groups, state, and a ZeRO optimizer's flat buffers, master
    partitions and gradient partitions."""
    while optimizer is not None and id(optimizer) not in seen:
        seen.add(id(optimizer))
        yield from _within(getattr(optimizer, "param_groups", None))
        yield from _within(getattr(optimizer, "state", None))
        yield from _within(list(getattr(optimizer, "__dict__", {}).values()))
        optimizer = getattr(optimizer, "_optimizer", None) or getattr(optimizer, "optimizer", None)


def tensor_bytes(model: Any, optimizers: Iterable[Any]) -> int:
    """Bytes of ``model``'s parameters and gradients and ``optimizers``' parameters, gradients and state held by this
    process, each storage once."""
    import torch

    storages: dict[int, int] = {}
    seen: set[int] = set()
    params = [t for p in model.parameters() for t in (p, p.grad)] if model is not None else []
    found = [*params, *(t for opt in [*optimizers, getattr(model, "optimizer", None)]
                        for t in _optimizer_tensors(opt, seen))]  # fmt: skip
    for tensor in found:
        if not isinstance(tensor, torch.Tensor):
            continue
        local = _local(tensor)
        if not isinstance(local, torch.Tensor) or local.device.type == "meta":
            continue
        try:
            storage = local.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError):  # a tensor subclass without a storage of its own
            key, size = id(local), local.nelement() * local.element_size()
        if size:
            storages[key] = size
    return sum(storages.values())


__all__ = ["tensor_bytes"]
