"""Disk space for the nox sessions: refuse to start an install that cannot fit, and say what to remove.

A session's virtualenv holds torch (about 1.3 GB for the CPU build, 5.5 GB for a CUDA build) and pip's cache keeps
the wheels too, so on a small disk pip used to die halfway with ``OSError: [Errno 28] No space left on device``.
Each session calls :func:`check` before it installs anything; ``nox -s clean`` calls :func:`clean`. The free space
is read through a ``usage`` function argument (tests pass a fake one); no environment variable fakes it.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from tools.matrix import cpu_torch_index

GiB = 2**30
MiB = 2**20
NEED_LIGHT = 400 * MiB  # a session without torch: a few hundred MB
# Measured peaks of one matrix cell (df's used bytes sampled every second, 2026-12-06, README's matrix line): the
# CPU build of torch 2.13 from a local wheel 1.09 GB; torch 2.15, a CUDA build from the package index, 8.44 GB
# (the venv's 5.5 GB and the downloaded nvidia-* wheels beside it while pip installs them).
NEED_CPU_TORCH = int(1.5 * GiB)  # the CPU build of torch (venv + wheel)
NEED_CUDA_TORCH = int(8.5 * GiB)  # a CUDA build of torch from the package index (PyPI's torch on Linux)

Run = Callable[..., "subprocess.CompletedProcess[Any]"]


@dataclass(frozen=True)
class Usage:
    """What :func:`shutil.disk_usage` returns, reduced to what we need (``free`` is what a non-root user may use)."""

    total: int
    free: int


def disk_usage(path: Path) -> Usage:
    found = shutil.disk_usage(path)
    return Usage(found.total, found.free)


def _local_path(entry: str) -> str:
    return unquote(urlparse(entry).path) if entry.startswith("file:") else entry


def torch_need(spec: str, env: Mapping[str, str], find_links: Sequence[str]) -> int:
    """Bytes a session needs to install torch matching ``spec`` (a pip specifier like ``==2.13.*``, ``""`` for any).

    The CPU build when PyTorch's CPU index is configured, when a find-links folder holds a matching ``+cpu`` wheel
    (pip prefers it there), or off Linux (PyPI's torch is a CUDA build only on Linux); else the CUDA build.
    """
    if cpu_torch_index(dict(env)) or sys.platform != "linux":
        return NEED_CPU_TORCH
    wanted = SpecifierSet(spec)
    for folder in map(Path, map(_local_path, find_links)):
        for wheel in folder.glob("torch-*+cpu-*.whl") if folder.is_dir() else ():
            try:
                version = Version(wheel.name.split("-")[1])
            except InvalidVersion:
                continue
            if wanted.contains(version, prereleases=True):
                return NEED_CPU_TORCH
    return NEED_CUDA_TORCH


def pip_find_links(python: str = sys.executable) -> list[str]:
    """pip's configured find-links folders: ``PIP_FIND_LINKS`` and ``pip config list``'s ``*.find-links`` lines.

    Values may hold several whitespace-separated entries; ``file://`` URLs become paths. Where pip is missing or
    fails, only ``PIP_FIND_LINKS`` counts.
    """
    entries = os.environ.get("PIP_FIND_LINKS", "").split()
    try:
        listed = subprocess.run(
            [python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        listed = ""
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith(".find-links"):
            try:
                value = str(ast.literal_eval(value.strip()))
            except (ValueError, SyntaxError):
                pass
            entries += value.split()
    return list(dict.fromkeys(_local_path(e) for e in entries))


def cache_dirs(env: Mapping[str, str] = os.environ) -> dict[str, Path]:
    """pip's and uv's cache folders: ``PIP_CACHE_DIR``/``UV_CACHE_DIR``, else under ``$XDG_CACHE_HOME`` or
    ``~/.cache`` (the Linux rule; macOS's ``~/Library/Caches/pip`` is left out)."""
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return {
        tool: Path(env[var]).expanduser() if env.get(var) else base / tool
        for tool, var in (("pip", "PIP_CACHE_DIR"), ("uv", "UV_CACHE_DIR"))
    }


def size_of(path: Path) -> int:
    """Bytes in the files under ``path`` (symlinks counted as links, never followed; unreadable parts skipped)."""
    try:
        if not path.is_dir() or path.is_symlink():
            return path.lstat().st_size
    except OSError:
        return 0
    total = 0
    for folder, dirs, files in os.walk(path):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def removable(root: Path, env: Mapping[str, str] = os.environ) -> list[tuple[str, int]]:
    """What could be removed to make room, biggest first: each ``.nox`` venv, ``build/``, pip's and uv's caches."""
    nox = root / ".nox"
    venvs = sorted(nox.iterdir()) if nox.is_dir() else []
    found = [(f".nox/{v.name}", size_of(v)) for v in venvs if v.is_dir()]
    found += [("build/", size_of(root / "build"))]
    found += [(f"{tool} cache ({path})", size_of(path)) for tool, path in cache_dirs(env).items()]
    return sorted((entry for entry in found if entry[1] > 0), key=lambda entry: -entry[1])


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def shortage(
    need: int, places: Sequence[Path], usage: Callable[[Path], Usage] = disk_usage
) -> tuple[int, int, Path] | None:
    """``(need, free, where)`` for the first filesystem among ``places`` (the session's venv folder, then the caches;
    they may not exist yet: the nearest existing parent is read) short of ``need``, ``None`` when there is room. One
    figure per filesystem, so the venv and a cache on the same disk are not counted twice."""
    seen: set[int] = set()
    for place in map(_existing, places):
        device = place.stat().st_dev
        if device not in seen:
            seen.add(device)
            free = usage(place).free
            if free < need:
                return need, free, place
    return None


def fmt(size: int) -> str:
    """``1.5 GB`` from 1 GiB up (GiB, written GB as pip and df users read it), else ``350 MB``."""
    return f"{size / GiB:.1f} GB" if size >= GiB else f"{size / MiB:.0f} MB"


def guard_message(session: str, need: int, free: int, where: Path, candidates: list[tuple[str, int]]) -> str:
    """One line: what the session needs, what is free, and the biggest things nox made that could go."""
    head = f"{session}: needs {fmt(need)} free on {where}, {fmt(free)} free; nothing was installed."
    if not candidates:
        nothing = "Nothing of nox's to remove here (.nox, build/, pip's and uv's caches are empty)"
        return f"{head} {nothing}; free space elsewhere"
    biggest = ", ".join(f"{label} {fmt(size)}" for label, size in candidates[:4])
    return (
        f"{head} Biggest to remove: {biggest}; `nox -s clean` removes .nox venvs and build/, "
        "`nox -s clean -- --caches` also pip's and uv's caches"
    )


def check(
    session: str,
    need: int,
    places: Sequence[Path],
    root: Path,
    env: Mapping[str, str] = os.environ,
    usage: Callable[[Path], Usage] = disk_usage,
) -> str | None:
    """``None`` when every filesystem the session writes to has ``need`` free, else the line to stop it with."""
    short = shortage(need, places, usage)
    if short is None:
        return None
    return guard_message(session, short[0], short[1], short[2], removable(root, env))


def describe_caches(env: Mapping[str, str] = os.environ) -> list[str]:
    """One line per cache: ``pip cache <path>: 2.9 GB`` or ``... : empty``."""
    sizes = {tool: (path, size_of(path)) for tool, path in cache_dirs(env).items()}
    return [f"{tool} cache {path}: {fmt(size) if size else 'empty'}" for tool, (path, size) in sizes.items()]


def purge_caches(env: Mapping[str, str] = os.environ, run: Run = subprocess.run) -> list[str]:
    """Empty pip's and uv's caches with their own commands (``pip cache purge``, ``uv cache clean`` where uv is
    installed); where that is missing or fails, remove the folder. One line per cache: how much was freed."""
    commands = {
        "pip": ("PIP_CACHE_DIR", [sys.executable, "-m", "pip", "cache", "purge"]),
        "uv": ("UV_CACHE_DIR", ["uv", "cache", "clean"] if shutil.which("uv") else []),
    }
    lines = []
    for tool, path in cache_dirs(env).items():
        variable, command = commands[tool]
        before, how = size_of(path), " ".join([tool, *command[-2:]])
        ok = False
        if before and command:
            try:
                ok = run(command, env={**os.environ, **env, variable: str(path)}, capture_output=True).returncode == 0
            except OSError:
                pass
        if before and not ok:
            shutil.rmtree(path, ignore_errors=True)
            how = "removed the folder"
        lines.append(f"{tool} cache {path}: " + (f"freed {fmt(before - size_of(path))} ({how})" if before else "empty"))
    return lines


def clean(root: Path, caches: bool, env: Mapping[str, str] = os.environ, run: Run = subprocess.run) -> list[str]:
    """Remove every venv in ``.nox`` and ``build/`` (each reported with the bytes freed), then empty the caches
    (``caches``) or say how big they are. The venv this interpreter runs from is kept."""
    nox, running, lines = root / ".nox", Path(sys.prefix).resolve(), []
    for label, folder in [*((f".nox/{v.name}", v) for v in sorted(nox.glob("*"))), ("build/", root / "build")]:
        if not folder.is_dir():
            continue
        if running.is_relative_to(folder.resolve()):
            lines.append(f"kept {label} (this session runs from it)")
            continue
        before = size_of(folder)
        shutil.rmtree(folder, ignore_errors=True)
        lines.append(f"removed {label} ({fmt(before - size_of(folder))})")
    lines = lines or ["nothing to remove in .nox and build/"]
    return lines + (purge_caches(env, run) if caches else describe_caches(env))
