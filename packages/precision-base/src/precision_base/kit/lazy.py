"""Names a package exports without importing them: PEP 562's module ``__getattr__`` and ``__dir__``, written once.

A package whose public names need torch or Lightning (``precision_base.Trainer``, ``precision_fsdp.FSDPPrecision``)
lists them with the module that defines each; the first access imports that module::

    __getattr__, __dir__ = lazy_exports(__name__, {"Trainer": "precision_base.doors.trainer_class"})

Imports nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``).

    Args:
        package: the module the two functions are installed in, for the ``AttributeError`` message.
        exports: each lazily exported name and the module that defines it under that name.

    Returns:
        ``__getattr__``, importing the defining module on first access of a name in ``exports`` and raising
        ``AttributeError`` for any other name; and ``__dir__``, the module's own names plus ``exports``.
    """
    owners = dict(exports)

    def __getattr__(name: str) -> Any:
        owner = owners.get(name)
        if owner is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(owner), name)

    def __dir__() -> list[str]:
        import sys

        return sorted(set(vars(sys.modules[package])) | set(owners))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
