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

[`load_class`][precision_base.registry.loading.load_class] imports a ``"module:QualName"`` reference the normal way
(`pkgutil.resolve_name`).
This module sits below every other module of precision-base that names a plugin (it imports none of them, only the
standard library): the registry's parts, [`precision_base.namespaces`][], the import check and the conformance kits
use it; [`precision_base.registry.classes`][] loads and checks a backend's class for a door on top of it. Importing
it runs ``precision_base``'s ``__init__`` (and so the registry's facade) first, as importing any module of
precision-base always has.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any, Optional


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
    """The object ``module_name:attribute`` (dotted attribute path), its module run by
    [`info_module`][precision_base.registry.loading.info_module]."""
    obj: Any = info_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def load_class(ref: str) -> Any:
    """The object a ``"module:QualName"`` reference names (a ``PluginInfo.plugin_class`` or ``fabric_class``),
    its module imported the normal way: `pkgutil.resolve_name`, the one lookup every caller uses."""
    import pkgutil

    return pkgutil.resolve_name(ref)
