"""precision-fsdp: Lightning's ``FSDPPrecision``, as a separately installed plugin found by name
(``"fsdp:<precision>"``), and ``FSDP2Strategy``, which shards with FSDP2 without a ``configure_model``.

Importing this package does not import torch; ``FSDPPrecision`` and ``FSDP2Strategy`` are imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from precision_fsdp.__about__ import __version__

if TYPE_CHECKING:
    from precision_fsdp.fsdp2_strategy import FSDP2Strategy
    from precision_fsdp.plugin import FSDPPrecision

__all__ = ["FSDP2Strategy", "FSDPPrecision", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "FSDPPrecision":
        from precision_fsdp.plugin import FSDPPrecision

        return FSDPPrecision
    if name == "FSDP2Strategy":
        from precision_fsdp.fsdp2_strategy import FSDP2Strategy

        return FSDP2Strategy
    raise AttributeError(f"module 'precision_fsdp' has no attribute {name!r}")
