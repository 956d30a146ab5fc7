"""What every backend demo does around its training: print the resolved plugin, train in a child process.

Lightning's launcher starts rank 1 by re-running the script it finds in ``sys.argv``, so each demo's training runs as
its own script (``python examples/demo_<backend>.py --train <precision>``), never inside the caller's process.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import Any


def print_plugin(spec: str, extra: Callable[[Any], Iterable[str]] = lambda plugin: ()) -> None:
    """Resolve ``spec`` and print the plugin class, its dtype table and notes, and ``extra(plugin)`` lines."""
    import precision_base

    plugin = precision_base.resolve(spec)
    table = plugin.dtypes()
    print(f"\n== {spec} -> {type(plugin).__module__}.{type(plugin).__qualname__}")
    for role, dtype in table.rows():
        print(f"   {role:<11} {dtype}")
    for note in table.notes:
        print(f"   note: {note}")
    for line in extra(plugin):
        print(f"   {line}")


def train_in_child(script: str, backend: str, precision: str, timeout: float) -> None:
    """Run ``script --train precision`` and show the lines rank 0 printed with the ``[backend:`` prefix."""
    proc = subprocess.run(
        [sys.executable, script, "--train", precision], capture_output=True, text=True, timeout=timeout
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(f"[{backend}:")]
    print("\n".join(f"   {line}" for line in lines))
    if proc.returncode != 0:
        raise RuntimeError(f"{backend}:{precision} demo training failed:\n{proc.stderr[-3000:]}")


def main(train: Callable[[str], None], run: Callable[[], None]) -> None:
    """The demo scripts' entry point: ``--train <precision>`` trains (in the child), anything else runs the demo."""
    if len(sys.argv) == 3 and sys.argv[1] == "--train":
        warnings.filterwarnings("ignore")
        train(sys.argv[2])
    else:
        run()
