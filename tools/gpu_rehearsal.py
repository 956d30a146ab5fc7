"""The GPU node's command rehearsed without the GPU (issue 29 item 4), for a target file.

* ``nox -s gpu_kit_rehearsal`` (ci tag): the rehearsal target (``tools/gpu_targets/rehearsal.toml``: this machine's
  Python and CPU torch, in the shape of the H200 target);
* ``nox -s gpu_rehearsal`` (nightly: it downloads torch 2.11.0's CUDA build, several GB): the H200 target itself,
  Python 3.12 and its versions (``tools/gpu_targets/h200.toml``).

The session's fresh venv holds only the target's installed set (:func:`requirements`). Then, with that venv's
Python, ``python -m tools.gpu_rehearsal [--target NAME] OUT``:

1. builds the kit for the rehearsal target into ``OUT/gpu-kit`` (``tools.gpu_kit``: the package registry is the only
   network it uses, as where the real kit is built);
2. runs the node command, ``tools/gpu_node.sh OUT/node --dry-run``, with no index and no pip cache (``PIP_NO_INDEX``,
   ``PIP_NO_CACHE_DIR``), no ``PYTHONPATH`` of its own and a ``git`` on ``PATH`` that records any call;
3. checks what the node would need (:func:`problems`): the command passed; no difference between the target file
   and what is installed, the kit included; deepspeed, torchao and every entry point of ``precision_base.plugins``
   found in the kit's ``--target`` folder; the plugins ``precision-plugins list`` shows as ok from there; the
   command's caps and the dry run's own time within the node's 7 minutes; no call to git (but the target's own
   checks, such as ``git --version``), nox or an index; the node command at most 2,000 characters. A version that
   differs from the target's only in its local label (the registry's ``torch 2.11.0`` for the node's
   ``2.11.0+cu130``: the registry has no such label) is a note, not a problem;
4. runs the part of the GPU run a CPU can (:func:`cpu_part`, from the kit): the GPU run's imports, both of its models
   built (the ~1B fp8 model on the meta device), and the plan's first fit whose setup runs on a CPU, trained for two
   steps.

Every problem is one line naming what differed; exit 1 when there is any.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import tomllib

from tools.packages import ROOT

TARGETS = ROOT / "tools" / "gpu_targets"
TARGET = TARGETS / "rehearsal.toml"
H200 = TARGETS / "h200.toml"
NODE_SCRIPT = ROOT / "tools" / "gpu_node.sh"
NODE_BUDGET_S = 7 * 60
"""The node's time for the whole command (issue 29): the tests' and the run's caps and the rest must fit in it."""


def requirements(target: Path = TARGET) -> list[str]:
    """The target's installed set as pip requirements (a local version label dropped: ``torch==2.13.0``)."""
    installed = tomllib.loads(target.read_text(encoding="utf-8"))["installed"]
    return [name if version == "*" else f"{name}=={version.split('+')[0]}" for name, version in installed.items()]


def requirement(name: str, target: Path = TARGET) -> str:
    """The target's pip requirement for one distribution: ``requirement("torch", H200)`` -> ``"torch==2.11.0"``."""
    return next(r for r in requirements(target) if r.split("==")[0] == name)


def caps(script: str) -> dict[str, int]:
    """The default seconds ``tools/gpu_node.sh`` gives its steps: ``${NODE_TESTS_S:-120}`` -> ``NODE_TESTS_S: 120``."""
    return {name: int(value) for name, value in re.findall(r"\$\{(NODE_\w+_S):-(\d+)\}", script)}


def label_only(difference: str) -> bool:
    """Whether a node's difference line is a version that differs from the target's only in its local label:
    ``difference: torch is 2.11.0 here; h200.toml says 2.11.0+cu130``."""
    said = re.fullmatch(r"difference: \S+ is (\S+) here; .* says (\S+)", difference)
    return bool(said) and said[1].split("+")[0] == said[2].split("+")[0] and said[1] != said[2]


def cpu_part() -> list[str]:
    """In a process with the kit on its path, the GPU run's CPU-runnable part; one line of what ran, then problems.

    The imports of ``benchmarks/gpu_bench.py``, its plan, both models built (the fp8 model on the meta device: its
    ~1B parameters counted, no memory used) and the plan's first fit whose setup runs on a CPU (FSDP1 and DeepSpeed
    ZeRO under Lightning's strategies need CUDA here) trained for two steps with the run's own fit, smaller data."""
    import torch

    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]
    import gpu_bench

    from precision_testsupport.models import TinyGPT

    plan = gpu_bench.plan(gpu_bench.parse([]))
    model = {**plan["model"], "seq": 64, "batch": 2}
    with torch.device("meta"):
        big = TinyGPT(**{k: v for k, v in plan["fp8_model"].items() if k != "batch"})
    count = sum(p.numel() for p in big.parameters())
    fit = next((f for f in plan["fits"] if f["setup"] == "fsdp2"), None)
    if fit is None:
        return [f"built the fp8 model ({count / 1e9:.2f}B parameters)", "the plan has no fit a CPU can run"]
    net = TinyGPT(**{k: v for k, v in model.items() if k != "batch"})
    run = gpu_bench.lightning_fit(fit["setup"], fit["variant"], fit["precision"], net,
                                  gpu_bench.tokens(model, 2, 0), accelerator="cpu")  # fmt: skip
    done = gpu_bench.measure(run, 0, "cpu")
    said = (f"built the fp8 model ({count / 1e9:.2f}B parameters); trained the plan's first CPU fit "
            f"({fit['setup']} {fit['precision']} {fit['variant']}) for 2 steps: losses {done['losses']}")  # fmt: skip
    bad = [] if len(done["losses"]) == 2 and all(map(math.isfinite, done["losses"])) else [f"the fit's losses: {done}"]
    return [said, *bad]


