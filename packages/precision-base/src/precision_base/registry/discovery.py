"""Discovery: what the ``precision_base.plugins`` entry points say, read from distribution metadata only.

[`discover`][precision_base.registry.discovery.discover] reads every distribution's entry points, ``Name`` and
``Version`` and returns one
[`Candidate`][precision_base.registry.discovery.Candidate] per (distribution, backend); it runs no plugin code.
[`InfoLoader`][precision_base.registry.discovery.InfoLoader] then runs a candidate's
info module (through [`precision_base.registry.loading.load_object`][]), once however many threads ask, with no
registry lock held while it runs. What a candidate's status is follows from what was found here
([`precision_base.registry.statuses`][]); [`precision_base.registry.Registry`][] keeps the tables.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from precision_base.contract import PluginInfo
from precision_base.errors import (
    DuplicateBackendError,
    InvalidPluginInfoError,
    PluginLoadError,
    PrecisionPluginError,
    RegistrationError,
    describe,
)

if TYPE_CHECKING:
    from importlib import metadata

ENTRY_POINT_GROUP = "precision_base.plugins"
DISABLE_ENV_VAR = "PRECISION_PLUGINS_DISABLE"

IN_PROCESS = "<in-process>"
INSTALLED = "installed"


@dataclass(eq=False)
class Candidate:
    """One backend one distribution declares (or one in-process registration), and what loading it found."""

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


def canonical_dist(name: str) -> str:
    """A distribution name normalised as PEP 503 does (``Precision_FSDP`` -> ``precision-fsdp``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata_field(dist: metadata.Distribution, name: str) -> Optional[str]:
    try:
        value = dist.metadata.get(name)  # type: ignore[attr-defined]
    except Exception:  # unreadable METADATA: reported by the caller as a missing field
        return None
    return value if isinstance(value, str) and value.strip() else None


def discover(group: str = ENTRY_POINT_GROUP) -> dict[str, list[Candidate]]:
    """Every backend declared in entry-point ``group`` by an installed distribution: metadata only, no plugin code."""
    from importlib import metadata  # imported on first discovery: `import precision_base` stays cheap

    found: dict[str, list[Candidate]] = {}
    seen: set[str] = set()
    for dist in metadata.distributions():
        for candidate in _candidates_of(dist, seen, group):
            found.setdefault(candidate.backend, []).append(candidate)
    return found


def _candidates_of(dist: metadata.Distribution, seen: set[str], group: str) -> list[Candidate]:
    try:
        eps = [ep for ep in dist.entry_points if ep.group == group]
    except Exception:  # unreadable entry_points.txt: it cannot name a backend, so there is nothing to list
        return []
    if not eps:
        return []
    name = _metadata_field(dist, "Name")
    version = _metadata_field(dist, "Version")
    key = canonical_dist(name) if name else f"<unnamed at {getattr(dist, '_path', '?')}>"
    if key in seen:
        return []  # the same distribution twice on sys.path: Python imports from the first, so do we
    seen.add(key)
    by_name: dict[str, list[metadata.EntryPoint]] = {}
    for ep in eps:
        by_name.setdefault(ep.name, []).append(ep)
    out = []
    for backend, same in by_name.items():
        c = Candidate(
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
                f"group {group!r} ({values}); the distribution must declare it once. Reinstall a fixed "
                f"release (or disable the name with {DISABLE_ENV_VAR})."
            )
        out.append(c)
    return out


def in_process_candidate(
    info: object, plugin_class: Optional[type], distribution: object, version: object
) -> Candidate:
    """The candidate of an in-process registration ([`precision_base.registry.Registry.register`][]), checked."""
    if not isinstance(info, PluginInfo):
        raise InvalidPluginInfoError(f"register() needs a precision_base.PluginInfo, got {describe(info)}")
    problems = info_problems(info)
    if problems:
        raise InvalidPluginInfoError("register() got an invalid PluginInfo: " + "; ".join(problems))
    if not isinstance(distribution, str) or not isinstance(version, str):
        raise RegistrationError(
            f"register(): distribution and version must be strings, got {describe(distribution)} and "
            f"{describe(version)}"
        )
    return Candidate(
        backend=info.backend,
        distribution=distribution,
        version=version,
        origin=IN_PROCESS,
        info=info,
        plugin_class=plugin_class,
        loaded=True,
    )


def info_problems(info: object) -> list[str]:
    """Schema problems of an object that claims to be a PluginInfo (it may have skipped ``__post_init__``)."""
    from precision_base.contract import _info_problems as schema_problems

    try:
        return schema_problems(info)  # type: ignore[arg-type]
    except Exception as exc:  # a field missing altogether
        return [f"{type(exc).__name__}: {exc}"]


def exc_detail(exc: BaseException) -> str:
    """``"TypeName: message"`` of a plugin's exception, bounded, even when its ``__str__`` raises."""
    try:
        text = str(exc)
    except Exception:
        text = "<the exception's message could not be read>"
    text = str.__str__(text) if isinstance(text, str) else ""
    if isinstance(exc, SystemExit):
        text = f"the module called sys.exit({text})"
    return f"{type(exc).__name__}: {text if len(text) <= 500 else text[:480] + '...'}"


def _run_info_module(candidate: Candidate) -> None:
    """Run ``candidate``'s info module and validate its object; no registry lock is held here."""
    from precision_base.registry.loading import load_object

    ep = candidate.entry_point
    assert ep is not None
    where = f"precision plugin {candidate.backend!r} from {candidate.label}"
    try:
        info = load_object(ep.module, ep.attr)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: one plugin must not take discovery (or the process) down
        err = PluginLoadError(f"{where} failed to load its info object {ep.value!r}: {exc_detail(exc)}")
        err.__cause__ = exc
        candidate.error = err
        return
    if not isinstance(info, PluginInfo):
        candidate.error = InvalidPluginInfoError(
            f"{where}: entry point {ep.value!r} must name a precision_base.PluginInfo, found {describe(info)}"
        )
        return
    problems = info_problems(info)
    if problems:
        candidate.error = InvalidPluginInfoError(f"{where}: invalid PluginInfo {ep.value!r}: " + "; ".join(problems))
    elif info.backend != ep.name:
        candidate.error = InvalidPluginInfoError(
            f"precision plugin from {candidate.label}: entry point is named {ep.name!r} but its PluginInfo "
            f"declares backend {info.backend!r}; the two must match"
        )
    else:
        candidate.info = info


class InfoLoader:
    """Runs each candidate's info module once, however many threads ask; no lock is held while it runs.

    A thread that asks for a candidate another thread is loading waits for it. That wait would never end when the
    loading thread is (through its info module) itself waiting, directly or through other loading threads, for the
    asking thread: an info module asking for itself (re-entry on one thread), or two info modules asking for each
    other from two threads. Such a request gets a [`PluginLoadError`][precision_base.errors.PluginLoadError] instead:
    the same wait-for cycle check
    Python's own import lock makes, which a plain re-entrancy guard (one thread only) would not cover.
    """

    def __init__(self) -> None:
        self._loaded = threading.Condition(threading.Lock())
        self._waiting: dict[int, Candidate] = {}  # thread id -> the candidate that thread waits for

    def ensure(self, c: Candidate) -> Optional[PrecisionPluginError]:
        """Run ``c``'s info module unless done; returns an error only for a request that would wait forever."""
        if c.loaded or c.entry_point is None:
            return None
        me = threading.get_ident()
        with self._loaded:
            while not c.loaded:
                if c.loader is None:
                    c.loader = me
                    break
                if self._waits_for_me(c, me):
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

    def _waits_for_me(self, c: Candidate, me: int) -> bool:
        """Whether ``c``'s loader is ``me``, or waits (through a chain of loading threads) for what ``me`` loads."""
        owner = c.loader
        for _ in range(len(self._waiting) + 1):
            if owner == me:
                return True
            waited = self._waiting.get(owner) if owner is not None else None
            if waited is None:
                return False
            owner = waited.loader
        return owner == me


__all__ = [
    "DISABLE_ENV_VAR",
    "ENTRY_POINT_GROUP",
    "IN_PROCESS",
    "INSTALLED",
    "Candidate",
    "InfoLoader",
    "canonical_dist",
    "in_process_candidate",
    "disabled_backends",
    "discover",
    "exc_detail",
    "info_problems",
]
