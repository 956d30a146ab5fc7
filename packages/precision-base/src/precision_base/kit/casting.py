"""Tensor helpers every precision plugin needs: cast the floating tensors of a batch, switch the default dtype.

This module imports torch, so ``import precision_base`` never imports it; plugins import it explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import torch


def cast_floating(data: Any, dtype: torch.dtype) -> Any:
    """Return ``data`` with every floating-point tensor cast to ``dtype``, at any depth.

    Integer, boolean and complex tensors, and anything that is not a tensor, come back unchanged. Dicts (and other
    mappings), lists, tuples and named tuples are rebuilt with the same type.
    """
    if isinstance(data, torch.Tensor):
        # the dtype test first: a same-dtype ``Tensor.to`` returns the tensor itself but costs ~2 us per call
        return data if data.dtype is dtype or not data.is_floating_point() else data.to(dtype)
    if isinstance(data, Mapping):
        return type(data)({key: cast_floating(value, dtype) for key, value in data.items()})  # type: ignore[call-arg]
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a named tuple takes its fields positionally
        return type(data)(*(cast_floating(value, dtype) for value in data))
    if isinstance(data, (list, tuple)):
        return type(data)(cast_floating(value, dtype) for value in data)
    return data


class _DefaultDtype:
    """The context manager [`default_dtype`][precision_base.kit.casting.default_dtype] returns (a class: it runs every
    step, in ``forward_context``)."""

    __slots__ = ("_dtype", "_previous")

    def __init__(self, dtype: torch.dtype) -> None:
        self._dtype = dtype
        self._previous = dtype

    def __enter__(self) -> None:
        self._previous = torch.get_default_dtype()
        if self._previous is not self._dtype:  # setting the default dtype costs ~1 us; skip it when it is in effect
            torch.set_default_dtype(self._dtype)

    def __exit__(self, *exc_info: object) -> None:
        if torch.get_default_dtype() is not self._previous:
            torch.set_default_dtype(self._previous)


def default_dtype(dtype: torch.dtype) -> AbstractContextManager[None]:
    """Make ``dtype`` torch's default floating dtype inside the block and restore the previous one after it (also
    when the block raises, or set another default dtype itself)."""
    return _DefaultDtype(dtype)
