"""Every private Lightning symbol precision-base touches, in one place.

Each is looked up in the Lightning namespace in use (``lightning.pytorch`` or ``pytorch_lightning``) when called.
``tests/test_compat.py`` checks that each exists with the expected signature.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argparse import Namespace


def parse_env_variables(namespace: str, cls: type) -> Namespace:
    """Lightning's reader of ``PL_<CLASS>_<ARGUMENT>`` environment defaults for ``cls``.

    Private in Lightning: ``<namespace>.utilities.argparse._parse_env_variables(cls)``. It reads one variable per
    parameter of ``inspect.signature(cls)``, skips unset and empty ones, and turns values into Python literals
    with ``ast.literal_eval`` where they parse (else keeps the string).
    """
    module: Any = importlib.import_module(f"{namespace}.utilities.argparse")
    return module._parse_env_variables(cls)  # type: ignore[no-any-return]
