"""Running a plugin's info module, and only that module, when plugins are listed.

An entry point such as ``precision_fsdp._info:INFO`` names a module inside the plugin's package. Python's
``import`` would run the package's ``__init__`` first, with whatever side effects it has. Listing plugins runs the
info module alone instead: its file is located through the import system's finders without importing the
package, and executed as a module of its own. Exceptions:

* the info module (or its package) is already imported: the imported module is used;
* the entry point names a top-level module, or a finder cannot locate the file without importing the package
  (for example a module inside a zip file): Python's normal ``import`` runs, package ``__init__`` included;
* the info module itself imports from its package (``from . import x``): Python runs the package ``__init__``
  then, as it would for any import.

The module run this way is not added to ``sys.modules``: if plugin code later imports the same info module, Python
runs it again under its own name (an info module is plain data, so both copies are equal).

:func:`load_class` imports a ``"module:QualName"`` reference the normal way (:func:`pkgutil.resolve_name`); the
registry's :func:`load_plugin_class` and :func:`check_plugin_class` load and check a backend's class for a door.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, Optional

from precision_base.contract import PrecisionPlugin
from precision_base.errors import InvalidPluginInfoError, PluginLoadError, PrecisionPluginError

if TYPE_CHECKING:
    from precision_base.statuses import PluginEntry

Door = Literal["Trainer", "Fabric"]


def _locate(name: str) -> Optional[importlib.machinery.ModuleSpec]:
    """The spec of module ``name``, found without importing any of its parent packages, or ``None``."""
    parts = name.split(".")
    spec = importlib.util.find_spec(parts[0])  # a top-level name: finders only, nothing is imported
    for i in range(1, len(parts)):
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), list(spec.submodule_search_locations))
    return spec


def info_module(name: str) -> ModuleType:
    """Module ``name``, run without its package's ``__init__`` where possible (see the module docstring)."""
    if name in sys.modules:
        return sys.modules[name]
    parent = name.rpartition(".")[0]
    if not parent or parent in sys.modules:
        return importlib.import_module(name)
    spec = _locate(name)
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return importlib.import_module(name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_object(module_name: str, attribute: str) -> Any:
    """The object ``module_name:attribute`` (dotted attribute path), its module run by :func:`info_module`."""
    obj: Any = info_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def load_class(ref: str) -> Any:
    """The object a ``"module:QualName"`` reference names (a ``PluginInfo.plugin_class`` or ``fabric_class``),
    its module imported the normal way: :func:`pkgutil.resolve_name`, the one lookup every caller uses."""
    import pkgutil

    return pkgutil.resolve_name(ref)


_LIGHTNING_ROOTS = ("lightning", "pytorch_lightning", "lightning_fabric")


def lightning_before_mixin(cls: type) -> Optional[type]:
    """The first Lightning class that comes before :class:`PrecisionPlugin` in ``cls``'s MRO, if any."""
    for klass in cls.__mro__:
        if klass is PrecisionPlugin:
            return None
        if klass.__module__.split(".")[0] in _LIGHTNING_ROOTS:
            return klass
    return None


_lightning_before_mixin = lightning_before_mixin  # its name in precision_base.registry before


def load_plugin_class(entry: PluginEntry, ref: str) -> Any:
    """The object ``ref`` (``"module:QualName"``) names, for ``entry``'s backend: a failure is the plugin's."""
    from precision_base.discovery import exc_detail

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
    """Raise unless ``cls`` is a :class:`PrecisionPlugin` for ``door`` with the mixin before Lightning's bases."""
    assert entry.info is not None
    where = f"precision plugin {entry.backend!r} from {entry.distribution} {entry.version}"
    if door == "Fabric":
        from precision_base.doors import door_of

        if not (isinstance(cls, type) and issubclass(cls, PrecisionPlugin) and door_of(cls) == "Fabric"):
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
