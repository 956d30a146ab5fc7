"""Discovery of precision plugins through the ``precision_base.plugins`` entry-point group.

This package is the registry; this module is its facade ([`Registry`][precision_base.registry.Registry] and the
module-level functions over the process-wide one), and the only module of it that users import. Its parts, bottom to
top: [`loading`][precision_base.registry.loading] (an info module without its package; a class by its reference),
[`requirements`][precision_base.registry.requirements] (a plugin's requirements against installed metadata),
[`discovery`][precision_base.registry.discovery] (what is installed; each info module run once),
[`statuses`][precision_base.registry.statuses] (what that makes each backend) and
[`classes`][precision_base.registry.classes] (a backend's class for a door, loaded and checked). The parts import
one another, never this module.

What runs when, and what a broken plugin can do:

* Discovery reads distribution metadata only (entry points, ``Name``, ``Version``, ``Requires-Dist``); it runs no
  plugin code. It happens once per [`Registry`][precision_base.registry.Registry] (again after
  [`clear_cache`][precision_base.registry.clear_cache]).
* Listing ([`list_plugins`][precision_base.registry.list_plugins], ``precision-plugins list``) then runs, for each
  plugin that is not disabled, its
  *info module* alone (the module named in its entry point), without the package's ``__init__``: see
  [`precision_base.registry.loading`][] for the exact rule. Disabled plugins and plugins in conflict run nothing;
  no plugin class, torch, Lightning or DeepSpeed is imported.
* Resolving ([`resolve`][precision_base.registry.resolve]) checks the contract version and the requirements (the
  distribution's own
  ``Requires-Dist`` plus any ``PluginInfo.requires``) first, and only then imports the plugin's class.
* An extra precision that needs one of the distribution's optional extras (``PluginInfo.precision_extras``) is
  *unavailable* while that extra's ``Requires-Dist`` lines are unmet (metadata only): the entry stays ``ok``,
  [`PluginEntry.unavailable`][precision_base.registry.statuses.PluginEntry.unavailable] says why, and resolving that
  precision raises [`PluginRequirementError`][precision_base.PluginRequirementError]
  with an install line for where the distribution came from
  ([`install_command`][precision_base.registry.statuses.install_command]).

Any exception an info module raises, ``SystemExit`` included (``KeyboardInterrupt`` is not caught), makes that
plugin ``broken``; malformed metadata does too. Every other plugin keeps working. No lock is held while plugin
code runs; each info module runs once however many threads ask at the same time.

Set ``PRECISION_PLUGINS_DISABLE`` to backend names separated by commas, semicolons or whitespace (any case) to
switch plugins off before any of their code runs.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Iterator
from typing import Any, Optional

from precision_base.contract import PluginInfo
from precision_base.doors.table import DOORS, Door
from precision_base.errors import (
    BackendDisabledError,
    FabricNotSupportedError,
    PrecisionPluginError,
    PrecisionPluginWarning,
    RegistrationError,
    SpecTypeError,
    UnknownBackendError,
    describe,
    shorten,
)
from precision_base.registry.classes import check_plugin_class, load_plugin_class
from precision_base.registry.discovery import (
    DISABLE_ENV_VAR,
    ENTRY_POINT_GROUP,
    IN_PROCESS,
    INSTALLED,
    Candidate,
    InfoLoader,
    canonical_dist,
    disabled_backends,
    discover,
    in_process_candidate,
)
from precision_base.registry.requirements import installed_version
from precision_base.registry.statuses import (
    PluginEntry,
    check_precision,
    duplicate_error,
    entry_after_info,
    entry_before_info,
    import_error,
    unknown_backend_message,
)
from precision_base.spec import parse_spec


class Registry:
    """The set of known backends: installed ones (discovered lazily, once) plus in-process registrations.

    A facade over [`precision_base.registry.discovery`][] (what is installed, info modules run once) and
    [`precision_base.registry.statuses`][] (what that makes each backend): it holds the tables, resolves and registers.
    The lock guards the registry's own tables only; it is never held while plugin code runs.
    """

    def __init__(self, group: str = ENTRY_POINT_GROUP) -> None:
        self._group = group
        self._lock = threading.RLock()
        self._info = InfoLoader()
        self._installed: Optional[dict[str, list[Candidate]]] = None
        self._in_process: dict[str, Candidate] = {}
        self._classes: dict[tuple[str, Door], type] = {}
        self._import_failures: dict[str, PrecisionPluginError] = {}

    # -- tables ----------------------------------------------------------------------------------------
    def _discover(self) -> dict[str, list[Candidate]]:
        with self._lock:
            if self._installed is None:
                self._installed = discover(self._group)
            return self._installed

    def _candidates(self, backend: str) -> list[Candidate]:
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

    def unknown_disabled(self) -> list[str]:
        """Names in ``PRECISION_PLUGINS_DISABLE`` that match no registered backend (typos, most likely)."""
        return sorted(disabled_backends() - set(self.backends()))

    def _entry(self, backend: str) -> PluginEntry:
        candidates = self._candidates(backend)
        decided = entry_before_info(backend, candidates, disabled_backends())
        if decided is not None:
            return decided
        first = candidates[0]
        pending = self._info.ensure(first)  # the info module runs here, once, without the lock
        return entry_after_info(backend, first, pending=pending, class_error=self._import_failures.get(backend))

    # -- resolution ------------------------------------------------------------------------------------
    def entry(self, backend: str) -> PluginEntry:
        """The entry for ``backend``; raises if it is unknown, disabled, conflicting, broken or unmet."""
        if not issubclass(type(backend), str):
            raise SpecTypeError(f"a backend name must be a string such as 'fsdp', got {describe(backend)}")
        backend = str.__str__(backend)  # a str subclass's own methods never run
        known = self.backends()
        if backend not in known:
            raise UnknownBackendError(unknown_backend_message(backend, known))
        entry = self._entry(backend)
        if entry.status == "disabled":
            raise BackendDisabledError(
                f"precision backend {backend!r} ({entry.distribution} {entry.version}) is installed but disabled "
                f"by {DISABLE_ENV_VAR}={shorten(os.environ.get(DISABLE_ENV_VAR, ''))}; remove it from that "
                "variable to use it."
            )
        if entry.error is not None:
            raise entry.error
        return entry

    def plugin_class(self, backend: str, *, door: Door = "Trainer") -> type:
        """Import and return ``backend``'s plugin class for ``door`` (checked first; cached afterwards).

        The import runs without the registry's lock: a plugin module may itself call the registry at import.
        """
        return self._door_class(self.entry(backend), door)

    def _door_class(self, entry: PluginEntry, door: Door) -> type:
        """The class of ``entry`` for ``door``: ``PluginInfo.plugin_class`` (Trainer) or ``.fabric_class`` (Fabric).

        The Fabric door imports the Trainer class first, so a backend whose Trainer class is broken is refused at
        both doors with the same error (and listed as broken)."""
        assert entry.info is not None
        backend = entry.backend
        with self._lock:
            cached = self._classes.get((backend, door))
            candidate = self._candidates(backend)[0]
        if cached is not None:
            return cached
        given: Optional[type] = None
        if door == "Fabric":
            trainer_class = self._door_class(entry, "Trainer")
            ref = entry.info.fabric_class
            if not ref:
                raise FabricNotSupportedError(
                    f"precision backend {backend!r} ({entry.distribution} {entry.version}) offers no plugin class "
                    f"for Lightning Fabric (its PluginInfo has no fabric_class); it works with the Trainer only: "
                    f"precision_base.Trainer(precision_plugin='{backend}:<precision>'), class "
                    f"{trainer_class.__module__}.{trainer_class.__qualname__}."
                )
        else:
            ref, given = entry.info.plugin_class, candidate.plugin_class
        try:
            cls = given or load_plugin_class(entry, ref)
            check_plugin_class(entry, cls, door)
        except PrecisionPluginError as exc:
            if door == "Trainer":
                with self._lock:
                    self._import_failures[backend] = exc  # later listings show it as broken
            raise
        with self._lock:
            return self._classes.setdefault((backend, door), cls)

    def resolve(self, spec: object, *, door: Door = "Trainer", namespace: Optional[str] = None, **options: Any) -> Any:
        """Turn ``"<backend>:<precision>"`` into a ready plugin instance for ``door``; ``options`` go to its
        constructor.

        ``door`` (``"Trainer"`` or ``"Fabric"``) picks the class (``PluginInfo.plugin_class`` or ``fabric_class``);
        ``namespace`` is the Lightning namespace the instance is built for
        ([`DOORS`][precision_base.doors.table.DOORS]; by default the
        door's first, see [`precision_base.namespaces.for_namespace`][]). The entry is computed once, and both
        doors ask the same questions in the same order: spec, entry, precision, class.
        """
        facts = DOORS.get(door) if isinstance(door, str) else None  # type: ignore[call-overload]
        if facts is None:
            raise ValueError(f"door must be one of {tuple(DOORS)}, got {describe(door)}")
        namespaces = facts.namespaces
        if namespace is None:
            namespace = namespaces[0]
        elif door == "Fabric" and namespace not in namespaces:
            raise ValueError(f"namespace must be one of {namespaces}, got {describe(namespace)}")
        parsed = parse_spec(spec, extras_of=self._declared_extras)
        entry = self.entry(parsed.backend)
        check_precision(entry, parsed.precision)
        cls = self._door_class(entry, door)
        from precision_base.namespaces import for_namespace  # torch-free, imported when a plugin is built

        return for_namespace(cls, namespace)(parsed.precision, **options)

    def _declared_extras(self, backend: str) -> tuple[str, ...]:
        """The extra precisions ``backend``'s plugin declares, for the hint of a mistyped precision; none where the
        backend is not usable."""
        try:
            return self.entry(backend).extra_precisions
        except PrecisionPluginError:
            return ()

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
        ``distribution`` and ``version`` are labels, listed with "(in-process)"; a label naming a distribution
        this registry discovered is refused with [`RegistrationError`][precision_base.errors.RegistrationError]
        (in-process code cannot pose as an
        installed plugin). Registering a name that is already known raises
        [`DuplicateBackendError`][precision_base.DuplicateBackendError] unless
        ``replace``; replacing warns with [`PrecisionPluginWarning`][precision_base.errors.PrecisionPluginWarning],
        naming the old and the new registration.
        """
        new = in_process_candidate(info, plugin_class, distribution, version)
        with self._lock:
            installed = {canonical_dist(c.distribution): c for cs in self._discover().values() for c in cs}
            claimed = installed.get(canonical_dist(distribution))
            if claimed is not None:
                raise RegistrationError(
                    f"register(): distribution={distribution!r} names the installed distribution "
                    f"{claimed.distribution} {claimed.version}; an in-process registration cannot pose as an "
                    "installed one. Leave distribution= out (it is listed as <in-process>) or use another label."
                )
            existing = self._candidates(info.backend)
            if existing and not replace:
                raise duplicate_error(info.backend, [*existing, new])
            self._in_process[info.backend] = new
            self._forget(info.backend)
        if existing:
            old = ", ".join(f"{c.label}{' (installed)' if c.origin == INSTALLED else ''}" for c in existing)
            warnings.warn(
                f"precision backend {info.backend!r}: {old} is replaced by {new.label} (in-process registration "
                "with replace=True)",
                PrecisionPluginWarning,
                stacklevel=3,
            )

    def _forget(self, backend: str) -> None:
        for door in DOORS:
            self._classes.pop((backend, door), None)
        self._import_failures.pop(backend, None)

    def unregister(self, backend: str) -> None:
        """Remove an in-process registration (installed plugins cannot be unregistered)."""
        with self._lock:
            if backend not in self._in_process:
                raise UnknownBackendError(f"backend {shorten(str(backend))} was not registered in-process")
            del self._in_process[backend]
            self._forget(backend)

    def clear_cache(self) -> None:
        """Forget discovered entry points, installed versions and imported classes; the next call discovers again."""
        with self._lock:
            self._installed = None
            self._classes.clear()
            self._import_failures.clear()
            installed_version.cache_clear()
            import_error.cache_clear()


_default = Registry()


def default_registry() -> Registry:
    """The process-wide registry behind the module-level functions."""
    return _default


def list_plugins() -> list[PluginEntry]:
    """Every installed or in-process backend with its status. Runs info modules only (see the module docs)."""
    return _default.entries()


def resolve(spec: object, *, door: Door = "Trainer", namespace: Optional[str] = None, **options: Any) -> Any:
    """Return a plugin instance for ``"<backend>:<precision>"``; ``options`` go to the plugin's constructor.

    ``door`` is ``"Trainer"`` (the default: the backend's ``PluginInfo.plugin_class``) or ``"Fabric"`` (its
    ``fabric_class``); ``namespace`` the Lightning namespace to build the instance for: ``"lightning.pytorch"`` (the
    Trainer door's default) or ``"pytorch_lightning"``; ``"lightning.fabric"`` (the Fabric door's default) or
    ``"lightning_fabric"``. Every door resolves through this one function.

    Raises:
        InvalidSpecError / SpecTypeError: the name does not follow the grammar.
        UnknownBackendError: no such backend is installed (the message says what to install).
        BackendDisabledError: the backend is listed in ``PRECISION_PLUGINS_DISABLE``.
        UnsupportedPrecisionError: the backend does not offer that precision (the message lists what it does).
        DuplicateBackendError: the backend is declared twice, or by a third party for a name this project publishes.
        PluginLoadError: the plugin's info object or class cannot be imported.
        PluginRequirementError: an installed version does not meet the plugin's requirements.
        ContractVersionError: the plugin was built for another contract version.
        InvalidPluginInfoError: the plugin's info or class breaks the contract (e.g. bases in the wrong order).
        FabricNotSupportedError: ``door="Fabric"`` and the backend registers no Fabric class.
    """
    return _default.resolve(spec, door=door, namespace=namespace, **options)


def get_plugin_class(backend: str, *, door: Door = "Trainer") -> type:
    """The plugin class registered for ``backend`` at ``door``, imported on first use."""
    return _default.plugin_class(backend, door=door)


def get_entry(backend: str) -> PluginEntry:
    """The [`PluginEntry`][precision_base.registry.statuses.PluginEntry] for ``backend``; raises like
    [`resolve`][precision_base.registry.resolve] when it cannot be used."""
    return _default.entry(backend)


def register(info: PluginInfo, **kwargs: Any) -> None:
    """Register a backend in-process; see [`Registry.register`][precision_base.registry.Registry.register]."""
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
    """Forget discovered plugins; see [`Registry.clear_cache`][precision_base.registry.Registry.clear_cache]."""
    _default.clear_cache()


__all__ = [
    "Registry",
    "clear_cache",
    "default_registry",
    "get_entry",
    "get_plugin_class",
    "list_plugins",
    "register",
    "registered",
    "resolve",
    "unregister",
]
