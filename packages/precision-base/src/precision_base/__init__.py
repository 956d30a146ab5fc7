"""precision-base: the shared contract, discovery by name and the Trainer and Fabric front doors for precision plugins.

``import precision_base`` imports neither torch nor Lightning nor DeepSpeed. [`Trainer`][precision_base.Trainer] (which
needs
Lightning), [`PrecisionPluginTrainerMixin`][precision_base.PrecisionPluginTrainerMixin] and
[`prepare_trainer_kwargs`][precision_base.prepare_trainer_kwargs] are imported on first access;
so are [`Fabric`][precision_base.Fabric], [`PrecisionPluginFabricMixin`][precision_base.PrecisionPluginFabricMixin],
[`prepare_fabric_kwargs`][precision_base.prepare_fabric_kwargs] and
[`resolve_fabric`][precision_base.resolve_fabric] (see [`precision_base.doors.fabric`][]),
[`PrecisionMonitor`][precision_base.PrecisionMonitor] (a callback logging the
plugin's loss scale and skipped steps), and [`PrecisionAudit`][precision_base.PrecisionAudit] /
[`audit_fabric_steps`][precision_base.audit_fabric_steps] (the runtime
precision audit, [`precision_base.audit`][]), and [`PrecisionSchedule`][precision_base.PrecisionSchedule] /
[`PrecisionScheduleError`][precision_base.PrecisionScheduleError]
(precision that changes during a run, [`precision_base.callbacks.schedule`][]).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from precision_base.__about__ import __version__
from precision_base.contract import CONTRACT_VERSION, DtypeTable, PluginInfo, PrecisionPlugin
from precision_base.errors import (
    BackendDisabledError,
    ContractVersionError,
    DuplicateBackendError,
    InvalidPluginInfoError,
    InvalidSpecError,
    OverflowStormError,
    PluginLoadError,
    PluginRequirementError,
    PrecisionAuditError,
    PrecisionPluginError,
    PrecisionPluginWarning,
    PrecisionScheduleError,
    RegistrationError,
    SpecTypeError,
    TrainerConfigurationError,
    TuneTargetError,
    UnknownBackendError,
    UnsupportedPrecisionError,
)
from precision_base.kit.lazy import lazy_exports
from precision_base.registry import (
    clear_cache,
    get_entry,
    get_plugin_class,
    list_plugins,
    register,
    registered,
    resolve,
    unregister,
)
from precision_base.registry.discovery import ENTRY_POINT_GROUP
from precision_base.registry.statuses import PluginEntry
from precision_base.spec import PRECISIONS, PluginSpec, normalize_precision, parse_spec

if TYPE_CHECKING:
    from precision_base.audit import PrecisionAudit, audit_fabric_steps
    from precision_base.callbacks.monitor import PrecisionMonitor
    from precision_base.callbacks.schedule import PrecisionSchedule
    from precision_base.doors.fabric import PrecisionPluginFabricMixin, prepare_fabric_kwargs, resolve_fabric
    from precision_base.doors.fabric_class import Fabric
    from precision_base.doors.trainer import PrecisionPluginTrainerMixin, prepare_trainer_kwargs
    from precision_base.doors.trainer_class import Trainer
    from precision_base.tune import tune_precision

__all__ = [
    "CONTRACT_VERSION",
    "ENTRY_POINT_GROUP",
    "PRECISIONS",
    "BackendDisabledError",
    "ContractVersionError",
    "DtypeTable",
    "DuplicateBackendError",
    "Fabric",
    "InvalidPluginInfoError",
    "InvalidSpecError",
    "OverflowStormError",
    "PluginEntry",
    "PluginInfo",
    "PluginLoadError",
    "PluginRequirementError",
    "PluginSpec",
    "PrecisionAudit",
    "PrecisionAuditError",
    "PrecisionMonitor",
    "PrecisionPlugin",
    "PrecisionPluginError",
    "PrecisionPluginWarning",
    "PrecisionSchedule",
    "PrecisionScheduleError",
    "RegistrationError",
    "PrecisionPluginFabricMixin",
    "PrecisionPluginTrainerMixin",
    "SpecTypeError",
    "Trainer",
    "TrainerConfigurationError",
    "TuneTargetError",
    "UnknownBackendError",
    "UnsupportedPrecisionError",
    "__version__",
    "audit_fabric_steps",
    "clear_cache",
    "get_entry",
    "get_plugin_class",
    "list_plugins",
    "normalize_precision",
    "parse_spec",
    "prepare_fabric_kwargs",
    "prepare_trainer_kwargs",
    "register",
    "registered",
    "resolve",
    "resolve_fabric",
    "tune_precision",
    "unregister",
]


__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Trainer": "precision_base.doors.trainer_class",
        "PrecisionPluginTrainerMixin": "precision_base.doors.trainer",
        "prepare_trainer_kwargs": "precision_base.doors.trainer",
        "Fabric": "precision_base.doors.fabric_class",
        "PrecisionPluginFabricMixin": "precision_base.doors.fabric",
        "prepare_fabric_kwargs": "precision_base.doors.fabric",
        "resolve_fabric": "precision_base.doors.fabric",
        "PrecisionMonitor": "precision_base.callbacks.monitor",
        "PrecisionAudit": "precision_base.audit",
        "audit_fabric_steps": "precision_base.audit",
        "PrecisionSchedule": "precision_base.callbacks.schedule",
        "tune_precision": "precision_base.tune",
    },
)
