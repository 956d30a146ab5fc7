"""A backend's status, as a function of what discovery found ([`precision_base.registry.discovery`][]).

[`entry_before_info`][precision_base.registry.statuses.entry_before_info] answers from metadata alone (disabled,
conflict, damaged metadata, unofficial); only when it has no answer is the info module run, and
[`entry_after_info`][precision_base.registry.statuses.entry_after_info] answers from the result (broken,
incompatible contract, requirement missing, ok). Both only read the candidates (and, for requirements, the installed
versions): they change nothing, so the registry decides when plugin code runs.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from precision_base.__about__ import __version__
from precision_base.contract import CONTRACT_VERSION, PluginInfo
from precision_base.errors import (
    ContractVersionError,
    DuplicateBackendError,
    PluginRequirementError,
    PrecisionPluginError,
    UnsupportedPrecisionError,
    shorten,
)
from precision_base.registry.discovery import DISABLE_ENV_VAR, IN_PROCESS, INSTALLED, Candidate, canonical_dist
from precision_base.registry.requirements import installed_version, unmet_requirements
from precision_base.spec import PRECISIONS

if TYPE_CHECKING:
    from importlib import metadata


def published_distributions() -> dict[str, str]:
    """Backends this project publishes, and the distribution that provides each: only that distribution is ``ok``.

    Read from ``published.json`` beside this module, which every build of precision-base writes from the
    repository's package list (``[tool.precision-plugins]`` in its ``pyproject.toml``; ``hatch_build.py``), so no
    backend is named in this code. Empty where the file is absent (precision-base run from a source tree that was
    never built): then no install line is offered and no distribution is refused as unofficial.
    """
    return dict(_published_file())


@functools.cache
def _published_file() -> tuple[tuple[str, str], ...]:
    path = Path(__file__).with_name("published.json")
    return tuple(json.loads(path.read_text(encoding="utf-8")).items()) if path.is_file() else ()


STATUSES = ("ok", "disabled", "conflict", "broken", "unofficial", "incompatible contract", "requirement missing")
"""Every status a [`PluginEntry`][precision_base.registry.statuses.PluginEntry] can have."""


@dataclass(frozen=True)
class PluginEntry:
    """One registered backend as discovery sees it.

    ``status`` is one of [`STATUSES`][precision_base.registry.statuses.STATUSES]; ``reason`` explains any status but
    ``"ok"``. ``origin`` is ``"installed"`` (found through an entry point) or ``"<in-process>"`` (registered by code
    in this process: ``distribution`` and ``version`` are then only the labels that code gave).
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


def _base_fields(backend: str, first: Candidate) -> dict[str, Any]:
    return dict(
        backend=backend,
        distribution=first.distribution,
        version=first.version,
        origin=first.origin,
        entry_point=first.entry_point.value if first.entry_point is not None else "",
    )


def entry_before_info(backend: str, candidates: list[Candidate], disabled: frozenset[str]) -> Optional[PluginEntry]:
    """The entry when metadata alone decides it (no plugin code may run then); ``None`` when the info module must."""
    first = candidates[0]
    base = _base_fields(backend, first)
    if backend in disabled:  # before anything of the plugin runs
        if len(candidates) > 1:
            base.update(distribution=", ".join(f"{c.distribution} {c.version}" for c in candidates), version="-")
        info = first.info if first.loaded or first.origin == IN_PROCESS else None
        return PluginEntry(**base, status="disabled", reason=f"listed in {DISABLE_ENV_VAR}", info=info)
    if len(candidates) > 1:
        err = duplicate_error(backend, candidates)
        dists = ", ".join(f"{c.distribution} {c.version}" for c in candidates)
        return PluginEntry(
            **{**base, "distribution": dists, "version": "-"}, status="conflict", reason=str(err), error=err
        )
    if first.problem is not None:
        status = "conflict" if isinstance(first.problem, DuplicateBackendError) else "broken"
        return PluginEntry(**base, status=status, reason=str(first.problem), error=first.problem)
    unofficial = _unofficial_error(first)
    if unofficial is not None:
        return PluginEntry(**base, status="unofficial", reason=str(unofficial), info=first.info, error=unofficial)
    return None


