"""tools/gpu_node.sh, the GPU node's one command (issue 29 item 2), run here as the node would run it: a kit folder
holding a real wheel (precision-testsupport, built from this tree), installed with no index; the target's versions
compared and its checks run; ``benchmarks/gpu_bench.py --dry-run`` planned; no git called (a ``git`` on ``PATH``
records any call).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools import gpu_kit
from tools.packages import ROOT

SCRIPT = ROOT / "tools" / "gpu_node.sh"


@pytest.fixture
def kit(tmp_path: Path) -> Path:
    """A kit as ``nox -s gpu_kit`` lays it out: one real wheel, manifest.json, kit.json naming a target file."""
    folder = tmp_path / "gpu-kit"
    folder.mkdir()
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-index", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "-w", str(folder), str(ROOT / "packages" / "precision-testsupport")], check=True)
    (wheel,) = folder.glob("*.whl")
    version = wheel.name.split("-")[1]
    manifest = [{"name": "precision-testsupport", "version": version, "file": wheel.name, "sha256": "", "size": 1}]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    target = tmp_path / "node.toml"
    target.write_text('[installed]\npytest = "0.0.1"\npackaging = "*"\nno-such-distribution = "1.0"\n')
    checks = {"there": "true", "absent": "exit 3"}
    facts = {"target": str(target), "commit": "0123abc", "checks": checks}
    (folder / "kit.json").write_text(json.dumps(facts))
    return folder


def run_node(tmp_path: Path, kit: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """``bash tools/gpu_node.sh OUT ARGS`` with this Python as the node's, and a ``git`` that records being called."""
    bin_dir, called = tmp_path / "bin", tmp_path / "git-was-called"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "git").write_text(f"#!/bin/sh\ntouch {called}\nexit 1\n")
    (bin_dir / "git").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": sys.executable, "GPU_KIT": str(kit)}
    env.pop("PYTHONPATH", None)
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), str(out), *args], env=env, capture_output=True, text=True, timeout=300)
    return done, out, called


def test_the_node_command_installs_the_kit_checks_the_node_and_plans_the_run(tmp_path: Path, kit: Path) -> None:
    done, out, git_called = run_node(tmp_path, kit, "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    log = (out / "node.log").read_text()
    assert log == done.stdout  # everything printed is in the log that comes back
    assert "gpu_node: installing 1 wheel(s)" in log
    assert (kit / "site" / "precision_testsupport").is_dir()
    assert "the kit carries" not in log  # the kit's wheel is what this Python imports, from the kit's site
    assert "gpu_node: commit 0123abc (the kit's)" in log
    assert f"difference: pytest is {pytest.__version__} here; {tmp_path / 'node.toml'} says 0.0.1" in log
    assert "difference: no-such-distribution is not installed here" in log
    assert "difference: packaging" not in log  # "*": any version
    assert "gpu_node: check there: yes" in log
    assert "gpu_node: check absent: no (exit 3)" in log
    assert "gpu_node: tests (not run: --dry-run): " in log
    assert "-m pytest -m gpu" in log
    assert "gpu_bench plan:" in log
    assert f"results into {out}" in log
    assert "gpu_node: finished with exit status 0" in log
    assert not git_called.exists()
    record = json.loads((out / "node.json").read_text())
    assert record["commit"] == "0123abc"
    assert record["kit"] == {"precision-testsupport": record["kit"]["precision-testsupport"]}
    assert record["checks"]["absent"] == {"ok": False, "exit": 3, "output": ""}
    assert len(record["differences"]) == 2


def test_a_missing_kit_is_refused_with_how_to_build_it(tmp_path: Path) -> None:
    done, _, _ = run_node(tmp_path, tmp_path / "nowhere")
    assert done.returncode == 2
    assert f"gpu_node: no kit at {tmp_path / 'nowhere'}" in done.stdout
    assert "nox -s gpu_kit" in done.stdout


def test_the_printed_node_command_fits_one_device_call() -> None:
    assert len(gpu_kit.NODE_RUN) <= 2000
    assert gpu_kit.NODE_RUN.startswith("bash tools/gpu_node.sh ")
    assert SCRIPT.is_file()


def test_only_picks_the_parts_tests_being_the_scripts_own(tmp_path: Path, kit: Path) -> None:
    done, _, _ = run_node(tmp_path, kit, "--only", "fits", "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu_node: tests" not in done.stdout
    assert "gpu_bench plan:" in done.stdout
    assert "0 fp8 fits" in done.stdout
    done, _, _ = run_node(tmp_path, kit, "--only", "tests", "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu_node: tests (not run: --dry-run)" in done.stdout
    assert "gpu_bench" not in done.stdout
