"""Print (or write) the versions actually installed in the running environment, as JSON.

Run inside a nox session's virtualenv after installing: ``python -m tools.envreport -o report.json torch lightning``
(the noxfile names the distributions: the package list's and the backends'). Standard library only, so it runs on
every Python of the matrix and imports neither torch nor Lightning.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from importlib import metadata
from pathlib import Path


def installed(names: list[str]) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def report(names: list[str]) -> dict[str, object]:
    return {"python": platform.python_version(), "platform": sys.platform, "versions": installed(names)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("names", nargs="+", help="distributions whose installed version to report")
    args = parser.parse_args(argv)
    text = json.dumps(report(args.names), indent=2, sort_keys=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
