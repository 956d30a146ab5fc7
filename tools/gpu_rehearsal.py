"""The GPU node's command rehearsed on this machine (issue 29 item 4a; ``nox -s gpu_kit_rehearsal``, in the ci tag).

The session's fresh venv holds only the rehearsal target's installed set (``tools/gpu_targets/rehearsal.toml``:
this machine's Python and CPU torch, in the shape of the H200 target; :func:`requirements`). Then, with that venv's
Python, ``python -m tools.gpu_rehearsal OUT``:

1. builds the kit for the rehearsal target into ``OUT/gpu-kit`` (``tools.gpu_kit``: the package registry is the only
   network it uses, as where the real kit is built);
2. runs the node command, ``tools/gpu_node.sh OUT/node --dry-run``, with no index and no pip cache (``PIP_NO_INDEX``,
   ``PIP_NO_CACHE_DIR``), no ``PYTHONPATH`` of its own and a ``git`` on ``PATH`` that records any call;
3. checks what the node would need (:func:`problems`): the command passed; no difference between the target file
   and what is installed, the kit included; deepspeed, torchao and every entry point of ``precision_base.plugins``
   found in the kit's ``--target`` folder; the plugins ``precision-plugins list`` shows as ok from there; the
   command's caps and the dry run's own time within the node's 7 minutes; no call to git, nox or an index; the node
   command at most 2,000 characters.

Every problem is one line naming what differed; exit 1 when there is any.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import tomllib

from tools.packages import ROOT

TARGET = ROOT / "tools" / "gpu_targets" / "rehearsal.toml"
NODE_SCRIPT = ROOT / "tools" / "gpu_node.sh"
NODE_BUDGET_S = 7 * 60
"""The node's time for the whole command (issue 29): the tests' and the run's caps and the rest must fit in it."""


def requirements(target: Path = TARGET) -> list[str]:
    """The target's installed set as pip requirements (a local version label dropped: ``torch==2.13.0``)."""
    installed = tomllib.loads(target.read_text(encoding="utf-8"))["installed"]
    return [name if version == "*" else f"{name}=={version.split('+')[0]}" for name, version in installed.items()]


def caps(script: str) -> dict[str, int]:
    """The default seconds ``tools/gpu_node.sh`` gives its steps: ``${NODE_TESTS_S:-120}`` -> ``NODE_TESTS_S: 120``."""
    return {name: int(value) for name, value in re.findall(r"\$\{(NODE_\w+_S):-(\d+)\}", script)}


def problems(node_dir: Path, kit: Path, done: subprocess.CompletedProcess[str], wall_s: float, git_log: Path,
             listing: str, locations: dict[str, str]) -> list[str]:  # fmt: skip
    """What would stop the node run, one line each (see the module's docstring, step 3)."""
    from tools.gpu_kit import NODE_RUN

    found = []
    if done.returncode != 0:
        found.append(f"the node command exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    record = json.loads((node_dir / "node.json").read_text()) if (node_dir / "node.json").is_file() else None
    if record is None:
        found.append(f"the node command wrote no {node_dir / 'node.json'}")
    else:
        found += [f"the node saw a {line}" for line in record["differences"]]
    site = (kit / "site").resolve()
    for name, where in locations.items():
        if not Path(where).resolve().is_relative_to(site):
            found.append(f"{name} is imported from {where}, not from the kit's {site}")
    for backend in ("fsdp", "deepspeed"):
        if not re.search(rf"^{backend}\s.*\sok\s", listing, re.MULTILINE):
            found.append(f"precision-plugins list does not show {backend} as ok from the kit:\n{listing}")
    limits = caps(NODE_SCRIPT.read_text(encoding="utf-8"))
    total = sum(limits.values()) + wall_s
    if total > NODE_BUDGET_S:
        found.append(f"the node run can take {total:.0f} s (caps {limits}, the dry run {wall_s:.0f} s): more than "
                     f"the node's {NODE_BUDGET_S} s")  # fmt: skip
    if git_log.exists():
        found.append(f"the node command called git: {git_log.read_text().strip()}")
    for word in ("nox ", "Looking in indexes", "Downloading "):
        if word in done.stdout + done.stderr:
            found.append(f"the node command's output has {word.strip()!r}: it reached for nox or an index")
    if len(NODE_RUN) > 2000:
        found.append(f"the node command has {len(NODE_RUN)} characters (at most 2,000)")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tools.gpu_rehearsal OUT", file=sys.stderr)
        return 2
    out = Path(argv[0]).resolve()
    kit, node_dir, shims = out / "gpu-kit", out / "node", out / "shims"
    shims.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "tools.gpu_kit", str(TARGET), "--out", str(kit)], check=True, cwd=ROOT)
    git_log = out / "git-was-called"
    git_log.unlink(missing_ok=True)
    (shims / "git").write_text(f'#!/bin/sh\necho "git $*" >> {git_log}\nexit 1\n')
    (shims / "git").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"PATH": f"{shims}{os.pathsep}{env['PATH']}", "PYTHON": sys.executable, "GPU_KIT": str(kit),
            "PIP_NO_INDEX": "1", "PIP_NO_CACHE_DIR": "1", "PIP_CONFIG_FILE": os.devnull}  # fmt: skip
    began = time.monotonic()
    done = subprocess.run(["bash", str(NODE_SCRIPT), str(node_dir), "--dry-run"], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    wall = time.monotonic() - began
    print(done.stdout + done.stderr)
    site_env = {**env, "PYTHONPATH": str(kit / "site")}
    probe = ("import importlib, json; from importlib.metadata import entry_points; "
             "found = {m: importlib.import_module(m).__file__ for m in ('deepspeed', 'torchao', 'precision_base')}; "
             "found |= {f'entry point {e.name}': str(e.dist.locate_file('')) "
             "for e in entry_points(group='precision_base.plugins')}; print(json.dumps(found))")  # fmt: skip
    located = subprocess.run([sys.executable, "-c", probe], env=site_env, capture_output=True, text=True, cwd=out)
    locations = json.loads(located.stdout.strip().splitlines()[-1]) if located.returncode == 0 else {}
    listing = subprocess.run([sys.executable, "-m", "precision_base.cli", "list"], env=site_env, capture_output=True,
                             text=True, cwd=out).stdout  # fmt: skip
    found = problems(node_dir, kit, done, wall, git_log, listing, locations)
    if located.returncode != 0:
        found.append(f"importing from the kit failed: {located.stderr[-2000:]}")
    elif not any(name.startswith("entry point") for name in locations):
        found.append("no entry point of precision_base.plugins is found from the kit")
    print(f"gpu_rehearsal: the node command's dry run took {wall:.0f} s; imported from the kit: {sorted(locations)}")
    for line in found:
        print(f"gpu_rehearsal: problem: {line}")
    print(f"gpu_rehearsal: {'passed' if not found else f'{len(found)} problem(s)'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
