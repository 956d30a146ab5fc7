"""tools/prerequisites.py: a run whose sessions need a program the machine lacks stops before any session, with one
line naming what to install; the real noxfile is run with no Chromium and no apt-get on PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools import prerequisites
from tools.packages import ROOT
from tools.prerequisites import Machine

TAGS = {"lint": ["ci", "lint"], "docs": ["ci", "docs"], "demo": ["demo"], "tests-precision_fsdp": []}
NO_CHROMIUM = (
    "nox: nothing was run: the docs session's browser test needs Chromium and none is on PATH; install it "
    "(Debian/Ubuntu: `sudo apt-get install chromium`; as root with apt-get the session installs it itself) or set "
    "CHROMIUM=/path/to/chromium"
)


def machine(*on_path: str, root: bool = False, **env: str) -> Machine:
    return Machine(lambda name: f"/usr/bin/{name}" if name in on_path else None, env, root)


def test_the_sessions_a_command_line_selects() -> None:
    assert prerequisites.selected([], TAGS, ["ci"]) == {"lint", "docs"}
    assert prerequisites.selected(["-t", "ci"], TAGS, []) == {"lint", "docs"}
    assert prerequisites.selected(["-t", "demo", "--", "-x"], TAGS, ["ci"]) == {"demo"}
    assert prerequisites.selected(["-s", "lint", "demo"], TAGS, ["ci"]) == {"lint", "demo"}
    assert prerequisites.selected(["-s", "docs", "--", "--strict"], TAGS, ["ci"]) == {"docs"}
    assert prerequisites.selected(["--session", "tests-precision_fsdp(python='3.11')"], TAGS, ["ci"]) == set()
    assert prerequisites.selected(["-s", "tests-precision_fsdp"], TAGS, ["ci"]) == {"tests-precision_fsdp"}
    for nothing_runs in (["-l"], ["--list"], ["-t", "ci", "--json", "-l"], ["--version"], ["-k", "doc"]):
        assert prerequisites.selected(nothing_runs, TAGS, ["ci"]) is None, nothing_runs


def test_chromium_is_there_can_be_installed_or_is_named() -> None:
    docs = {"docs"}
    assert prerequisites.problems(docs, machine()) == [NO_CHROMIUM]
    assert prerequisites.problems(docs, machine("apt-get")) == [NO_CHROMIUM]  # not root: apt-get cannot install
    assert prerequisites.problems(docs, machine(root=True)) == [NO_CHROMIUM]  # root without apt-get
    assert prerequisites.problems(docs, machine("apt-get", root=True)) == []
    assert prerequisites.problems(docs, machine("chromium-browser")) == []
    assert prerequisites.problems(docs, machine(CHROMIUM="/opt/chrome/chrome")) == []
    assert prerequisites.problems({"lint", "demo"}, machine()) == []
    assert prerequisites.chromium(machine("google-chrome", "chromium")) == "/usr/bin/chromium"


def test_the_test_command_stops_before_any_session_without_chromium(tmp_path: Path) -> None:
    """The README's `nox -t ci` on a machine with neither Chromium nor apt-get on PATH (git only)."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "git").symlink_to(subprocess.check_output(["which", "git"], text=True).strip())
    env = {k: v for k, v in os.environ.items() if k != "CHROMIUM"} | {"PATH": str(tmp_path / "bin")}
    envdir = tmp_path / "nox-envs"
    command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(envdir), "-t", "ci"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [NO_CHROMIUM]
    assert "Running session" not in done.stdout + done.stderr
    assert not envdir.exists()  # no virtualenv was made
    listed = subprocess.run([*command, "-l"], capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    assert listed.returncode == 0, listed.stderr  # listing runs nothing, so it needs nothing
    assert "docs" in listed.stdout
