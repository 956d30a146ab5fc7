"""The quick-start demo: train a small model on CPU through ``precision_base.Trainer(precision_plugin=...)``.

For every installed precision plugin, it prints what the name resolved to and the dtypes in effect, then runs
that backend's demo (``examples/demo_<backend>.py``), which trains for real on CPU.

    python examples/demo.py            # every installed backend
    python examples/demo.py fsdp       # only the named ones
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import precision_base
from precision_base.cli import main as plugins_cli

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    print(f"precision-base {precision_base.__version__}; installed plugins:\n")
    plugins_cli(["list"])
    wanted = set(argv)
    ran = []
    for entry in precision_base.list_plugins():
        if wanted and entry.backend not in wanted:
            continue
        if entry.status != "ok":
            print(f"\n== {entry.backend}: skipped, status {entry.status}: {entry.reason}")
            continue
        demo_file = HERE / f"demo_{entry.backend}.py"
        if not demo_file.exists():
            print(f"\n== {entry.backend}: no demo script at {demo_file.name}")
            continue
        print(f"\n== {entry.backend} ({entry.distribution} {entry.version})")
        sys.path.insert(0, str(HERE))
        importlib.import_module(f"demo_{entry.backend}").run()
        ran.append(entry.backend)
    missing = wanted - set(ran)
    if missing:
        print(f"\nnot demonstrated (not installed or not usable): {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    if not ran:
        print("\nno plugin demo ran: install one, e.g. pip install precision-fsdp", file=sys.stderr)
        return 1
    print(f"\ndemo finished for: {', '.join(ran)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
