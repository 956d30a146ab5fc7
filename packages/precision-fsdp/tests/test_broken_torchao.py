"""An installed but broken torchao (here: a torchao 0.18.0 whose ``torchao.float8`` does not import, as a torchao
built for another torch fails) is reported as broken, with the import error and the versions, by ``resolve``, the
Trainer and Fabric doors, ``precision-plugins list`` and ``doctor``, and by the plugin at setup; never with an
install line, since torchao is installed.

Each check runs in a fresh Python whose ``sys.path`` starts with a folder holding that torchao (a package and its
``.dist-info``), ahead of the real one: what such a machine's interpreter sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

FAILS = "`import torchao.float8` fails: ModuleNotFoundError: No module named 'torchao.float8'"


@pytest.fixture(scope="module")
def broken_torchao(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("broken-site")
    (site / "torchao").mkdir()
    (site / "torchao" / "__init__.py").write_text("__version__ = '0.18.0'\n")  # no float8 subpackage
    info = site / "torchao-0.18.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchao\nVersion: 0.18.0\n")
    return site


def _run(site: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)


def _python(site: Path, code: str) -> str:
    done = _run(site, sys.executable, "-c", code)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_resolve_and_both_doors_say_broken_with_the_versions(broken_torchao: Path) -> None:
    code = """
import json, precision_base
out = {}
for name, call in {
    "resolve": lambda: precision_base.resolve("fsdp:fp8-tensorwise"),
    "trainer": lambda: precision_base.Trainer(precision_plugin="fsdp:fp8-rowwise", accelerator="cpu", devices=1),
    "fabric": lambda: precision_base.Fabric(precision_plugin="fsdp:fp8-tensorwise", accelerator="cpu", devices=1),
}.items():
    try:
        call()
        out[name] = "resolved"
    except Exception as exc:
        out[name] = f"{type(exc).__name__}: {exc}"
out["bf16"] = type(precision_base.resolve("fsdp:bf16-mixed")).__name__
print(json.dumps(out))
"""
    out = json.loads(_python(broken_torchao, code).splitlines()[-1])
    assert out.pop("bf16") == "FSDPPrecision"  # the backend itself is fine
    for name, message in out.items():
        assert message.startswith("PluginRequirementError: fsdp:fp8-"), (name, message)
        assert "cannot be used here: the 'fp8' extra of precision-fsdp is installed (torchao 0.18.0, " in message
        assert f"torch {torch.__version__}" in message
        assert FAILS in message
        assert "pip install" not in message, (name, message)


def test_list_and_doctor_say_broken(broken_torchao: Path) -> None:
    cli = str(Path(sys.executable).with_name("precision-plugins"))
    listed = _run(broken_torchao, cli, "list")
    assert listed.returncode == 0, listed.stderr
    assert "fp8-tensorwise (broken)" in listed.stdout
    line = next(line for line in listed.stdout.splitlines() if "fsdp:fp8-tensorwise" in line and "broken:" in line)
    assert FAILS in line
    assert "pip install" not in line
    as_json = json.loads(_run(broken_torchao, cli, "list", "--json").stdout)
    fsdp = next(entry for entry in as_json if entry["backend"] == "fsdp")
    assert fsdp["unavailable"] == {}
    assert set(fsdp["broken"]) == set(fsdp["extra_precisions"])
    doctor = _run(broken_torchao, cli, "doctor", "--skip-import-check")
    assert doctor.returncode == 1
    assert "[broken] fsdp:" in doctor.stdout
    assert "  - fsdp:fp8-tensorwise: fsdp:fp8-tensorwise cannot be used here: the 'fp8' extra" in doctor.stdout


def test_the_plugin_at_setup_names_the_versions_not_an_install_line(broken_torchao: Path) -> None:
    code = """
from precision_fsdp.errors import Float8UnavailableError
from precision_fsdp.float8.config import torchao_float8
try:
    torchao_float8("fsdp:fp8-tensorwise")
except Float8UnavailableError as exc:
    print(exc)
"""
    message = _python(broken_torchao, code).splitlines()[-1]
    assert message == (
        f"fsdp:fp8-tensorwise cannot use the installed torchao 0.18.0 with torch {torch.__version__}: {FAILS}. "
        "Install a torchao release that works with this torch; installing precision-fsdp's fp8 extra again changes "
        "nothing while these versions stay"
    )
