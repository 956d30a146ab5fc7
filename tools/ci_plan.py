"""Which nox sessions a CI run needs, as a JSON list (one CI job per session).

``python -m tools.ci_plan --changed-from <git-rev>`` reads ``nox -l --json`` and the files changed since
``<git-rev>``, and prints ``sessions=[...]`` for ``$GITHUB_OUTPUT``:

* ``--full`` (nightly, manual): every matrix cell (``matrix`` tag) plus the CI slice's other sessions;
* otherwise the CI slice (``ci`` tag), keeping a package's test cell only if that package is touched.
  A change under the first package of the package list (precision-base), ``noxfile.py``, ``tools/``,
  ``.github/`` or ``pyproject.toml`` touches every package; so does an unknown diff (no base revision, e.g. a new
  branch). A path under ``tests-integration/`` or ``examples/`` that names a backend touches that package.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tools.packages import ROOT, packages, unpublished_packages

SHARED = ("noxfile.py", "tools/", ".github/", "pyproject.toml")
NOX_TAGS = ("-t", "ci", "matrix")  # bare `nox -l` lists only the CI slice (nox.options.tags)


def touched_packages(changed: Iterable[str] | None, root: Path = ROOT) -> set[str]:
    """Package tags (``base``, ``fsdp``, ``deepspeed``, ...) that a set of changed paths touches."""
    pkgs = list(packages(root).values())
    every = {p.tag for p in pkgs}
    if changed is None:
        return every
    # precision-base and the test helpers every package's tests import (unpublished workspace packages)
    everything = (*SHARED, f"packages/{pkgs[0].dist}/", *(f"packages/{p.dist}/" for p in unpublished_packages(root)))
    touched: set[str] = set()
    for path in changed:
        if path.startswith(everything):
            return every
        for pkg in pkgs[1:]:
            own = path.startswith(f"packages/{pkg.dist}/")
            if own or (path.startswith(("tests-integration/", "examples/")) and pkg.tag in path):
                touched.add(pkg.tag)
    return touched


def select(
    sessions: Sequence[Mapping[str, object]], changed: Iterable[str] | None, full: bool, root: Path = ROOT
) -> list[str]:
    def tags(s: Mapping[str, object]) -> set[str]:
        value = s.get("tags", [])
        return {str(tag) for tag in value} if isinstance(value, list) else set()

    package_tags = {p.tag for p in packages(root).values()}
    if full:
        chosen = [s for s in sessions if tags(s) & {"matrix", "ci"} and "table" not in tags(s)]  # the table: own job
    else:
        touched = touched_packages(changed, root)
        chosen = []
        for s in sessions:
            t = tags(s)
            if "ci" not in t:
                continue
            if t & package_tags and not t & package_tags & touched:
                continue
            chosen.append(s)
    return [str(s["session"]) for s in chosen]


def changed_files(base: str | None) -> list[str] | None:
    if not base or set(base) == {"0"}:
        return None
    proc = subprocess.run(["git", "diff", "--name-only", f"{base}...HEAD"], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"cannot diff against {base}: {proc.stderr.strip()}; selecting everything", file=sys.stderr)
        return None
    return [line for line in proc.stdout.splitlines() if line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changed-from", help="git revision to diff against (empty: everything)")
    parser.add_argument("--full", action="store_true", help="the whole matrix (nightly)")
    parser.add_argument("--sessions-json", help="read `nox -l --json` output from this file instead of running nox")
    args = parser.parse_args(argv)
    if args.sessions_json:
        with open(args.sessions_json, encoding="utf-8") as fh:
            listed = json.load(fh)
    else:
        out = subprocess.run(
            [sys.executable, "-m", "nox", "-l", "--json", *NOX_TAGS], capture_output=True, text=True, check=True
        )
        listed = json.loads(out.stdout)
    chosen = select(listed, None if args.full else changed_files(args.changed_from), args.full)
    print(f"sessions={json.dumps(chosen)}")
    print(f"{len(chosen)} sessions: {chosen}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
