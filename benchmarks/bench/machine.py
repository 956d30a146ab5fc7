"""What machine and software a result was measured on. Reads metadata only: imports no torch."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

DISTRIBUTIONS = (
    "torch",
    "lightning",
    "deepspeed",
    "precision-base",
    "precision-fsdp",
    "precision-deepspeed",
    "matplotlib",
    "psutil",
)


def cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (or ``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> list[str]:
    """The CPU feature flags that decide low-precision speed on CPU (AVX-512 BF16/FP16, AMX)."""
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_tile", "fma", "f16c")
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in wanted if f in have]
    except OSError:
        pass
    return []


def memory_total_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def git_commit() -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    """Everything recorded with each result: CPU, cores, memory, OS, versions, commit, load, time, command."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "memory_total_bytes": memory_total_bytes(),
        "platform": platform.platform(),
        "versions": versions(),
        "git_commit": git_commit(),
        "load_average_1_5_15": load_average(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }


def gpu_info() -> dict[str, Any]:
    """CUDA device facts (imports torch; only for the GPU script)."""
    import torch

    if not torch.cuda.is_available():
        return {"cuda": False}
    props = torch.cuda.get_device_properties(0)
    return {
        "cuda": True,
        "device_count": torch.cuda.device_count(),
        "name": props.name,
        "memory_bytes": props.total_memory,
        "capability": f"{props.major}.{props.minor}",
        "cuda_version": torch.version.cuda,
        "bf16_supported": torch.cuda.is_bf16_supported(),
    }
