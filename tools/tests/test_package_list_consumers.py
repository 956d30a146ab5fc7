"""Copies of the package list that cannot read it at run time agree with it.

The one list is ``[tool.precision-plugins]`` in the root ``pyproject.toml`` (:func:`tools.packages.packages`). The
registry ships in the precision-base wheel, without that file, so every build of precision-base writes the published
plugins into the package (``packages/precision-base/hatch_build.py`` -> ``registry/published.json``): no backend is
named in its code. The docs' generators (tools/docgen/) read the list itself; the test checks what they derive
from it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

from tools.docgen import errors, reference
from tools.packages import ROOT, packages, unpublished_packages


def _backends() -> dict[str, str]:
    return {pkg.backend: pkg.dist for pkg in packages().values() if pkg.backend is not None}


def _build_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "hatch_build", ROOT / "packages" / "precision-base" / "hatch_build.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_precision_bases_build_writes_the_package_lists_backends() -> None:
    from precision_base.registry.statuses import published_distributions

    assert _build_hook().published(ROOT / "pyproject.toml") == _backends()
    assert published_distributions() == _backends(), "the installed precision-base was built from another list"


def test_a_fourth_published_plugin_reaches_precision_base_through_the_list_alone(tmp_path: Path) -> None:
    """The list with one more row (and an unpublished one) is all the build needs: nothing to edit in precision-base."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    text = text.replace(
        "packages = [",
        'packages = [\n    { dist = "precision-tpu", backend = "tpu" },\n'
        '    { dist = "precision-local", backend = "local", published = false },',
        1,
    )
    (tmp_path / "pyproject.toml").write_text(text, encoding="utf-8")
    assert _build_hook().published(tmp_path / "pyproject.toml") == {"tpu": "precision-tpu", **_backends()}


def test_the_built_wheel_carries_the_list(tmp_path: Path) -> None:
    """A real wheel of precision-base, built by hatchling with the build hook, holds the file."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "-o",
            str(tmp_path),
            str(ROOT / "packages" / "precision-base"),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("precision_base-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert json.loads(zf.read("precision_base/registry/published.json")) == _backends()
    assert unpublished_packages()  # the helpers' package is in the list, and not among the published backends


def test_the_docs_generators_read_the_package_list() -> None:
    assert errors.backends() == _backends()
    published = {pkg.module: pkg.src for pkg in packages().values() if getattr(pkg, "published", True)}
    assert reference.sources() == published
