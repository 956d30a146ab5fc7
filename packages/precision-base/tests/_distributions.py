"""Builds real wheels of small plugin distributions for the tests, and fresh virtual environments for them."""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
import textwrap
import venv
from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[2]
BASE_PROJECT = PACKAGES / "precision-base"
DUMMY_PROJECT = Path(__file__).parent / "fixtures" / "dummy_plugin"

LITE_PLUGIN = '''
from precision_base import DtypeTable, PrecisionPlugin


class LitePrecision(PrecisionPlugin):
    """Pure-Python plugin class: resolvable without torch (registry tests only)."""

    backend = "{backend}"
    precisions = ("32-true",)

    def __init__(self, precision, **options):
        self.precision = precision
        self.options = options

    def dtypes(self):
        return DtypeTable(parameters="float32", compute="float32", reduction="float32", buffers="float32",
                          inputs="float32", init="float32")
'''


def write_distribution(
    root: Path, dist: str, backend: str, *, info_extra: str = "", info_prelude: str = "", plugin_code: str = ""
) -> Path:
    """Write a plugin project named ``dist`` registering ``backend``; return its directory."""
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
        version = "1.2.3"
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
    """A small venv holding a current hatchling, made once per test run.

    The environment under test may hold old build tools (the ``lowest`` matrix cell pins packaging to its floor,
    which drags hatchling back to a release that builds these projects wrongly), so wheels are built elsewhere.
    """
    root = Path(tempfile.mkdtemp(prefix="precision-build-")) / "env"
    venv.EnvBuilder(with_pip=True).create(root)
    python = root / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "hatchling>=1.26"], check=True)
    return python


def build_wheel(project: Path, out: Path) -> Path:
    """Build ``project`` into a wheel in ``out`` with a current hatchling."""
    before = set(out.glob("*.whl"))
    subprocess.run(
        [
            str(_build_python()),
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(project),
        ],
        check=True,
    )
    (wheel,) = set(out.glob("*.whl")) - before
    return wheel


def make_venv(path: Path, wheels: list[Path]) -> Path:
    """Create a fresh virtual environment at ``path`` with ``wheels`` (and their light dependencies) installed."""
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    python = path / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *map(str, wheels)],
        check=True,
        env={**os.environ, "PIP_NO_WARN_SCRIPT_LOCATION": "1"},
    )
    return python