def entry_after_info(
    backend: str,
    first: Candidate,
    *,
    pending: Optional[PrecisionPluginError] = None,
    class_error: Optional[PrecisionPluginError] = None,
) -> PluginEntry:
    """The entry of a single, official candidate whose info module has run. ``pending``: the info module could not
    be waited for (an import cycle); ``class_error``: importing or checking its plugin class failed earlier."""
    base = _base_fields(backend, first)
    error = pending or first.error or class_error
    if error is not None:
        return PluginEntry(**base, status="broken", reason=str(error), info=first.info, error=error)
    info = first.info
    assert info is not None
    if info.contract_version != CONTRACT_VERSION:
        err2 = _contract_error(first, info)
        return PluginEntry(**base, status="incompatible contract", reason=str(err2), info=info, error=err2)
    unmet = unmet_requirements(_requirements(first, info))
    if unmet:
        err3 = PluginRequirementError(_requirement_message(first, unmet))
        return PluginEntry(**base, status="requirement missing", reason="; ".join(unmet), info=info, error=err3)
    return PluginEntry(**base, status="ok", info=info, unavailable=_unavailable(first, info))


def _declared_requirements(c: Candidate) -> list[str]:
    if c.dist is not None:
        with contextlib.suppress(Exception):  # unreadable metadata: nothing declared there
            return list(c.dist.requires or ())
    return []


def _unavailable(c: Candidate, info: PluginInfo) -> tuple[tuple[str, str], ...]:
    """``(precision, why)`` for each of ``info.precision_extras`` whose extra's requirements are unmet."""
    if not info.precision_extras:
        return ()
    declared = _declared_requirements(c)
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


def _requirements(c: Candidate, info: PluginInfo) -> tuple[str, ...]:
    """What the plugin needs: its distribution's ``Requires-Dist`` (no extras) plus ``PluginInfo.requires``."""
    if c.requires is None:  # read once per candidate (a cache on the candidate, not a status)
        declared = _declared_requirements(c)
        c.requires = (*declared, *(r for r in info.requires if r not in declared))
    return c.requires


def _unofficial_error(c: Candidate) -> Optional[PrecisionPluginError]:
    publisher = published_distributions().get(c.backend)
    if publisher is None or c.origin == IN_PROCESS or canonical_dist(c.distribution) == publisher:
        return None
    return DuplicateBackendError(
        f"precision backend {c.backend!r} is published by {publisher}, but this one comes from the third-party "
        f"distribution {c.label}; it is not used. Uninstall {c.distribution} and install {publisher} "
        f"(or disable the name with {DISABLE_ENV_VAR})."
    )


def duplicate_error(backend: str, candidates: list[Candidate]) -> DuplicateBackendError:
    """The error for ``backend`` registered by more than one candidate."""
    dists = " and ".join(c.label for c in candidates)
    return DuplicateBackendError(
        f"precision backend {backend!r} is registered by more than one distribution: {dists}. "
        f"Uninstall all but one of them (or disable the name with {DISABLE_ENV_VAR})."
    )


def _contract_error(candidate: Candidate, info: PluginInfo) -> ContractVersionError:
    return ContractVersionError(
        f"precision plugin {candidate.backend!r} from {candidate.label} was built "
        f"for precision-base contract version {info.contract_version}, but the installed precision-base "
        f"{__version__} implements contract version {CONTRACT_VERSION}. Install a release of "
        f"{candidate.distribution} built for contract {CONTRACT_VERSION}."
    )


def _requirement_message(candidate: Candidate, unmet: list[str]) -> str:
    return f"precision plugin {candidate.backend!r} from {candidate.label} cannot load: it " + "; it ".join(unmet) + "."


