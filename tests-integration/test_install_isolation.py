"""Install only what you need: the three wheels, built here, installed into fresh virtual environments.

* ``precision-base`` alone installs no backend (no torch, Lightning or DeepSpeed) and both names say what to install;
* ``precision-fsdp`` (with its dependencies) leaves DeepSpeed out of the environment, and ``"deepspeed:..."`` fails
  with the ``pip install precision-deepspeed`` hint;
* ``precision-deepspeed`` resolves ``"deepspeed:..."`` to its plugin, and ``"fsdp:..."`` gives its hint.

One venv per case, removed when its test ends (one with torch takes about 1 GB of disk). Dependencies come from the
configured package index; torch is pinned to the exact build this interpreter runs (e.g. ``2.13.0+cpu``, a local CPU
wheel here) so a fresh venv does not pull a multi-GB CUDA build. DeepSpeed is installed with ``DS_BUILD_OPS=0`` (its
ops are compiled on first use). Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("precision-base", "precision-fsdp", "precision-deepspeed")

PROBE = r"""
import importlib.util, json, sys
import precision_base
out = {"modules": {m: importlib.util.find_spec(m) is not None for m in ("torch", "lightning", "deepspeed")}}
for spec in sys.argv[1:]:
    try:
        plugin = precision_base.resolve(spec)
    except Exception as exc:
        out[spec] = {"error": type(exc).__name__, "message": str(exc)}
    else:
        cls = type(plugin)
        out[spec] = {"class": f"{cls.__module__}.{cls.__qualname__}", "precision": plugin.precision}
print(json.dumps(out))
"""


def _run(cmd: list[str], timeout: float = 300, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DS_BUILD_OPS": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    for package in PACKAGES:
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
              str(REPO / "packages" / package)])  # fmt: skip
    assert sorted(p.name.split("-")[0] for p in out.glob("*.whl")) == sorted(p.replace("-", "_") for p in PACKAGES)
    return out


def _fresh_env(root: Path, wheelhouse: Path, *requirements: str) -> Iterator[Path]:
    """Yields the python of a new venv at ``root`` with ``requirements`` installed; removes the venv afterwards."""
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    python = root / "bin" / "python"
    try:
        _run([str(python), "-m", "pip", "install", "-q", "--find-links", str(wheelhouse), *requirements], timeout=600)
        yield python
    finally:
        shutil.rmtree(root, ignore_errors=True)


TORCH = f"torch=={metadata.version('torch')}"


def _probe(python: Path, *specs: str) -> dict:
    return json.loads(_run([str(python), "-c", PROBE, *specs], cwd="/").stdout.strip().splitlines()[-1])


def _installed(python: Path) -> set[str]:
    listing = _run([str(python), "-m", "pip", "list", "--format", "json"]).stdout
    return {d["name"].lower() for d in json.loads(listing)}


@pytest.fixture
def base_only(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Iterator[Path]:
    yield from _fresh_env(tmp_path_factory.mktemp("venv-base"), wheelhouse, "precision-base")


@pytest.fixture
def fsdp_only(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Iterator[Path]:
    yield from _fresh_env(tmp_path_factory.mktemp("venv-fsdp"), wheelhouse, "precision-fsdp", TORCH)


@pytest.fixture
def deepspeed_only(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Iterator[Path]:
    yield from _fresh_env(tmp_path_factory.mktemp("venv-deepspeed"), wheelhouse, "precision-deepspeed", TORCH)


def test_base_alone_installs_no_backend(base_only: Path) -> None:
    installed = _installed(base_only)
    assert "precision-base" in installed
    assert not installed & {"torch", "lightning", "deepspeed", "precision-fsdp", "precision-deepspeed"}
    out = _probe(base_only, "deepspeed:bf16-mixed", "fsdp:bf16-mixed")
    assert out["modules"] == {"torch": False, "lightning": False, "deepspeed": False}
    assert out["deepspeed:bf16-mixed"]["error"] == "UnknownBackendError"
    assert "pip install precision-deepspeed" in out["deepspeed:bf16-mixed"]["message"]
    assert "pip install precision-fsdp" in out["fsdp:bf16-mixed"]["message"]


def test_fsdp_only_leaves_deepspeed_out(fsdp_only: Path) -> None:
    installed = _installed(fsdp_only)
    assert {"precision-base", "precision-fsdp", "torch", "lightning"} <= installed
    assert not installed & {"deepspeed", "precision-deepspeed"}
    out = _probe(fsdp_only, "deepspeed:bf16-mixed", "fsdp:bf16-mixed")
    assert out["modules"]["deepspeed"] is False
    assert out["deepspeed:bf16-mixed"]["error"] == "UnknownBackendError"
    assert "To use it, run: pip install precision-deepspeed" in out["deepspeed:bf16-mixed"]["message"]
    assert out["fsdp:bf16-mixed"]["class"].endswith(".FSDPPrecision")


def test_deepspeed_only_resolves_deepspeed_and_hints_fsdp(deepspeed_only: Path) -> None:
    installed = _installed(deepspeed_only)
    assert {"precision-base", "precision-deepspeed", "torch", "lightning", "deepspeed"} <= installed
    assert "precision-fsdp" not in installed
    out = _probe(deepspeed_only, "deepspeed:bf16-mixed", "deepspeed:32", "fsdp:bf16-mixed")
    assert out["deepspeed:bf16-mixed"] == {
        "class": "precision_deepspeed.plugin.DeepSpeedPrecision",
        "precision": "bf16-mixed",
    }
    assert out["deepspeed:32"]["precision"] == "32-true"
    assert out["fsdp:bf16-mixed"]["error"] == "UnknownBackendError"
    assert "To use it, run: pip install precision-fsdp" in out["fsdp:bf16-mixed"]["message"]
