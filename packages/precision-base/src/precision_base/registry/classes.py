"""Loading a backend's plugin class for a door, and checking it is one: the registry's class lookup.

[`load_plugin_class`][precision_base.registry.classes.load_plugin_class] imports the class a ``PluginInfo`` names
(through [`precision_base.registry.loading.load_class`][])
and turns any failure into [`PluginLoadError`][precision_base.errors.PluginLoadError], naming the plugin;
[`check_plugin_class`][precision_base.registry.classes.check_plugin_class] refuses a class that is no
[`PrecisionPlugin`][precision_base.PrecisionPlugin] for the door, or that
lists a Lightning class before the mixin. It sits above the contract, the namespaces and discovery, and below the
registry's facade ([`precision_base.registry`][]) and the doors (it imports neither).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from precision_base.contract import PrecisionPlugin
from precision_base.doors.table import Door
from precision_base.errors import InvalidPluginInfoError, PluginLoadError, PrecisionPluginError
from precision_base.namespaces import FABRIC_NAMESPACES, namespace_of
from precision_base.registry.discovery import exc_detail
from precision_base.registry.loading import load_class

if TYPE_CHECKING:
    from precision_base.registry.statuses import PluginEntry

_LIGHTNING_ROOTS = ("lightning", "pytorch_lightning", "lightning_fabric")


def lightning_before_mixin(cls: type) -> Optional[type]:
    """The first Lightning class that comes before [`PrecisionPlugin`][precision_base.contract.PrecisionPlugin] in
    ``cls``'s MRO, if any."""
    for klass in cls.__mro__:
        if klass is PrecisionPlugin:
            return None
        if klass.__module__.split(".")[0] in _LIGHTNING_ROOTS:
            return klass
    return None


def load_plugin_class(entry: PluginEntry, ref: str) -> Any:
    """The object ``ref`` (``"module:QualName"``) names, for ``entry``'s backend: a failure is the plugin's."""
    try:
        return load_class(ref)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: the plugin is broken, the process goes on
        raise PluginLoadError(
            f"precision plugin {entry.backend!r} from {entry.distribution} {entry.version} failed to import "
            f"{ref!r}: {exc_detail(exc)}"
        ) from exc


def check_plugin_class(entry: PluginEntry, cls: object, door: Door = "Trainer") -> None:
    """Raise unless ``cls`` is a [`PrecisionPlugin`][precision_base.contract.PrecisionPlugin] for ``door`` with the
    mixin before Lightning's bases."""
    assert entry.info is not None
    where = f"precision plugin {entry.backend!r} from {entry.distribution} {entry.version}"
    if door == "Fabric":
        built_for_fabric = isinstance(cls, type) and namespace_of(cls) in FABRIC_NAMESPACES
        if not (isinstance(cls, type) and issubclass(cls, PrecisionPlugin) and built_for_fabric):
            raise PrecisionPluginError(
                f"precision backend {entry.backend!r} ({entry.distribution} {entry.version}): fabric_class "
                f"{entry.info.fabric_class} is not a precision_base.PrecisionPlugin built on a lightning.fabric "
                "precision class"
            )
    elif not (isinstance(cls, type) and issubclass(cls, PrecisionPlugin)):
        declared = entry.info.plugin_class
        raise InvalidPluginInfoError(f"{where}: {declared} is not a subclass of precision_base.PrecisionPlugin")
    wrong = lightning_before_mixin(cls)
    if wrong is not None:
        raise InvalidPluginInfoError(
            f"{where}: {cls.__qualname__} lists {wrong.__module__}.{wrong.__qualname__} before "
            "precision_base.PrecisionPlugin in its bases, so the mixin's connect() never runs (autocast would "
            f"stay on the wrong device). Write class {cls.__qualname__}(<the PrecisionPlugin mixin>, "
            f"{wrong.__qualname__})."
        )