def check_precision(entry: PluginEntry, precision: str) -> None:
    """Raise unless ``entry``'s backend offers ``precision`` and it is available (every resolve asks this, at both
    doors).

    Raises:
        UnsupportedPrecisionError: the backend does not offer it (with the closest name it offers, if any).
        PluginRequirementError: an extra precision whose optional extra is not installed (with the install line),
            or is installed but broken (the import error and the versions:
            [`broken_extra`][precision_base.registry.statuses.broken_extra]).
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
    broken = broken_extra(entry, precision)
    if broken is not None:
        raise PluginRequirementError(f"{entry.backend}:{precision} cannot be used here: {broken}")


def broken_extra(entry: PluginEntry, precision: str) -> Optional[str]:
    """Why the installed extra behind ``precision`` cannot be used here: one of its ``extra_imports`` modules fails
    to import (the import error, and the installed versions of the extra's and the distribution's requirements).
    ``None`` when it imports, when ``precision`` needs no extra, or when the extra is not installed (``unavailable``
    says that, with the install line)."""
    info = entry.info
    if info is None or precision in dict(entry.unavailable):
        return None
    extra = dict(info.precision_extras).get(precision)
    for module in dict(info.extra_imports).get(extra or "", ()):
        error = import_error(module)
        if error is not None:
            return (
                f"the {extra!r} extra of {entry.distribution} is installed ({_versions(entry.distribution, extra)}), "
                f"but `import {module}` fails: {error}. Installing the extra again changes nothing while these "
                "versions stay: install releases of them that work together"
            )
    return None


def broken_extras(entry: PluginEntry) -> tuple[tuple[str, str], ...]:
    """``(precision, why)`` for each extra precision of ``entry`` that is installed but broken
    ([`broken_extra`][precision_base.registry.statuses.broken_extra]); imports the extras' modules (``list``,
    ``doctor``)."""
    return tuple((p, why) for p in entry.extra_precisions if (why := broken_extra(entry, p)) is not None)


@functools.cache
def import_error(module: str) -> Optional[str]:
    """``"ExceptionType: message"`` when importing ``module`` fails, else ``None`` (cached per process;
    [`precision_base.clear_cache`][] forgets it)."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # a broken install raises anything (ImportError, AttributeError, OSError, ...)
        return f"{type(exc).__name__}: {exc}"
    return None


def _versions(distribution: str, extra: Optional[str]) -> str:
    """``"torchao 0.18.0, torch 2.13.0+cpu, ..."``: the installed versions of the requirements of ``extra`` of
    ``distribution``, then of the distribution's own."""
    from importlib import metadata as md

    from packaging.requirements import InvalidRequirement, Requirement

    requires: list[str] = []
    with contextlib.suppress(Exception):
        requires = list(md.requires(distribution) or ())
    of_extra, own = [], []
    for text in requires:
        with contextlib.suppress(InvalidRequirement):
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                own.append(req.name)
            elif extra and req.marker.evaluate({"extra": extra}):
                of_extra.append(req.name)
    shown = [f"{name} {version}" for name in dict.fromkeys(of_extra + own) if (version := installed_version(name))]
    return ", ".join(shown) or "versions unknown"


def install_command(distribution: str, extra: str, dist: Optional[metadata.Distribution] = None) -> str:
    """The pip command that adds ``distribution``'s optional ``extra``, for where it was installed from.

    Read from the distribution's ``direct_url.json`` (PEP 610): a local folder (a checkout) gives
    ``pip install "./packages/precision-fsdp[fp8]"`` (relative to the current folder when inside it; ``-e`` when it
    was installed editable), a local wheel or sdist its path, a VCS or URL install ``"name[extra] @ url"``; an
    index install (no direct_url.json) ``pip install "precision-fsdp[fp8]"``.
    """
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


def unknown_backend_message(backend: str, known: list[str]) -> str:
    """What [`UnknownBackendError`][precision_base.UnknownBackendError] says: what is installed, the closest name, and
    what to install."""
    installed = ", ".join(known) if known else "none"
    msg = f"no precision plugin is registered for backend {shorten(backend)}. Installed backends: {installed}."
    published = published_distributions()
    close = difflib.get_close_matches(backend, sorted(set(known) | set(published)), n=1)
    if close and close[0] != backend:
        msg += f" Did you mean {close[0]!r}?"
    if backend in published:
        msg += f" To use it, run: pip install {published[backend]}"
    return msg


__all__ = [
    "STATUSES",
    "PluginEntry",
    "check_precision",
    "duplicate_error",
    "entry_after_info",
    "entry_before_info",
    "install_command",
    "published_distributions",
    "unknown_backend_message",
]
