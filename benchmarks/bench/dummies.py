"""Dummy plugin distributions for the discovery benchmark: real wheels, installed into real virtual environments.

Each dummy distribution ``precision-bench-dummy-NNN`` registers backend ``dummyNNN`` in the
``precision_base.plugins`` group with a :class:`precision_base.PluginInfo` that declares a requirement
(``torch>=2.0``, as real plugins do), so ``precision-plugins list`` does for it the same work it does for a real
plugin. The wheels are written directly with :mod:`zipfile` (no build backend needed, so this also runs in
environments without hatchling) and installed with pip.

Environments are cached under a directory keyed by the generator's version and the interpreter, so reruns
skip the building. Each environment is a fresh venv whose own ``site-packages`` holds only the dummies; a
``.pth`` file adds the running interpreter's ``site-packages`` after it (``site.addsitedir``, so that
environment's own ``.pth`` files, editable installs included, still apply) to provide precision-base,
precision-fsdp, torch and Lightning.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

GENERATOR_VERSION = 2
DIST_PREFIX = "precision-bench-dummy"


def dist_name(i: int) -> str:
    return f"{DIST_PREFIX}-{i:03d}"


def backend_name(i: int) -> str:
    return f"dummy{i:03d}"


def module_name(i: int) -> str:
    return dist_name(i).replace("-", "_")


def wheel_files(i: int) -> dict[str, str]:
    """Path inside the wheel -> text, for dummy number ``i``."""
    dist, module, backend = dist_name(i), module_name(i), backend_name(i)
    info = f"{dist.replace('-', '_')}-1.0.0.dist-info"
    return {
        f"{module}/__init__.py": "",
        f"{module}/_info.py": (
            "from precision_base import PluginInfo\n\n"
            f"INFO = PluginInfo(backend={backend!r}, precisions=('32-true',), "
            f"plugin_class='{module}.plugin:DummyPrecision', requires=('torch>=2.0',), "
            "summary='benchmark dummy')\n"
        ),
        f"{module}/plugin.py": (
            "from precision_base import PrecisionPlugin\n\n\n"
            "class DummyPrecision(PrecisionPlugin):\n"
            f"    backend = {backend!r}\n"
            "    precisions = ('32-true',)\n\n"
            "    def __init__(self, precision, **options):\n"
            "        self.precision = precision\n"
        ),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0.0\nRequires-Python: >=3.10\n"
            "Requires-Dist: precision-base\n"
        ),
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: precision-plugins-bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"{info}/entry_points.txt": f"[precision_base.plugins]\n{backend} = {module}._info:INFO\n",
    }


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def write_wheel(i: int, out: Path) -> Path:
    """Write the wheel of dummy ``i`` into ``out``; return its path."""
    files = {k: v.encode() for k, v in wheel_files(i).items()}
    info = next(k.split("/")[0] for k in files if k.endswith("/WHEEL"))
    record_path = f"{info}/RECORD"
    record = "\n".join([*(_record_line(p, d) for p, d in files.items()), f"{record_path},,"]) + "\n"
    wheel = out / f"{dist_name(i).replace('-', '_')}-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(record_path, record)
    return wheel


def parent_site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def venv_site_packages(env: Path) -> Path:
    (sp,) = (env / "lib").glob("python*/site-packages")
    return sp


def cache_root(base: Path) -> Path:
    tag = f"g{GENERATOR_VERSION}-py{sys.version_info.major}{sys.version_info.minor}"
    key = hashlib.sha256(str(parent_site_packages()).encode()).hexdigest()[:10]
    return base / f"discovery-{tag}-{key}"


def make_env(base: Path, count: int) -> Path:
    """A venv with ``count`` dummy plugin distributions installed by pip; cached. Returns its python."""
    root = cache_root(base)
    env = root / f"venv-{count}"
    python = env / "bin" / "python"
    marker = env / ".complete"
    if marker.exists() and python.exists():
        return python
    shutil.rmtree(env, ignore_errors=True)
    venv.EnvBuilder(with_pip=False, clear=True, symlinks=True).create(env)
    site = venv_site_packages(env)
    (site / "_precision_bench_parent.pth").write_text(
        f"import site; site.addsitedir({str(parent_site_packages())!r})\n"
    )
    if count:
        wheels_dir = root / "wheels"
        wheels_dir.mkdir(parents=True, exist_ok=True)
        wheels = [write_wheel(i, wheels_dir) for i in range(count)]
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-index",
                "--disable-pip-version-check",
                "--target",
                str(site),
                *map(str, wheels),
            ],
            check=True,
            timeout=600,
        )
    marker.write_text("ok\n")
    return python
