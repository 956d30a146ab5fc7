"""Real wheels of small plugin distributions, and fresh virtual environments to install them into.

Used where discovery must run through real installed metadata (entry points, versions, requirements): the
tests of precision-base and the discovery benchmark. Imports no torch.

* :func:`write_project`: a plugin project (``pyproject.toml`` + ``src/<module>/{_info,plugin}.py``) registering
  one backend in the ``precision_base.plugins`` group; its plugin class is pure Python (no torch needed).
* :func:`build_wheels`: wheels of projects, built by hatchling in a build environment of its own (the environment
  under test may hold old build tools, e.g. a lowest-versions matrix cell).
* :func:`make_venv`: a fresh venv with wheels installed; optionally seeing this interpreter's packages too.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import venv
from collections.abc import Sequence
from pathlib import Path

__all__ = ["LITE_PLUGIN", "build_wheels", "make_venv", "write_project"]

LITE_PLUGIN = '''
from precision_base import DtypeTable, PrecisionPlugin


class LitePrecision(PrecisionPlugin):
    """Pure-Python plugin class: resolvable without torch (registry tests and benchmarks only)."""

    backend = "{backend}"
    precisions = ("32-true",)

    def __init__(self, precision, **options):
        self.precision = precision
        self.options = options

    def dtypes(self):
        return DtypeTable(parameters="float32", compute="float32", reduction="float32", buffers="float32",
                          inputs="float32", init="float32")
'''
"""Source of ``plugin.py`` in a written project; ``{backend}`` is filled in."""


def write_project(
    root: Path,
    dist: str,
    backend: str,
    *,
    version: str = "1.2.3",
    info_extra: str = "",
    info_prelude: str = "",
    plugin_code: str = "",
) -> Path:
    """Write a plugin project named ``dist`` under ``root`` registering ``backend``; return its folder.

    Args:
        root: parent folder; the project goes to ``root / dist``.
        dist: distribution name (its module is ``dist`` with ``-`` -> ``_``).
        backend: the entry-point name and ``PluginInfo.backend``.
        version: the distribution's version.
        info_extra: more ``PluginInfo`` keyword arguments, e.g. ``", requires=('torch>=2.0',)"``.
        info_prelude: code put before the ``PluginInfo`` import in ``_info.py`` (e.g. a failing import).
        plugin_code: ``plugin.py``'s source (default :data:`LITE_PLUGIN`, class ``LitePrecision``).
    """
    module = dist.replace("-", "_")
    project = root / dist
    src = project / "src" / module
    src.mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        textwrap.dedent(f"""
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "{dist}"
        version = "{version}"
        requires-python = ">=3.10"

        [project.entry-points."precision_base.plugins"]
        {backend} = "{module}._info:INFO"

        [tool.hatch.build.targets.wheel]
        packages = ["src/{module}"]
        """)
    )
    (src / "__init__.py").write_text("")
    (src / "_info.py").write_text(
        info_prelude
        + "from precision_base import PluginInfo\n\n"
        + f"INFO = PluginInfo(backend={backend!r}, precisions=('32-true',), "
        + f"plugin_class='{module}.plugin:LitePrecision'{info_extra})\n"
    )
    (src / "plugin.py").write_text(plugin_code or LITE_PLUGIN.format(backend=backend))
    return project


@functools.lru_cache(maxsize=1)
def _build_python() -> Path:
    """A venv holding a current hatchling, made once per process."""
    root = Path(tempfile.mkdtemp(prefix="precision-build-")) / "env"
    venv.EnvBuilder(with_pip=True).create(root)
    python = root / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "hatchling>=1.26"], check=True)
    return python


def build_wheels(projects: Sequence[Path], out: Path) -> list[Path]:
    """Build each project into a wheel in ``out`` (one pip call; a current hatchling); return the wheels in order."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(_build_python()), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out)]
    subprocess.run([*cmd, *map(str, projects)], check=True, timeout=1800)
    wheels = []
    for project in projects:
        found = re.search(r'^name\s*=\s*"([^"]+)"', (project / "pyproject.toml").read_text(), re.MULTILINE)
        name = re.sub(r"[-_.]+", "_", found.group(1) if found else project.name)
        (wheel,) = out.glob(f"{name}-*.whl")
        wheels.append(wheel)
    return wheels


def make_venv(path: Path, wheels: Sequence[Path], *, inherit: bool = False) -> Path:
    """A fresh venv at ``path`` with ``wheels`` installed; returns its python.

    Args:
        path: the venv's folder (cleared first).
        wheels: wheels to install. Without ``inherit`` pip installs them with their dependencies.
        inherit: the venv also sees this interpreter's site-packages (after its own, through a ``.pth`` file, so
            editable installs keep working): torch, Lightning and the plugins need not be installed again. The
            wheels are installed without dependencies then.
    """
    venv.EnvBuilder(with_pip=not inherit, clear=True, symlinks=True).create(path)
    python = path / "bin" / "python"
    env = {**os.environ, "PIP_NO_WARN_SCRIPT_LOCATION": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    if inherit:
        (site,) = (path / "lib").glob("python*/site-packages")
        parent = sysconfig.get_paths()["purelib"]
        (site / "_inherit_parent.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
        if wheels:
            pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site)]
            subprocess.run([*pip, *map(str, wheels)], check=True, env=env, timeout=1800)
    elif wheels:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *map(str, wheels)], check=True, env=env)
    return python
