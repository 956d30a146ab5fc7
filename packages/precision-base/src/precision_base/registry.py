"""Discovery of precision plugins through the ``precision_base.plugins`` entry-point group.

Discovery reads entry points and loads each one's small :class:`~precision_base.contract.PluginInfo`
object; it never imports a plugin's class, torch, Lightning or DeepSpeed. A plugin's class is imported only
when it is resolved, after its requirements and contract version have been checked. A broken plugin is
isolated: it is reported by :func:`list_plugins` and raises when resolved, and every other plugin keeps
working.

Set ``PRECISION_PLUGINS_DISABLE`` to a comma-separated list of backend names to hide those plugins.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from precision_base.contract import CONTRACT_VERSION, PluginInfo, PrecisionPlugin
from precision_base.errors import (
    BackendDisabledError,
    ContractVersionError,
    DuplicateBackendError,
    InvalidPluginInfoError,
    PluginLoadError,
    PluginRequirementError,
    UnknownBackendError,
    UnsupportedPrecisionError,
)
from precision_base.requirements import installed_version, unmet_requirements
from precision_base.spec import PluginSpec, parse_spec

if TYPE_CHECKING:
    from importlib import metadata

ENTRY_POINT_GROUP = "precision_base.plugins"
DISABLE_ENV_VAR = "PRECISION_PLUGINS_DISABLE"

PUBLISHED_DISTRIBUTIONS: dict[str, str] = {"fsdp": "precision-fsdp", "deepspeed": "precision-deepspeed"}
"""Backends this project publishes, and the distribution that provides each."""

IN_PROCESS = "<in-process>"


@dataclass(frozen=True)
class PluginEntry:
    """One registered backend as discovery sees it.

    ``status`` is one of ``"ok"``, ``"broken"``, ``"requirement missing"``, ``"incompatible contract"``,
    ``"conflict"`` or ``"disabled"``; ``reason`` explains any status but ``"ok"``.
    """

    backend: str
    distribution: str
    version: str
    status: str
    reason: str = ""
    info: Optional[PluginInfo] = None
    error: Optional[BaseException] = None

    @property
    def precisions(self) -> tuple[str, ...]:
        return self.info.precisions if self.info is not None else ()


@dataclass
class _Candidate:
    backend: str
    distribution: str
    version: str
    info: Optional[PluginInfo] = None
    error: Optional[BaseException] = None
    plugin_class: Optional[type] = None


def disabled_backends() -> frozenset[str]:
    """Backend names listed in ``PRECISION_PLUGINS_DISABLE`` (comma or whitespace separated)."""
    raw = os.environ.get(DISABLE_ENV_VAR, "")
    return frozenset(name.strip() for name in raw.replace(",", " ").split() if name.strip())


def _load_info(ep: metadata.EntryPoint, dist: str, version: str) -> _Candidate:
    candidate = _Candidate(backend=ep.name, distribution=dist, version=version)
    try:
        info = ep.load()
    except Exception as exc:  # a broken plugin must not break discovery of the others
        err = PluginLoadError(
            f"precision plugin {ep.name!r} from {dist} {version} failed to load its info object "
            f"{ep.value!r}: {type(exc).__name__}: {exc}"
        )
        err.__cause__ = exc
        candidate.error = err
        return candidate
    if not isinstance(info, PluginInfo):
        candidate.error = InvalidPluginInfoError(
            f"precision plugin {ep.name!r} from {dist} {version}: entry point {ep.value!r} must name a "
            f"precision_base.PluginInfo, found {type(info).__name__}"
        )
    elif info.backend != ep.name:
        candidate.error = InvalidPluginInfoError(
            f"precision plugin from {dist} {version}: entry point is named {ep.name!r} but its PluginInfo "
            f"declares backend {info.backend!r}; the two must match"
        )
    else:
        candidate.info = info
    return candidate


class Registry:
    """The set of known backends: installed ones (discovered lazily, once) plus in-process registrations."""

    def __init__(self, group: str = ENTRY_POINT_GROUP) -> None:
        self._group = group
        self._lock = threading.RLock()
        self._installed: Optional[dict[str, list[_Candidate]]] = None
        self._in_process: dict[str, _Candidate] = {}
        self._classes: dict[str, type] = {}
        self._import_failures: dict[str, PluginLoadError] = {}

    # -- discovery -------------------------------------------------------------------------------------
    def _discover(self) -> dict[str, list[_Candidate]]:
        with self._lock:
            if self._installed is None:
                from importlib import metadata  # imported on first discovery: `import precision_base` stays cheap

                found: dict[str, list[_Candidate]] = {}
                for ep in metadata.entry_points(group=self._group):
                    dist_obj = ep.dist
                    dist = dist_obj.metadata["Name"] if dist_obj is not None else "<unknown distribution>"
                    version = dist_obj.version if dist_obj is not None else "?"
                    same = found.setdefault(ep.name, [])
                    if any(c.distribution == dist for c in same):
                        continue  # one distribution seen twice on sys.path: Python imports the first
                    same.append(_load_info(ep, dist, version))
                self._installed = found
            return self._installed

    def _candidates(self, backend: str) -> list[_Candidate]:
        with self._lock:
            if backend in self._in_process:
                return [self._in_process[backend]]
            return list(self._discover().get(backend, []))

    def backends(self) -> list[str]:
        """Names of every registered backend, sorted, whatever their status."""
        with self._lock:
            return sorted(set(self._discover()) | set(self._in_process))

    def entries(self) -> list[PluginEntry]:
        """Every registered backend with its status; never raises for a broken plugin."""
        return [self._entry(name) for name in self.backends()]

    def _entry(self, backend: str) -> PluginEntry:
        candidates = self._candidates(backend)
        first = candidates[0]
        base: dict[str, Any] = dict(backend=backend, distribution=first.distribution, version=first.version)
        if len(candidates) > 1:
            err = self._duplicate_error(backend, candidates)
            dists = ", ".join(f"{c.distribution} {c.version}" for c in candidates)
            return PluginEntry(**{**base, "distribution": dists}, status="conflict", reason=str(err), error=err)
        if backend in disabled_backends():
            return PluginEntry(**base, status="disabled", reason=f"listed in {DISABLE_ENV_VAR}", info=first.info)
        error = first.error or self._import_failures.get(backend)
        if error is not None:
            return PluginEntry(**base, status="broken", reason=str(error), info=first.info, error=error)
        info = first.info
        assert info is not None
        if info.contract_version != CONTRACT_VERSION:
            err2 = self._contract_error(first, info)
            return PluginEntry(**base, status="incompatible contract", reason=str(err2), info=info, error=err2)
        unmet = unmet_requirements(info.requires)
        if unmet:
            err3 = PluginRequirementError(self._requirement_message(first, unmet))
            return PluginEntry(**base, status="requirement missing", reason="; ".join(unmet), info=info, error=err3)
        return PluginEntry(**base, status="ok", info=info)

    @staticmethod
    def _duplicate_error(backend: str, candidates: list[_Candidate]) -> DuplicateBackendError:
        dists = " and ".join(f"{c.distribution} {c.version}" for c in candidates)
        return DuplicateBackendError(
            f"precision backend {backend!r} is registered by more than one distribution: {dists}. "
            f"Uninstall all but one of them (or disable the name with {DISABLE_ENV_VAR})."
        )

    @staticmethod
    def _contract_error(candidate: _Candidate, info: PluginInfo) -> ContractVersionError:
        import precision_base

        return ContractVersionError(
            f"precision plugin {candidate.backend!r} from {candidate.distribution} {candidate.version} was built "
            f"for precision-base contract version {info.contract_version}, but the installed precision-base "
            f"{precision_base.__version__} implements contract version {CONTRACT_VERSION}. Install a release of "
            f"{candidate.distribution} built for contract {CONTRACT_VERSION}."
        )

    @staticmethod
    def _requirement_message(candidate: _Candidate, unmet: list[str]) -> str:
        return (
            f"precision plugin {candidate.backend!r} from {candidate.distribution} {candidate.version} cannot "
            f"load: it " + "; it ".join(unmet) + "."
        )

    # -- resolution ------------------------------------------------------------------------------------
    def entry(self, backend: str) -> PluginEntry:
        """The entry for ``backend``; raises if it is unknown, disabled, conflicting, broken or unmet."""
        with self._lock:
            known = self.backends()
        if backend not in known:
            raise UnknownBackendError(self._unknown_message(backend, known))
        entry = self._entry(backend)
        if entry.status == "disabled":
            raise BackendDisabledError(
                f"precision backend {backend!r} ({entry.distribution} {entry.version}) is installed but disabled "
                f"by {DISABLE_ENV_VAR}={os.environ.get(DISABLE_ENV_VAR, '')!r}; remove it from that variable "
                "to use it."
            )
        if entry.error is not None:
            raise entry.error
        return entry

    def plugin_class(self, backend: str) -> type:
        """Import and return the plugin class for ``backend`` (checked first; cached afterwards)."""
        entry = self.entry(backend)
        with self._lock:
            cached = self._classes.get(backend)
            if cached is not None:
                return cached
            candidate = self._candidates(backend)[0]
            try:
                cls = candidate.plugin_class or self._import_class(entry)
            except PluginLoadError as exc:
                self._import_failures[backend] = exc  # later listings show it as broken
                raise
            if not (isinstance(cls, type) and issubclass(cls, PrecisionPlugin)):
                raise InvalidPluginInfoError(
                    f"precision plugin {backend!r} from {entry.distribution} {entry.version}: "
                    f"{entry.info.plugin_class if entry.info else cls!r} is not a subclass of "
                    "precision_base.PrecisionPlugin"
                )
            self._classes[backend] = cls
            return cls

    @staticmethod
    def _import_class(entry: PluginEntry) -> type:
        assert entry.info is not None
        module_name, _, qualname = entry.info.plugin_class.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except Exception as exc:
            raise PluginLoadError(
                f"precision plugin {entry.backend!r} from {entry.distribution} {entry.version} failed to import "
                f"{entry.info.plugin_class!r}: {type(exc).__name__}: {exc}"
            ) from exc
        return obj  # type: ignore[no-any-return]

    def resolve(self, spec: object, *, namespace: str = "lightning.pytorch", **options: Any) -> Any:
        """Turn ``"<backend>:<precision>"`` into a ready plugin instance; ``options`` go to its constructor.

        ``namespace`` (``"lightning.pytorch"`` or ``"pytorch_lightning"``) is the Lightning namespace the instance
        is built for (see :func:`precision_base.namespaces.for_namespace`).
        """
        parsed = parse_spec(spec)
        entry = self.entry(parsed.backend)
        assert entry.info is not None
        if parsed.precision not in entry.info.precisions:
            raise UnsupportedPrecisionError(
                f"precision backend {parsed.backend!r} ({entry.distribution} {entry.version}) does not offer "
                f"{parsed.precision!r}; it offers " + ", ".join(entry.info.precisions)
            )
        cls = self.plugin_class(parsed.backend)
        from precision_base.namespaces import for_namespace  # torch-free, imported when a plugin is built

        return for_namespace(cls, namespace)(parsed.precision, **options)

    def _unknown_message(self, backend: str, known: list[str]) -> str:
        installed = ", ".join(known) if known else "none"
        msg = f"no precision plugin is registered for backend {backend!r}. Installed backends: {installed}."
        close = difflib.get_close_matches(backend, sorted(set(known) | set(PUBLISHED_DISTRIBUTIONS)), n=1)
        if close and close[0] != backend:
            msg += f" Did you mean {close[0]!r}?"
        if backend in PUBLISHED_DISTRIBUTIONS:
            msg += f" To use it, run: pip install {PUBLISHED_DISTRIBUTIONS[backend]}"
        return msg

    # -- in-process registration and caching -----------------------------------------------------------
    def register(
        self,
        info: PluginInfo,
        *,
        plugin_class: Optional[type] = None,
        distribution: str = IN_PROCESS,
        version: str = "0",
        replace: bool = False,
    ) -> None:
        """Register a backend in this process, without installing a distribution (for tests and notebooks).

        ``plugin_class`` may be given directly; otherwise ``info.plugin_class`` is imported on resolve.
        Registering a name that is already known raises :class:`DuplicateBackendError` unless ``replace``.
        """
        if not isinstance(info, PluginInfo):
            raise InvalidPluginInfoError(f"register() needs a precision_base.PluginInfo, got {type(info).__name__}")
        with self._lock:
            if not replace and info.backend in self.backends():
                existing = self._candidates(info.backend)
                raise self._duplicate_error(info.backend, [*existing, _Candidate(info.backend, distribution, version)])
            self._in_process[info.backend] = _Candidate(
                backend=info.backend, distribution=distribution, version=version, info=info, plugin_class=plugin_class
            )
            self._classes.pop(info.backend, None)
            self._import_failures.pop(info.backend, None)

    def unregister(self, backend: str) -> None:
        """Remove an in-process registration (installed plugins cannot be unregistered)."""
        with self._lock:
            if backend not in self._in_process:
                raise UnknownBackendError(f"backend {backend!r} was not registered in-process")
            del self._in_process[backend]
            self._classes.pop(backend, None)
            self._import_failures.pop(backend, None)

    def clear_cache(self) -> None:
        """Forget discovered entry points, installed versions and imported classes; the next call discovers again."""
        with self._lock:
            self._installed = None
            self._classes.clear()
            self._import_failures.clear()
            installed_version.cache_clear()


_default = Registry()


def default_registry() -> Registry:
    """The process-wide registry behind the module-level functions."""
    return _default


def list_plugins() -> list[PluginEntry]:
    """Every installed or in-process backend with its status. Imports no plugin code."""
    return _default.entries()


def resolve(spec: object, *, namespace: str = "lightning.pytorch", **options: Any) -> Any:
    """Return a plugin instance for ``"<backend>:<precision>"``; ``options`` go to the plugin's constructor.

    ``namespace`` is the Lightning namespace to build the instance for: ``"lightning.pytorch"`` (the default) or
    ``"pytorch_lightning"``.

    Raises:
        InvalidSpecError / SpecTypeError: the name does not follow the grammar.
        UnknownBackendError: no such backend is installed (the message says what to install).
        BackendDisabledError: the backend is listed in ``PRECISION_PLUGINS_DISABLE``.
        UnsupportedPrecisionError: the backend does not offer that precision (the message lists what it does).
        DuplicateBackendError, PluginLoadError, PluginRequirementError, ContractVersionError: see their docs.
    """
    return _default.resolve(spec, namespace=namespace, **options)


def get_plugin_class(backend: str) -> type:
    """The plugin class registered for ``backend``, imported on first use."""
    return _default.plugin_class(backend)


def get_entry(backend: str) -> PluginEntry:
    """The :class:`PluginEntry` for ``backend``; raises like :func:`resolve` when it cannot be used."""
    return _default.entry(backend)


def register(info: PluginInfo, **kwargs: Any) -> None:
    """Register a backend in-process; see :meth:`Registry.register`."""
    _default.register(info, **kwargs)


def unregister(backend: str) -> None:
    """Remove an in-process registration."""
    _default.unregister(backend)


@contextlib.contextmanager
def registered(info: PluginInfo, **kwargs: Any) -> Iterator[None]:
    """Context manager: register ``info`` in-process for the duration of the block."""
    _default.register(info, **kwargs)
    try:
        yield
    finally:
        _default.unregister(info.backend)


def clear_cache() -> None:
    """Forget discovered plugins; see :meth:`Registry.clear_cache`."""
    _default.clear_cache()


__all__ = [
    "DISABLE_ENV_VAR",
    "ENTRY_POINT_GROUP",
    "PUBLISHED_DISTRIBUTIONS",
    "PluginEntry",
    "PluginSpec",
    "Registry",
    "clear_cache",
    "default_registry",
    "disabled_backends",
    "get_entry",
    "get_plugin_class",
    "list_plugins",
    "register",
    "registered",
    "resolve",
    "unregister",
]
