"""The two names Lightning is installed under, and plugin classes built for either of them.

Lightning ships the same code twice: as ``lightning.pytorch`` (with ``lightning.fabric``) and as
``pytorch_lightning`` (with ``lightning_fabric``). A Trainer of one namespace accepts only plugin instances whose
classes derive from that namespace's ``Precision``. A plugin package therefore writes its class once, for
``lightning.pytorch``, following one rule: all code lives in an implementation mixin without Lightning bases, and
the concrete class only lists bases (the mixin, then Lightning's precision class) and class attributes.
[`for_namespace`][precision_base.namespaces.for_namespace] builds the same class for the other namespace by swapping
each Lightning base for the
same-named class of that namespace.

A rebuilt class keeps ``__name__`` and ``__qualname__`` (Lightning files a precision plugin's checkpoint state under
the qualified name, so checkpoints stay portable between namespaces) and pickles by reference: its ``__module__``
is a module under this one, ``precision_base.namespaces.<namespace>.<original module>``, which is created on import
and rebuilds the class by name, so unpickling in a fresh process finds the same class.

This module imports no Lightning module at import time.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
import types
from typing import Any, Final, Optional

from precision_base.doors.table import DOORS, Door, door_of_namespace

NAMESPACES: Final[tuple[str, ...]] = DOORS["Trainer"].namespaces
"""The Trainer namespaces a plugin class can be built for (from [`DOORS`][precision_base.doors.table.DOORS])."""

FABRIC_NAMESPACES: Final[tuple[str, ...]] = DOORS["Fabric"].namespaces
"""Fabric's two namespaces, recognised by [`namespace_of`][precision_base.namespaces.namespace_of]."""

ALL_NAMESPACES: Final[tuple[str, ...]] = NAMESPACES + FABRIC_NAMESPACES
"""Every Lightning namespace of every door."""

_UNIFIED_TO_STANDALONE: Final = {"lightning.pytorch": "pytorch_lightning", "lightning.fabric": "lightning_fabric"}
_STANDALONE_TO_UNIFIED: Final = {v: k for k, v in _UNIFIED_TO_STANDALONE.items()}
_TOKENS: Final = {
    "lightning.pytorch": "lightning_pytorch",
    "pytorch_lightning": "pytorch_lightning",
    "lightning.fabric": "lightning_fabric_unified",
    "lightning_fabric": "lightning_fabric",
}
_FROM_TOKEN: Final = {v: k for k, v in _TOKENS.items()}

# __path__ makes this module the parent of the importable modules that hold rebuilt classes (see _RebuiltFinder)
__path__: list[str] = []

_lock = threading.RLock()
_cache: dict[tuple[type, str], type] = {}


def namespace_of_module(module: str, candidates: tuple[str, ...]) -> Optional[str]:
    """The namespace of ``candidates`` that the module named ``module`` is (or is inside); ``None`` for none."""
    for namespace in candidates:
        if module == namespace or module.startswith(namespace + "."):
            return namespace
    return None


def namespace_of(obj: Any) -> Optional[str]:
    """The Lightning namespace a Trainer, strategy, accelerator or plugin (instance or class) belongs to.

    Returns:
        ``"lightning.pytorch"`` or ``"pytorch_lightning"`` when a class in the MRO comes from that namespace;
        otherwise ``"lightning.fabric"`` or ``"lightning_fabric"`` when one comes from Fabric; otherwise ``None``.
    """
    cls = obj if isinstance(obj, type) else type(obj)
    modules = [klass.__module__ for klass in cls.__mro__]
    for candidates in (NAMESPACES, FABRIC_NAMESPACES):
        for module in modules:
            found = namespace_of_module(module, candidates)
            if found is not None:
                return found
    return None


def door_of(plugin: Any) -> Optional[Door]:
    """``"Trainer"`` or ``"Fabric"``: the door ``plugin``'s class (or a class) was built for; ``None`` for neither."""
    return door_of_namespace(namespace_of(plugin))


def _translated_module(module: str, namespace: str) -> Optional[str]:
    """``module`` renamed into ``namespace``'s package family, or ``None`` if it is no Lightning module."""
    standalone = namespace in ("pytorch_lightning", "lightning_fabric")
    mapping = _UNIFIED_TO_STANDALONE if standalone else _STANDALONE_TO_UNIFIED
    for source, target in mapping.items():
        if module == source or module.startswith(source + "."):
            return target + module[len(source) :]
    return None


def _counterpart(base: type, namespace: str) -> type:
    """The class ``namespace`` has in place of ``base``."""
    target_module = _translated_module(base.__module__, namespace)
    if target_module is None:
        # not a Lightning class itself: rebuild it too if Lightning classes sit under it, else keep it
        has_lightning = any(_translated_module(k.__module__, namespace) is not None for k in base.__mro__)
        return for_namespace(base, namespace) if has_lightning else base
    import pkgutil

    try:
        obj: Any = pkgutil.resolve_name(f"{target_module}:{base.__qualname__}")
    except AttributeError:
        raise TypeError(
            f"cannot build {base.__module__}.{base.__qualname__} for {namespace}: {target_module} has no "
            f"{base.__qualname__}"
        ) from None
    return obj  # type: ignore[no-any-return]


