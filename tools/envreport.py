"""Print (or write) the versions actually installed in the running environment, as JSON.

Run inside a nox session's virtualenv after installing: ``python -m tools.envreport -o report.json``.
Uses ``importlib.metadata`` only, so it imports neither torch nor Lightning.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from importlib import metadata
from pathlib import Path

WATCHED = (
    "torch",
    "lightning",
    "pytorch-lightning",
    "deepspeed",
    "precision-base",
    "precision-fsdp",
    "precision-deepspeed",
    "packaging",
    "pytest",
)


def installed(names: tuple[str, ...] = WATCHED) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def report() -> dict[str, object]:
    return {"python": platform.python_version(), "platform": sys.platform, "versions": installed()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args(argv)
    text = json.dumps(report(), indent=2, sort_keys=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
