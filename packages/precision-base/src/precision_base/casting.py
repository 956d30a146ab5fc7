"""Tensor helpers every precision plugin needs: cast the floating tensors of a batch, switch the default dtype.

This module imports torch, so ``import precision_base`` never imports it; plugins import it explicitly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch


def cast_floating(data: Any, dtype: torch.dtype) -> Any:
    """Return ``data`` with every floating-point tensor cast to ``dtype``, at any depth.

    Integer, boolean and complex tensors, and anything that is not a tensor, come back unchanged. Dicts (and other
    mappings), lists, tuples and named tuples are rebuilt with the same type.
    """
    if isinstance(data, torch.Tensor):
        return data.to(dtype) if torch.is_floating_point(data) else data
    if isinstance(data, Mapping):
        return type(data)({key: cast_floating(value, dtype) for key, value in data.items()})  # type: ignore[call-arg]
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a named tuple takes its fields positionally
        return type(data)(*(cast_floating(value, dtype) for value in data))
    if isinstance(data, (list, tuple)):
        return type(data)(cast_floating(value, dtype) for value in data)
    return data


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Make ``dtype`` torch's default floating dtype inside the block and restore the previous one after it."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