def problems(node_dir: Path, kit: Path, done: subprocess.CompletedProcess[str], wall_s: float, git_log: Path,
             listing: str, locations: dict[str, str], checks: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    """What would stop the node run, one line each (see the module's docstring, step 3). ``checks``: the target's
    own check commands (``git --version``: the node says whether git is there), which may call git."""
    from tools.gpu_kit import NODE_RUN
    from tools.packages import packages

    found = []
    if done.returncode != 0:
        found.append(f"the node command exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    record = json.loads((node_dir / "node.json").read_text()) if (node_dir / "node.json").is_file() else None
    if record is None:
        found.append(f"the node command wrote no {node_dir / 'node.json'}")
    else:
        found += [f"the node saw a {line}" for line in record["differences"] if not label_only(line)]
    site = (kit / "site").resolve()
    for name, where in locations.items():
        if not Path(where).resolve().is_relative_to(site):
            found.append(f"{name} is imported from {where}, not from the kit's {site}")
    for backend in [p.backend for p in packages().values() if p.backend]:  # the package list's order
        if not re.search(rf"^{backend}\s.*\sok\s", listing, re.MULTILINE):
            found.append(f"precision-plugins list does not show {backend} as ok from the kit:\n{listing}")
    limits = caps(NODE_SCRIPT.read_text(encoding="utf-8"))
    total = sum(limits.values()) + wall_s
    if total > NODE_BUDGET_S:
        found.append(f"the node run can take {total:.0f} s (caps {limits}, the dry run {wall_s:.0f} s): more than "
                     f"the node's {NODE_BUDGET_S} s")  # fmt: skip
    asked = [line for line in git_log.read_text().splitlines() if line.strip()] if git_log.exists() else []
    if calls := [line for line in asked if line not in checks]:
        found.append(f"the node command called git: {'; '.join(calls)}")
    for word in ("nox ", "Looking in indexes", "Downloading "):
        if word in done.stdout + done.stderr:
            found.append(f"the node command's output has {word.strip()!r}: it reached for nox or an index")
    if len(NODE_RUN) > 2000:
        found.append(f"the node command has {len(NODE_RUN)} characters (at most 2,000)")
    return found


def main(argv: list[str]) -> int:
    target = TARGET
    if len(argv) == 3 and argv[0] == "--target":
        target, argv = TARGETS / f"{argv[1]}.toml", argv[2:]
    if len(argv) != 1 or not target.is_file():
        print(f"usage: python -m tools.gpu_rehearsal [--target NAME] OUT (NAME: a file in {TARGETS}, e.g. h200)",
              file=sys.stderr)  # fmt: skip
        return 2
    out = Path(argv[0]).resolve()
    kit, node_dir, shims = out / "gpu-kit", out / "node", out / "shims"
    shims.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "tools.gpu_kit", str(target), "--out", str(kit)], check=True, cwd=ROOT)
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
    checks = tuple(tomllib.loads(target.read_text(encoding="utf-8")).get("checks", {}).values())
    found = problems(node_dir, kit, done, wall, git_log, listing, locations, checks)
    if located.returncode != 0:
        found.append(f"importing from the kit failed: {located.stderr[-2000:]}")
    elif not any(name.startswith("entry point") for name in locations):
        found.append("no entry point of precision_base.plugins is found from the kit")
    record = json.loads((node_dir / "node.json").read_text()) if (node_dir / "node.json").is_file() else {}
    for line in filter(label_only, record.get("differences", [])):
        print(f"gpu_rehearsal: note: {line} (a local label only: the registry's build is not the node's)")
    code = (
        "from tools.gpu_rehearsal import cpu_part; from precision_testsupport.launch import leave_rank; "
        "print(*cpu_part(), sep='\\n', flush=True); leave_rank(0)"
    )  # its fit's process group closed first
    part_env = {**site_env, "PYTHONPATH": f"{kit / 'site'}{os.pathsep}{ROOT}"}
    part = subprocess.run([sys.executable, "-c", code], env=part_env, capture_output=True, text=True, cwd=out,
                          timeout=600)  # fmt: skip
    lines = part.stdout.strip().splitlines()
    if part.returncode != 0 or not lines:
        found.append(f"the GPU run's CPU part exited {part.returncode}: {part.stderr[-2000:]}")
    else:
        print(f"gpu_rehearsal: the GPU run's CPU part: {lines[0]}")
        found += lines[1:]
    print(f"gpu_rehearsal: the node command's dry run took {wall:.0f} s; imported from the kit: {sorted(locations)}")
    for line in found:
        print(f"gpu_rehearsal: problem: {line}")
    print(f"gpu_rehearsal: {'passed' if not found else f'{len(found)} problem(s)'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
