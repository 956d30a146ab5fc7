"""precision-fsdp: Lightning's ``FSDPPrecision``, as a separately installed plugin found by name
(``"fsdp:<precision>"``), and ``FSDP2Strategy``, which shards with FSDP2 without a ``configure_model``.

Importing this package does not import torch; ``FSDPPrecision`` and ``FSDP2Strategy`` are imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from precision_base.kit.lazy import lazy_exports
from precision_fsdp.__about__ import __version__

if TYPE_CHECKING:
    from precision_fsdp.plugin import FSDPPrecision
    from precision_fsdp.sharding.strategy import FSDP2Strategy

__all__ = ["FSDP2Strategy", "FSDPPrecision", "__version__"]


__getattr__, __dir__ = lazy_exports(
    __name__,
    {"FSDPPrecision": "precision_fsdp.plugin", "FSDP2Strategy": "precision_fsdp.sharding.strategy"},
)
