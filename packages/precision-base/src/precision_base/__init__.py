"""precision-base: the shared contract, discovery by name and the Trainer front door for precision plugins.

``import precision_base`` imports neither torch nor Lightning nor DeepSpeed. :class:`Trainer` (which needs
Lightning), :class:`PrecisionPluginTrainerMixin` and :func:`prepare_trainer_kwargs` are imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from precision_base.__about__ import __version__
from precision_base.contract import CONTRACT_VERSION, DtypeTable, PluginInfo, PrecisionPlugin
from precision_base.errors import (
    BackendDisabledError,
    ContractVersionError,
    DuplicateBackendError,
    InvalidPluginInfoError,
    InvalidSpecError,
    PluginLoadError,
    PluginRequirementError,
    PrecisionPluginError,
    SpecTypeError,
    TrainerConfigurationError,
    UnknownBackendError,
    UnsupportedPrecisionError,
)
from precision_base.registry import (
    ENTRY_POINT_GROUP,
    PluginEntry,
    clear_cache,
    get_entry,
    get_plugin_class,
    list_plugins,
    register,
    registered,
    resolve,
    unregister,
)
from precision_base.spec import PRECISIONS, PluginSpec, normalize_precision, parse_spec

if TYPE_CHECKING:
    from precision_base.front_door import PrecisionPluginTrainerMixin, prepare_trainer_kwargs
    from precision_base.trainer import Trainer

__all__ = [
    "CONTRACT_VERSION",
    "ENTRY_POINT_GROUP",
    "PRECISIONS",
    "BackendDisabledError",
    "ContractVersionError",
    "DtypeTable",
    "DuplicateBackendError",
    "InvalidPluginInfoError",
    "InvalidSpecError",
    "PluginEntry",
    "PluginInfo",
    "PluginLoadError",
    "PluginRequirementError",
    "PluginSpec",
    "PrecisionPlugin",
    "PrecisionPluginError",
    "PrecisionPluginTrainerMixin",
    "SpecTypeError",
    "Trainer",
    "TrainerConfigurationError",
    "UnknownBackendError",
    "UnsupportedPrecisionError",
    "__version__",
    "clear_cache",
    "get_entry",
    "get_plugin_class",
    "list_plugins",
    "normalize_precision",
    "parse_spec",
    "prepare_trainer_kwargs",
    "register",
    "registered",
    "resolve",
    "unregister",
]


def __getattr__(name: str) -> Any:
    if name == "Trainer":
        from precision_base.trainer import Trainer

        return Trainer
    if name in ("PrecisionPluginTrainerMixin", "prepare_trainer_kwargs"):
        from precision_base import front_door

        return getattr(front_door, name)
    raise AttributeError(f"module 'precision_base' has no attribute {name!r}")
