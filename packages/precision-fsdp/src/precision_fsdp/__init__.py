"""precision-fsdp: Lightning's ``FSDPPrecision``,
as a separately installed plugin found by name (``"fsdp:<precision>"``).

Importing this package does not import torch; ``FSDPPrecision`` is imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from precision_fsdp.__about__ import __version__

if TYPE_CHECKING:
    from precision_fsdp.plugin import FSDPPrecision

__all__ = ["FSDPPrecision", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "FSDPPrecision":
        from precision_fsdp.plugin import FSDPPrecision

        return FSDPPrecision
    raise AttributeError(f"module 'precision_fsdp' has no attribute {name!r}")
