"""Discovery of precision plugins through the ``precision_base.plugins`` entry-point group.

What runs when, and what a broken plugin can do:

* Discovery reads distribution metadata only (entry points, ``Name``, ``Version``, ``Requires-Dist``); it runs no
  plugin code. It happens once per :class:`Registry` (again after :func:`clear_cache`).
* Listing (:func:`list_plugins`, ``precision-plugins list``) then runs, for each plugin that is not disabled, its
  *info module* alone (the module named in its entry point), without the package's ``__init__``: see
  :mod:`precision_base.loading` for the exact rule. Disabled plugins and plugins in conflict run nothing; no plugin
  class, torch, Lightning or DeepSpeed is imported.
* Resolving (:func:`resolve`) checks the contract version and the requirements (the distribution's own
  ``Requires-Dist`` plus any ``PluginInfo.requires``) first, and only then imports the plugin's class.
* An extra precision that needs one of the distribution's optional extras (``PluginInfo.precision_extras``) is
  *unavailable* while that extra's ``Requires-Dist`` lines are unmet (metadata only): the entry stays ``ok``,
  :attr:`PluginEntry.unavailable` says why, and resolving that precision raises :class:`PluginRequirementError`
  with an install line for where the distribution came from (:func:`install_command`).

Any exception an info module raises, ``SystemExit`` included (``KeyboardInterrupt`` is not caught), makes that
plugin ``broken``; malformed metadata does too. Every other plugin keeps working. No lock is held while plugin
code runs; each info module runs once however many threads ask at the same time.

Set ``PRECISION_PLUGINS_DISABLE`` to backend names separated by commas, semicolons or whitespace (any case) to
switch plugins off before any of their code runs.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import re
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from precision_base.contract import CONTRACT_VERSION, PluginInfo, PrecisionPlugin
from precision_base.errors import (
    BackendDisabledError,
    ContractVersionError,
    DuplicateBackendError,
    InvalidPluginInfoError,
    PluginLoadError,
    PluginRequirementError,
    PrecisionPluginError,
    PrecisionPluginWarning,
    RegistrationError,
    SpecTypeError,
    UnknownBackendError,
    UnsupportedPrecisionError,
    describe,
    shorten,
)
from precision_base.requirements import installed_version, unmet_requirements
from precision_base.spec import PRECISIONS, PluginSpec, parse_spec

if TYPE_CHECKING:
    from importlib import metadata

ENTRY_POINT_GROUP = "precision_base.plugins"
DISABLE_ENV_VAR = "PRECISION_PLUGINS_DISABLE"

PUBLISHED_DISTRIBUTIONS: dict[str, str] = {"fsdp": "precision-fsdp", "deepspeed": "precision-deepspeed"}
"""Backends this project publishes, and the distribution that provides each: only that distribution is ``ok``."""

IN_PROCESS = "<in-process>"
INSTALLED = "installed"

STATUSES = ("ok", "disabled", "conflict", "broken", "unofficial", "incompatible contract", "requirement missing")
"""Every status a :class:`PluginEntry` can have."""

_LIGHTNING_ROOTS = ("lightning", "pytorch_lightning", "lightning_fabric")


@dataclass(frozen=True)
class PluginEntry:
    """One registered backend as discovery sees it.

    ``status`` is one of :data:`STATUSES`; ``reason`` explains any status but ``"ok"``. ``origin`` is
    ``"installed"`` (found through an entry point) or ``"<in-process>"`` (registered by code in this process:
    ``distribution`` and ``version`` are then only the labels that code gave).
    """

    backend: str
    distribution: str
    version: str
    status: str
    reason: str = ""
    info: Optional[PluginInfo] = None
    error: Optional[BaseException] = None
    origin: str = INSTALLED
    entry_point: str = ""
    """``"module:attr"`` of the entry point (empty for in-process registrations)."""
    unavailable: tuple[tuple[str, str], ...] = ()
    """``(precision, why)`` for each extra precision whose optional extra is not installed (see the module docs)."""

    @property
    def precisions(self) -> tuple[str, ...]:
        return self.info.precisions if self.info is not None else ()

    @property
    def extra_precisions(self) -> tuple[str, ...]:
        """Names of the backend's extra precisions (beyond Lightning's five), e.g. ``("fp8-tensorwise",)``."""
        return tuple(name for name, _base in self.info.extra_precisions) if self.info is not None else ()

    @property
    def summary(self) -> str:
        return self.info.summary if self.info is not None else ""


@dataclass(eq=False)
class _Candidate:
    backend: str
    distribution: str
    version: str
    origin: str = INSTALLED
    entry_point: Optional[metadata.EntryPoint] = None
    dist: Optional[metadata.Distribution] = None
    problem: Optional[PrecisionPluginError] = None  # found in metadata, before any plugin code runs
    info: Optional[PluginInfo] = None
    error: Optional[PrecisionPluginError] = None
    loaded: bool = False
    loader: Optional[int] = None  # thread id running the info module right now
    plugin_class: Optional[type] = None
    requires: Optional[tuple[str, ...]] = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if self.distribution == IN_PROCESS:
            return IN_PROCESS
        return f"{self.distribution} {self.version}{' (in-process)' if self.origin == IN_PROCESS else ''}"


_SEPARATORS = re.compile(r"[\s,;]+")


def disabled_backends() -> frozenset[str]:
    """Names in ``PRECISION_PLUGINS_DISABLE``, lowercased: separated by commas, semicolons or whitespace."""
    raw = os.environ.get(DISABLE_ENV_VAR, "")
    return frozenset(name.lower() for name in _SEPARATORS.split(raw) if name)


def _canonical_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata_field(dist: metadata.Distribution, name: str) -> Optional[str]:
    try:
        value = dist.metadata.get(name)  # type: ignore[attr-defined]
    except Exception:  # unreadable METADATA: reported by the caller as a missing field
        return None
    return value if isinstance(value, str) and value.strip() else None


def _info_problems(info: object) -> list[str]:
    """Schema problems of an object that claims to be a PluginInfo (it may have skipped ``__post_init__``)."""
    from precision_base.contract import _info_problems as schema_problems

    try:
        return schema_problems(info)  # type: ignore[arg-type]
    except Exception as exc:  # a field missing altogether
        return [f"{type(exc).__name__}: {exc}"]


def _run_info_module(candidate: _Candidate) -> None:
    """Run ``candidate``'s info module and validate its object; no registry lock is held here."""
    from precision_base.loading import load_object

    ep = candidate.entry_point
    assert ep is not None
    where = f"precision plugin {candidate.backend!r} from {candidate.label}"
    try:
        info = load_object(ep.module, ep.attr)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: one plugin must not take discovery (or the process) down
        err = PluginLoadError(f"{where} failed to load its info object {ep.value!r}: {_exc_detail(exc)}")
        err.__cause__ = exc
        candidate.error = err
        return
    if not isinstance(info, PluginInfo):
        candidate.error = InvalidPluginInfoError(
            f"{where}: entry point {ep.value!r} must name a precision_base.PluginInfo, found {describe(info)}"
        )
        return
    problems = _info_problems(info)
    if problems:
        candidate.error = InvalidPluginInfoError(f"{where}: invalid PluginInfo {ep.value!r}: " + "; ".join(problems))
    elif info.backend != ep.name:
        candidate.error = InvalidPluginInfoError(
            f"precision plugin from {candidate.label}: entry point is named {ep.name!r} but its PluginInfo "
            f"declares backend {info.backend!r}; the two must match"
        )
    else:
        candidate.info = info


