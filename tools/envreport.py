"""Print (or write) the versions actually installed in the running environment, as JSON.

Run inside a nox session's virtualenv after installing: ``python -m tools.envreport -o report.json torch lightning``
(the noxfile names the distributions: the package list's and the backends'). Standard library only, so it runs on
every Python of the matrix and imports neither torch nor Lightning.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import re
import sys
from importlib import metadata
from pathlib import Path

# CPU flags that decide what a cell can run: DeepSpeed's CPU accelerator takes fp16 only where oneDNN has native fp16
# (AVX512-FP16 or AMX-FP16); bf16 is native with AVX512-BF16 or AMX-BF16 (emulated, slower, elsewhere).
CPU_FLAGS = ("avx512_fp16", "amx_fp16", "avx512_bf16", "amx_bf16")


def installed(names: list[str]) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def torch_build() -> str | None:
    """torch's own version string, build tag included (``2.4.1+cu121``, ``2.13.0+cpu``), read without importing torch.

    The distribution's metadata version of a registry CUDA build has no tag (``2.4.1``); ``torch/version.py`` has.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    version_py = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", version_py.read_text(encoding="utf-8"), re.M)
    return found.group(1) if found else None


def cpu_flags() -> dict[str, bool] | None:
    """Which of :data:`CPU_FLAGS` this machine's CPU has (Linux ``/proc/cpuinfo``; ``None`` elsewhere)."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return None
    flags = set()
    for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
            break
    return {flag: flag in flags for flag in CPU_FLAGS}


def report(names: list[str]) -> dict[str, object]:
    return {
        "python": platform.python_version(),
        "platform": sys.platform,
        "versions": installed(names),
        "torch_build": torch_build(),
        "cpu_flags": cpu_flags(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("names", nargs="+", help="distributions whose installed version to report")
    args = parser.parse_args(argv)
    text = json.dumps(report(args.names), indent=2, sort_keys=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
