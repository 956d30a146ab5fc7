"""The GPU node's first look (``tools/gpu_node.sh`` step 2, issue 29 item 2): what is installed against what the kit's
target file says, and the target's checks (git, a C compiler, ``Python.h``, ...), before the run.

``python3 -m tools.gpu_node_check KIT OUTDIR``: one line per finding on stdout (a difference is named and the run goes
on), and ``OUTDIR/node.json`` with all of it. The standard library only: it runs on the node before anything is
known to import, and needs no git (the commit is the kit's, from ``kit.json``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed_versions() -> dict[str, str]:
    """Every distribution this Python sees (the kit's ``site`` first when it is on ``PYTHONPATH``), first one wins."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        found.setdefault(_norm(dist.metadata["Name"] or ""), dist.version)
    return found


def _same(got: str, want: str) -> bool:
    """Whether version ``got`` is the target's ``want``; a ``want`` without a local label (``2.13.0``) takes any build
    of that release (``2.13.0+cpu``), as pip's ``==2.13.0`` does; one with a label (``2.11.0+cu130``) only itself."""
    return got == want or ("+" not in want and got.split("+")[0] == want)


def differences(target: dict[str, Any], manifest: list[dict[str, Any]], have: dict[str, str]) -> list[str]:
    """A line for each way this node differs from the target file and the kit: a version the target names that is not
    the one here, a package the target says is installed that is missing, a kit wheel that is not what imports."""
    lines = []
    where = target.get("_path", "the target file")
    for name, want in target.get("installed", {}).items():
        got = have.get(_norm(name))
        if got is None:
            lines.append(f"difference: {name} is not installed here; {where} says {want}")
        elif want != "*" and not _same(got, want):
            lines.append(f"difference: {name} is {got} here; {where} says {want}")
    for wheel in manifest:
        got = have.get(_norm(wheel["name"]))
        if got != wheel["version"]:
            seen = f"{got} is what this Python finds" if got else "it is not found"
            lines.append(f"difference: the kit carries {wheel['name']} {wheel['version']}, but {seen}")
    return lines


def run_checks(checks: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each check's shell command (exit 0: there), with its first line of output."""
    results = {}
    for name, command in checks.items():
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
        first = (done.stdout or done.stderr).strip().splitlines()[:1]
        results[name] = {"ok": done.returncode == 0, "exit": done.returncode, "output": first[0] if first else ""}
    return results


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m tools.gpu_node_check KIT OUTDIR", file=sys.stderr)
        return 2
    kit, out = Path(argv[0]), Path(argv[1])
    facts = json.loads((kit / "kit.json").read_text())
    manifest = json.loads((kit / "manifest.json").read_text())
    target_path = ROOT / facts["target"]
    target = tomllib.loads(target_path.read_text()) if target_path.is_file() else {}
    target["_path"] = facts["target"]
    have = installed_versions()
    lines = differences(target, manifest, have)
    checks = run_checks(facts.get("checks", {}))
    python = sys.version.split()[0]
    print(f"gpu_node: commit {facts.get('commit')} (the kit's), target {facts['target']}, Python {python}")
    for line in lines or ["no difference from the target file and the kit"]:
        print(f"gpu_node: {line}")
    for name, result in checks.items():
        said = "yes" if result["ok"] else f"no (exit {result['exit']})"
        print(f"gpu_node: check {name}: {said}" + (f": {result['output']}" if result["output"] else ""))
    record = {"commit": facts.get("commit"), "target": facts["target"], "python": python,
              "differences": lines, "checks": checks, "kit": {w["name"]: w["version"] for w in manifest},
              "versions": {name: have.get(_norm(name)) for name in target.get("installed", {})}}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "node.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