def _exc_detail(exc: BaseException) -> str:
    """``"TypeName: message"`` of a plugin's exception, bounded, even when its ``__str__`` raises."""
    try:
        text = str(exc)
    except Exception:
        text = "<the exception's message could not be read>"
    text = str.__str__(text) if isinstance(text, str) else ""
    if isinstance(exc, SystemExit):
        text = f"the module called sys.exit({text})"
    return f"{type(exc).__name__}: {text if len(text) <= 500 else text[:480] + '...'}"


def _lightning_before_mixin(cls: type) -> Optional[type]:
    """The first Lightning class that comes before :class:`PrecisionPlugin` in ``cls``'s MRO, if any."""
    for klass in cls.__mro__:
        if klass is PrecisionPlugin:
            return None
        if klass.__module__.split(".")[0] in _LIGHTNING_ROOTS:
            return klass
    return None


class Registry:
    """The set of known backends: installed ones (discovered lazily, once) plus in-process registrations.

    The lock guards the registry's own tables only; it is never held while plugin code runs.
    """

    def __init__(self, group: str = ENTRY_POINT_GROUP) -> None:
        self._group = group
        self._lock = threading.RLock()
        self._loaded = threading.Condition(self._lock)
        self._installed: Optional[dict[str, list[_Candidate]]] = None
        self._in_process: dict[str, _Candidate] = {}
        self._classes: dict[str, type] = {}
        self._import_failures: dict[str, PrecisionPluginError] = {}
        self._waiting: dict[int, _Candidate] = {}  # thread id -> the candidate that thread waits for

    # -- discovery: metadata only ----------------------------------------------------------------------
    def _discover(self) -> dict[str, list[_Candidate]]:
        with self._lock:
            if self._installed is None:
                from importlib import metadata  # imported on first discovery: `import precision_base` stays cheap

                found: dict[str, list[_Candidate]] = {}
                seen: set[str] = set()
                for dist in metadata.distributions():
                    for candidate in self._candidates_of(dist, seen):
                        found.setdefault(candidate.backend, []).append(candidate)
                self._installed = found
            return self._installed

    def _candidates_of(self, dist: metadata.Distribution, seen: set[str]) -> list[_Candidate]:
        try:
            eps = [ep for ep in dist.entry_points if ep.group == self._group]
        except Exception:  # unreadable entry_points.txt: it cannot name a backend, so there is nothing to list
            return []
        if not eps:
            return []
        name = _metadata_field(dist, "Name")
        version = _metadata_field(dist, "Version")
        key = _canonical_dist(name) if name else f"<unnamed at {getattr(dist, '_path', '?')}>"
        if key in seen:
            return []  # the same distribution twice on sys.path: Python imports from the first, so do we
        seen.add(key)
        by_name: dict[str, list[metadata.EntryPoint]] = {}
        for ep in eps:
            by_name.setdefault(ep.name, []).append(ep)
        out = []
        for backend, same in by_name.items():
            c = _Candidate(
                backend=backend,
                distribution=name or "<unknown distribution>",
                version=version or "?",
                entry_point=same[0],
                dist=dist,
            )
            if name is None or version is None:
                missing = " and ".join(f for f, v in (("Name", name), ("Version", version)) if v is None)
                c.problem = InvalidPluginInfoError(
                    f"precision plugin {backend!r}: its distribution's metadata has no {missing} field "
                    f"({getattr(dist, '_path', 'unknown location')}); the installation is damaged: reinstall it"
                )
            elif len(same) > 1:
                values = ", ".join(repr(ep.value) for ep in same)
                c.problem = DuplicateBackendError(
                    f"precision backend {backend!r} is declared {len(same)} times by {name} {version} in entry-point "
                    f"group {self._group!r} ({values}); the distribution must declare it once. Reinstall a fixed "
                    f"release (or disable the name with {DISABLE_ENV_VAR})."
                )
            out.append(c)
        return out

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

    def unknown_disabled(self) -> list[str]:
        """Names in ``PRECISION_PLUGINS_DISABLE`` that match no registered backend (typos, most likely)."""
        return sorted(disabled_backends() - set(self.backends()))

    # -- running info modules: once each, no lock held while they run -----------------------------------
    def _ensure_info(self, c: _Candidate) -> Optional[PrecisionPluginError]:
        """Run ``c``'s info module unless done; returns an error only for a request that would wait forever."""
        if c.loaded or c.entry_point is None:
            return None
        me = threading.get_ident()
        with self._loaded:
            while not c.loaded:
                if c.loader is None:
                    c.loader = me
                    break
                if self._would_deadlock(c, me):
                    return PluginLoadError(
                        f"precision plugin {c.backend!r} from {c.label} was asked for while its own info module "
                        f"{c.entry_point.value!r} is still running (an import cycle in the plugin); ask after "
                        "import time instead"
                    )
                self._waiting[me] = c
                try:
                    self._loaded.wait()
                finally:
                    del self._waiting[me]
            else:
                return None
        try:
            _run_info_module(c)
        finally:
            with self._loaded:
                c.loaded = True
                c.loader = None
                self._loaded.notify_all()
        return None

    def _would_deadlock(self, c: _Candidate, me: int) -> bool:
        owner = c.loader
        for _ in range(len(self._waiting) + 1):
            if owner == me:
                return True
            waited = self._waiting.get(owner) if owner is not None else None
            if waited is None:
                return False
            owner = waited.loader
        return owner == me

    # -- status ----------------------------------------------------------------------------------------
    def _entry(self, backend: str) -> PluginEntry:
        candidates = self._candidates(backend)
        first = candidates[0]
        base: dict[str, Any] = dict(
            backend=backend,
            distribution=first.distribution,
            version=first.version,
            origin=first.origin,
            entry_point=first.entry_point.value if first.entry_point is not None else "",
        )
        if backend in disabled_backends():  # before anything of the plugin runs
            if len(candidates) > 1:
                base.update(distribution=", ".join(f"{c.distribution} {c.version}" for c in candidates), version="-")
            info = first.info if first.loaded or first.origin == IN_PROCESS else None
            return PluginEntry(**base, status="disabled", reason=f"listed in {DISABLE_ENV_VAR}", info=info)
        if len(candidates) > 1:
            err = self._duplicate_error(backend, candidates)
            dists = ", ".join(f"{c.distribution} {c.version}" for c in candidates)
            return PluginEntry(
                **{**base, "distribution": dists, "version": "-"}, status="conflict", reason=str(err), error=err
            )
        if first.problem is not None:
            status = "conflict" if isinstance(first.problem, DuplicateBackendError) else "broken"
            return PluginEntry(**base, status=status, reason=str(first.problem), error=first.problem)
        unofficial = self._unofficial_error(first)
        if unofficial is not None:
            return PluginEntry(**base, status="unofficial", reason=str(unofficial), info=first.info, error=unofficial)
        pending = self._ensure_info(first)
        error = pending or first.error or self._import_failures.get(backend)
        if error is not None:
            return PluginEntry(**base, status="broken", reason=str(error), info=first.info, error=error)
        info = first.info
        assert info is not None
        if info.contract_version != CONTRACT_VERSION:
            err2 = self._contract_error(first, info)
            return PluginEntry(**base, status="incompatible contract", reason=str(err2), info=info, error=err2)
        unmet = unmet_requirements(self._requirements(first, info))
        if unmet:
            err3 = PluginRequirementError(self._requirement_message(first, unmet))
            return PluginEntry(**base, status="requirement missing", reason="; ".join(unmet), info=info, error=err3)
        return PluginEntry(**base, status="ok", info=info, unavailable=self._unavailable(first, info))

    @staticmethod
    def _unavailable(c: _Candidate, info: PluginInfo) -> tuple[tuple[str, str], ...]:
        """``(precision, why)`` for each of ``info.precision_extras`` whose extra's requirements are unmet."""
        if not info.precision_extras:
            return ()
        declared: list[str] = []
        if c.dist is not None:
            with contextlib.suppress(Exception):  # unreadable metadata: nothing declared there
                declared = list(c.dist.requires or ())
        out = []
        for precision, extra in info.precision_extras:
            unmet = unmet_requirements(tuple(declared), extra=extra)
            if unmet:
                where = c.label if c.distribution != IN_PROCESS else "this plugin"
                out.append(
                    (
                        precision,
                        f"{'; '.join(unmet)} (the {extra!r} extra of {where}); install it with: "
                        + install_command(c.distribution, extra, c.dist),
                    )
                )
        return tuple(out)

    @staticmethod
    def _requirements(c: _Candidate, info: PluginInfo) -> tuple[str, ...]:
        """What the plugin needs: its distribution's ``Requires-Dist`` (no extras) plus ``PluginInfo.requires``."""
        if c.requires is None:
            declared: list[str] = []
            if c.dist is not None:
                try:
                    declared = list(c.dist.requires or ())
                except Exception:  # unreadable metadata: nothing declared there
                    declared = []
            c.requires = (*declared, *(r for r in info.requires if r not in declared))
        return c.requires

    @staticmethod
    def _unofficial_error(c: _Candidate) -> Optional[PrecisionPluginError]:
        publisher = PUBLISHED_DISTRIBUTIONS.get(c.backend)
        if publisher is None or c.origin == IN_PROCESS or _canonical_dist(c.distribution) == publisher:
            return None
        return DuplicateBackendError(
            f"precision backend {c.backend!r} is published by {publisher}, but this one comes from the third-party "
            f"distribution {c.label}; it is not used. Uninstall {c.distribution} and install {publisher} "
            f"(or disable the name with {DISABLE_ENV_VAR})."
        )

    @staticmethod
    def _duplicate_error(backend: str, candidates: list[_Candidate]) -> DuplicateBackendError:
        dists = " and ".join(c.label for c in candidates)
        return DuplicateBackendError(
            f"precision backend {backend!r} is registered by more than one distribution: {dists}. "
            f"Uninstall all but one of them (or disable the name with {DISABLE_ENV_VAR})."
        )

    @staticmethod
    def _contract_error(candidate: _Candidate, info: PluginInfo) -> ContractVersionError:
        import precision_base

        return ContractVersionError(
            f"precision plugin {candidate.backend!r} from {candidate.label} was built "
            f"for precision-base contract version {info.contract_version}, but the installed precision-base "
            f"{precision_base.__version__} implements contract version {CONTRACT_VERSION}. Install a release of "
            f"{candidate.distribution} built for contract {CONTRACT_VERSION}."
        )

    @staticmethod
    def _requirement_message(candidate: _Candidate, unmet: list[str]) -> str:
        return (
            f"precision plugin {candidate.backend!r} from {candidate.label} cannot load: it "
            + "; it ".join(unmet)
            + "."
        )

    # -- resolution ------------------------------------------------------------------------------------
    def entry(self, backend: str) -> PluginEntry:
        """The entry for ``backend``; raises if it is unknown, disabled, conflicting, broken or unmet."""
        if not issubclass(type(backend), str):
            raise SpecTypeError(f"a backend name must be a string such as 'fsdp', got {describe(backend)}")
        backend = str.__str__(backend)  # a str subclass's own methods never run
        known = self.backends()
        if backend not in known:
            raise UnknownBackendError(self._unknown_message(backend, known))
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

    def plugin_class(self, backend: str) -> type:
        """Import and return the plugin class for ``backend`` (checked first; cached afterwards).

        The import runs without the registry's lock: a plugin module may itself call the registry at import.
        """
        entry = self.entry(backend)
        with self._lock:
            cached = self._classes.get(backend)
            candidate = self._candidates(backend)[0]
        if cached is not None:
            return cached
        try:
            cls = candidate.plugin_class or self._import_class(entry)
            self._check_class(entry, cls)
        except PrecisionPluginError as exc:
            with self._lock:
                self._import_failures[backend] = exc  # later listings show it as broken
            raise
        with self._lock:
            return self._classes.setdefault(backend, cls)

    @staticmethod
    def _check_class(entry: PluginEntry, cls: object) -> None:
        where = f"precision plugin {entry.backend!r} from {entry.distribution} {entry.version}"
        declared = entry.info.plugin_class if entry.info else describe(cls)
        if not (isinstance(cls, type) and issubclass(cls, PrecisionPlugin)):
            raise InvalidPluginInfoError(f"{where}: {declared} is not a subclass of precision_base.PrecisionPlugin")
        wrong = _lightning_before_mixin(cls)
        if wrong is not None:
            raise InvalidPluginInfoError(
                f"{where}: {cls.__qualname__} lists {wrong.__module__}.{wrong.__qualname__} before "
                "precision_base.PrecisionPlugin in its bases, so the mixin's connect() never runs (autocast would "
                f"stay on the wrong device). Write class {cls.__qualname__}(<the PrecisionPlugin mixin>, "
                f"{wrong.__qualname__})."
            )

    @staticmethod
    def _import_class(entry: PluginEntry) -> type:
        assert entry.info is not None
        module_name, _, qualname = entry.info.plugin_class.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit included: the plugin is broken, the process goes on
            raise PluginLoadError(
                f"precision plugin {entry.backend!r} from {entry.distribution} {entry.version} failed to import "
                f"{entry.info.plugin_class!r}: {_exc_detail(exc)}"
            ) from exc
        return obj  # type: ignore[no-any-return]

    def resolve(self, spec: object, *, namespace: str = "lightning.pytorch", **options: Any) -> Any:
        """Turn ``"<backend>:<precision>"`` into a ready plugin instance; ``options`` go to its constructor.

        ``namespace`` (``"lightning.pytorch"`` or ``"pytorch_lightning"``) is the Lightning namespace the instance
        is built for (see :func:`precision_base.namespaces.for_namespace`).
        """
        parsed = parse_spec(spec)
        entry = self.entry(parsed.backend)
        check_precision(entry, parsed.precision)
        cls = self.plugin_class(parsed.backend)
        from precision_base.namespaces import for_namespace  # torch-free, imported when a plugin is built

        return for_namespace(cls, namespace)(parsed.precision, **options)

    def _unknown_message(self, backend: str, known: list[str]) -> str:
        installed = ", ".join(known) if known else "none"
        msg = f"no precision plugin is registered for backend {shorten(backend)}. Installed backends: {installed}."
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
        ``distribution`` and ``version`` are labels, listed with "(in-process)"; a label naming a distribution
        this registry discovered is refused with :class:`RegistrationError` (in-process code cannot pose as an
        installed plugin). Registering a name that is already known raises :class:`DuplicateBackendError` unless
        ``replace``; replacing warns with :class:`PrecisionPluginWarning`, naming the old and the new registration.
        """
        if not isinstance(info, PluginInfo):
            raise InvalidPluginInfoError(f"register() needs a precision_base.PluginInfo, got {describe(info)}")
        problems = _info_problems(info)
        if problems:
            raise InvalidPluginInfoError("register() got an invalid PluginInfo: " + "; ".join(problems))
        if not isinstance(distribution, str) or not isinstance(version, str):
            raise RegistrationError(
                f"register(): distribution and version must be strings, got {describe(distribution)} and "
                f"{describe(version)}"
            )
        new = _Candidate(
            backend=info.backend,
            distribution=distribution,
            version=version,
            origin=IN_PROCESS,
            info=info,
            plugin_class=plugin_class,
            loaded=True,
        )
        with self._lock:
            installed = {_canonical_dist(c.distribution): c for cs in self._discover().values() for c in cs}
            claimed = installed.get(_canonical_dist(distribution))
            if claimed is not None:
                raise RegistrationError(
                    f"register(): distribution={distribution!r} names the installed distribution "
                    f"{claimed.distribution} {claimed.version}; an in-process registration cannot pose as an "
                    "installed one. Leave distribution= out (it is listed as <in-process>) or use another label."
                )
            existing = self._candidates(info.backend)
            if existing and not replace:
                raise self._duplicate_error(info.backend, [*existing, new])
            self._in_process[info.backend] = new
            self._classes.pop(info.backend, None)
            self._import_failures.pop(info.backend, None)
        if existing:
            old = ", ".join(f"{c.label}{' (installed)' if c.origin == INSTALLED else ''}" for c in existing)
            warnings.warn(
                f"precision backend {info.backend!r}: {old} is replaced by {new.label} (in-process registration "
                "with replace=True)",
                PrecisionPluginWarning,
                stacklevel=3,
            )

    def unregister(self, backend: str) -> None:
        """Remove an in-process registration (installed plugins cannot be unregistered)."""
        with self._lock:
            if backend not in self._in_process:
                raise UnknownBackendError(f"backend {shorten(str(backend))} was not registered in-process")
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


def check_precision(entry: PluginEntry, precision: str) -> None:
    """Raise unless ``entry``'s backend offers ``precision`` and it is available (the Trainer and Fabric doors and
    :func:`resolve` all ask this).

    Raises:
        UnsupportedPrecisionError: the backend does not offer it (with the closest name it offers, if any).
        PluginRequirementError: an extra precision whose optional extra is not installed (with the install line).
    """
    assert entry.info is not None
    offered = entry.info.all_precisions
    if precision not in offered:
        extras = [name for name in offered if name not in PRECISIONS]  # one of Lightning's five is no misspelling
        close = [] if precision in PRECISIONS else difflib.get_close_matches(precision, extras, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnsupportedPrecisionError(
            f"precision backend {entry.backend!r} ({entry.distribution} {entry.version}) does not offer "
            f"{precision!r}{hint}; it offers " + ", ".join(offered)
        )
    why = dict(entry.unavailable).get(precision)
    if why is not None:
        raise PluginRequirementError(f"{entry.backend}:{precision} is unavailable here: it {why}")


def install_command(distribution: str, extra: str, dist: Optional[metadata.Distribution] = None) -> str:
    """The pip command that adds ``distribution``'s optional ``extra``, for where it was installed from.

    Read from the distribution's ``direct_url.json`` (PEP 610): a local folder (a checkout) gives
    ``pip install "./packages/precision-fsdp[fp8]"`` (relative to the current folder when inside it; ``-e`` when it
    was installed editable), a local wheel or sdist its path, a VCS or URL install ``"name[extra] @ url"``; an
    index install (no direct_url.json) ``pip install "precision-fsdp[fp8]"``.
    """
    import json
    from urllib.parse import unquote, urlparse

    if dist is None:
        from importlib import metadata as md

        with contextlib.suppress(Exception):
            dist = md.distribution(distribution)
    data: Any = None
    if dist is not None:
        with contextlib.suppress(Exception):
            data = json.loads(dist.read_text("direct_url.json") or "null")
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return f'pip install "{distribution}[{extra}]"'
    url: str = data["url"]
    parsed = urlparse(url)
    if parsed.scheme == "file" and "vcs_info" not in data:
        path = unquote(parsed.path)
        with contextlib.suppress(ValueError):
            rel = os.path.relpath(path)
            if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
                path = os.curdir if rel == os.curdir else os.path.join(os.curdir, rel)
        editable = isinstance(data.get("dir_info"), dict) and data["dir_info"].get("editable") is True
        return f'pip install {"-e " if editable else ""}"{path}[{extra}]"'
    vcs = data.get("vcs_info")
    if isinstance(vcs, dict) and isinstance(vcs.get("vcs"), str):
        ref = vcs.get("requested_revision") or vcs.get("commit_id")
        url = f"{vcs['vcs']}+{url}" + (f"@{ref}" if ref else "")
    return f'pip install "{distribution}[{extra}] @ {url}"'


_default = Registry()


def default_registry() -> Registry:
    """The process-wide registry behind the module-level functions."""
    return _default


def list_plugins() -> list[PluginEntry]:
    """Every installed or in-process backend with its status. Runs info modules only (see the module docs)."""
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
        DuplicateBackendError: the backend is declared twice, or by a third party for a name this project publishes.
        PluginLoadError: the plugin's info object or class cannot be imported.
        PluginRequirementError: an installed version does not meet the plugin's requirements.
        ContractVersionError: the plugin was built for another contract version.
        InvalidPluginInfoError: the plugin's info or class breaks the contract (e.g. bases in the wrong order).
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
    "IN_PROCESS",
    "PUBLISHED_DISTRIBUTIONS",
    "STATUSES",
    "PluginEntry",
    "PluginSpec",
    "Registry",
    "check_precision",
    "clear_cache",
    "default_registry",
    "disabled_backends",
    "get_entry",
    "get_plugin_class",
    "install_command",
    "list_plugins",
    "register",
    "registered",
    "resolve",
    "unregister",
]