def _rebind_class_cell(func: types.FunctionType, old: type, new: type) -> types.FunctionType:
    """A copy of ``func`` whose ``__class__`` cell (what zero-argument ``super()`` reads) holds ``new``."""
    if "__class__" not in func.__code__.co_freevars or func.__closure__ is None:
        return func
    cells = tuple(
        types.CellType(new) if name == "__class__" and cell.cell_contents is old else cell
        for name, cell in zip(func.__code__.co_freevars, func.__closure__, strict=True)
    )
    copy = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__, cells)
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__dict__.update(func.__dict__)
    copy.__qualname__ = func.__qualname__
    copy.__doc__ = func.__doc__
    copy.__annotations__ = func.__annotations__
    return copy


def _rebound(value: Any, old: type, new: type) -> Any:
    if isinstance(value, types.FunctionType):
        return _rebind_class_cell(value, old, new)
    if isinstance(value, (classmethod, staticmethod)) and isinstance(value.__func__, types.FunctionType):
        return type(value)(_rebind_class_cell(value.__func__, old, new))
    if isinstance(value, property):

        def rebind(f: Any) -> Any:
            return _rebind_class_cell(f, old, new) if isinstance(f, types.FunctionType) else f

        return property(rebind(value.fget), rebind(value.fset), rebind(value.fdel), value.__doc__)
    return value


_NOT_COPIED: Final = frozenset({"__dict__", "__weakref__", "_abc_impl", "__module__", "__qualname__"})


def _build(plugin_class: type, namespace: str) -> type:
    bases = tuple(_counterpart(base, namespace) for base in plugin_class.__bases__)
    body = {k: v for k, v in plugin_class.__dict__.items() if k not in _NOT_COPIED}
    body["__module__"] = f"{__name__}.{_TOKENS[namespace]}.{plugin_class.__module__}"
    body["__qualname__"] = plugin_class.__qualname__
    metaclass = type(plugin_class)
    new: type = metaclass(plugin_class.__name__, bases, body)
    for key, value in body.items():
        rebound = _rebound(value, plugin_class, new)
        if rebound is not value:
            setattr(new, key, rebound)
    new.__rebuilt_from__ = plugin_class  # type: ignore[attr-defined]
    return new


def for_namespace(plugin_class: type, namespace: str) -> type:
    """``plugin_class`` built for ``namespace``: the same code, with Lightning bases from ``namespace``.

    Args:
        plugin_class: a class whose MRO holds classes of a Lightning namespace (normally a plugin class written for
            ``lightning.pytorch``).
        namespace: ``"lightning.pytorch"`` or ``"pytorch_lightning"``; for a Fabric class (one written for
            ``lightning.fabric``), ``"lightning.fabric"`` or ``"lightning_fabric"``.

    Returns:
        ``plugin_class`` itself when it already belongs to ``namespace`` or has no Lightning base; otherwise the
        rebuilt class, the same object on every call.

    Raises:
        ValueError: ``namespace`` is not one of [`NAMESPACES`][precision_base.namespaces.NAMESPACES] or
            [`FABRIC_NAMESPACES`][precision_base.namespaces.FABRIC_NAMESPACES].
        ImportError: the Lightning package of ``namespace`` is not installed.
    """
    if namespace not in ALL_NAMESPACES:
        raise ValueError(f"namespace must be one of {ALL_NAMESPACES}, got {namespace!r}")
    current = namespace_of(plugin_class)
    if current is None or current == namespace:
        return plugin_class
    origin: type = plugin_class.__dict__.get("__rebuilt_from__", plugin_class)
    if namespace_of(origin) == namespace:
        return origin
    key = (origin, namespace)
    with _lock:
        built = _cache.get(key)
        if built is None:
            built = _cache[key] = _build(origin, namespace)
        return built


def lightning_root(namespace: str) -> types.ModuleType:
    """The root module of a Lightning namespace, imported (``lightning.pytorch`` or ``pytorch_lightning``)."""
    return importlib.import_module(namespace)


class _RebuiltModule(types.ModuleType):
    """A module ``precision_base.namespaces.<token>[.<original module>]`` whose classes are rebuilt on access."""

    def __getattr__(self, name: str) -> Any:
        prefix = f"{__name__}."
        token, _, original = self.__name__[len(prefix) :].partition(".")
        namespace = _FROM_TOKEN[token]
        if not original or name.startswith("__"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        obj = getattr(importlib.import_module(original), name)
        return for_namespace(obj, namespace) if isinstance(obj, type) else obj


class _RebuiltFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``precision_base.namespaces.<token>.<module>`` importable, so pickle finds rebuilt classes."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        token = fullname[len(__name__) + 1 :].partition(".")[0] if fullname.startswith(__name__ + ".") else ""
        if token not in _FROM_TOKEN:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _RebuiltModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: attributes are produced on access."""


if not any(isinstance(finder, _RebuiltFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RebuiltFinder())


__all__ = [
    "ALL_NAMESPACES",
    "FABRIC_NAMESPACES",
    "NAMESPACES",
    "for_namespace",
    "lightning_root",
    "namespace_of",
    "namespace_of_module",
]
