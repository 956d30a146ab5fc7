"""precision-deepspeed: Lightning's ``DeepSpeedPrecision``,
as a separately installed plugin found by name (``"deepspeed:<precision>"``), that also trains on CPU.

Importing this package does not import torch; ``DeepSpeedPrecision`` and ``DeepSpeedCPUStrategy`` are imported on
first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from precision_base.kit.lazy import lazy_exports
from precision_deepspeed.__about__ import __version__

if TYPE_CHECKING:
    from precision_deepspeed.plugin import DeepSpeedPrecision
    from precision_deepspeed.strategy import DeepSpeedCPUStrategy

__all__ = ["DeepSpeedCPUStrategy", "DeepSpeedPrecision", "__version__"]


__getattr__, __dir__ = lazy_exports(
    __name__,
    {"DeepSpeedPrecision": "precision_deepspeed.plugin", "DeepSpeedCPUStrategy": "precision_deepspeed.strategy"},
)
