"""precision-deepspeed: Lightning's ``DeepSpeedPrecision``,
as a separately installed plugin found by name (``"deepspeed:<precision>"``).

Importing this package does not import torch; ``DeepSpeedPrecision`` is imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from precision_deepspeed.__about__ import __version__

if TYPE_CHECKING:
    from precision_deepspeed.plugin import DeepSpeedPrecision

__all__ = ["DeepSpeedPrecision", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "DeepSpeedPrecision":
        from precision_deepspeed.plugin import DeepSpeedPrecision

        return DeepSpeedPrecision
    raise AttributeError(f"module 'precision_deepspeed' has no attribute {name!r}")
