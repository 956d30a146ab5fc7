"""The quick-start demo: train a small model on CPU through ``precision_base.Trainer(precision_plugin=...)``.

For every installed precision plugin and each of the five precisions, it prints what the name resolved to and the
dtype of each role, then trains for real in 2 processes on CPU (``demo_<backend>.py``), or says why that precision
cannot train on this machine. With the fsdp backend, the same name then trains through Lightning Fabric.

    python examples/demo.py            # every installed backend
    python examples/demo.py fsdp       # only the named ones
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path
from typing import Any

import precision_base
from precision_base import PRECISIONS
from precision_base.cli import main as plugins_cli

HERE = Path(__file__).resolve().parent

LEGEND = """\
How to read the tables below: each role is the dtype a plugin gives one kind of tensor.
  parameters  what the parameters are stored in (the sharded / master copy the optimizer updates)
  compute     what the forward and backward matmuls run in
  reduction   what gradients are summed across the 2 processes in
  buffers     module buffers (e.g. BatchNorm statistics) during compute
  inputs      what the floating-point batch is cast to before forward
  init        tensors created while the model is built, and parameters before the strategy wraps them
  autocast    the dtype torch.autocast runs in during forward ("-": none, every op runs in the compute dtype)"""


def describe(spec: str) -> Any:
    """Resolve ``spec`` and print the plugin class and its dtype table on one line per role group."""
    plugin = precision_base.resolve(spec)
    table = plugin.dtypes()
    print(f"\n== {spec} -> {type(plugin).__module__}.{type(plugin).__qualname__}")
    print("   " + " | ".join(f"{role} {dtype}" for role, dtype in table.rows()))
    for note in table.notes:
        print(f"   note: {note}")
    return plugin


def demo_backend(backend: str) -> list[str]:
    """Every precision of ``backend``: its table, then a 2-process training or the reason it cannot run here."""
    from precision_base.errors import LaunchError
    from precision_testsupport.launch import run_ranks
    from precision_testsupport.models import QUIET

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # the checks below: no "GPU available" lines
    module = importlib.import_module(f"demo_{backend}")
    print(f"\n{(module.__doc__ or backend).strip().splitlines()[0]}")
    for line in getattr(module, "BEFORE", ()):
        print(f"   {line}")
    trained = []
    for precision in PRECISIONS:
        spec = f"{backend}:{precision}"
        plugin = describe(spec)
        for line in module.plugin_lines(plugin):
            print(f"   {line}")
        try:  # the same checks the real run makes, without starting it
            precision_base.Trainer(precision_plugin=spec, **module.trainer_kwargs(), **QUIET)
        except Exception as exc:  # the plugin's own refusal, shown verbatim
            print(f"   not trained on this machine: {type(exc).__name__}: {exc}")
            continue
        env = {"DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1", "PYTHONWARNINGS": "ignore"}
        try:
            result = run_ranks(f"{HERE / f'demo_{backend}.py'}:train", {"precision": precision}, world=2, threads=1,
                               timeout=900, env=env)  # fmt: skip
        except LaunchError as exc:
            print(f"   training failed:\n{exc}")
            raise
        print("   trained: " + "; ".join(f"{k} {v}" for k, v in result.items()))
        trained.append(precision)
    return trained


def demo_fabric() -> None:
    """The FSDP plugin through Lightning Fabric (``demo_fabric.py``), trained in 2 processes."""
    from precision_testsupport.launch import run_ranks

    module = importlib.import_module("demo_fabric")
    print(f"\n{(module.__doc__ or 'Lightning Fabric').strip().splitlines()[0]}")
    result = run_ranks(f"{HERE / 'demo_fabric.py'}:train", {"spec": module.SPEC}, world=2, threads=1, timeout=900,
                       env={"PYTHONWARNINGS": "ignore"})  # fmt: skip
    print("   trained: " + "; ".join(f"{k} {v}" for k, v in result.items()))


def main(argv: list[str]) -> int:
    print(f"precision-base {precision_base.__version__}; installed plugins:\n")
    plugins_cli(["list"])
    print(f"\n{LEGEND}")
    wanted, ran = set(argv), []
    for entry in precision_base.list_plugins():
        if wanted and entry.backend not in wanted:
            continue
        if entry.status != "ok":
            print(f"\n== {entry.backend}: skipped, status {entry.status}: {entry.reason}")
            continue
        if not (HERE / f"demo_{entry.backend}.py").exists():
            print(f"\n== {entry.backend}: no demo script demo_{entry.backend}.py")
            continue
        trained = demo_backend(entry.backend)
        skipped = [p for p in PRECISIONS if p not in trained]
        print(f"\n{entry.backend}: trained {', '.join(trained) or 'nothing'}"
              + (f"; not on this machine: {', '.join(skipped)} (reasons above)" if skipped else ""))  # fmt: skip
        ran.append(entry.backend)
    if "fsdp" in ran:
        demo_fabric()
    if missing := wanted - set(ran):
        print(f"\nnot demonstrated (not installed or not usable): {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    if not ran:
        print("\nno plugin demo ran: install one, e.g. pip install precision-fsdp", file=sys.stderr)
        return 1
    print(f"\ndemo finished for: {', '.join(ran)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
