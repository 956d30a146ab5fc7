"""precision_base.testing: the conformance kits and their launcher, and nothing of the repository's test helpers."""

from __future__ import annotations

import subprocess
import sys

import precision_base.testing


def test_the_kits_are_exported_and_the_package_imports_neither_pytest_nor_torch() -> None:
    assert precision_base.testing.__all__ == ["FabricPluginConformance", "PluginConformance"]
    code = (
        "import sys, precision_base.testing, precision_base.testing.ranks; "
        "print([m for m in ('pytest', 'torch', 'lightning') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
    from precision_base.testing import FabricPluginConformance, PluginConformance

    assert PluginConformance.__module__ == "precision_base.testing.conformance"
    assert FabricPluginConformance.__module__ == "precision_base.testing.fabric_conformance"


def test_the_repository_helpers_are_not_in_precision_base() -> None:
    import importlib.util

    for name in ("launch", "models", "wheels", "sites", "dummy", "dummy_plugin"):
        assert importlib.util.find_spec(f"precision_base.testing.{name}") is None, name
        assert importlib.util.find_spec(f"precision_testsupport.{name}") is not None, name
    from precision_base.testing import ranks
    from precision_testsupport import launch

    assert launch.run_ranks is ranks.run_ranks  # one launcher: the kit's
