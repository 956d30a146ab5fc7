"""``precision-plugins recommend --measure TARGET``: [`tune_precision`][precision_base.tune.search.tune_precision]
from the command line. Its progress on stderr (a bar on a terminal; one line per candidate as it finishes), then
the table (or ``--json``) on stdout; ``--out DIR`` also writes ``DIR/tune.json`` and, where matplotlib is
installed, ``DIR/tune.png`` ([`precision_base.tune.plot`][]). Exit 0 when a candidate was picked, 1 when none
trained within the tolerance (errors: 2, from the CLI's handler)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional, TextIO

from precision_base.tune.search import DEFAULT_TOLERANCE, Trial, tune_precision


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--measure`` options of ``recommend``."""
    parser.add_argument(
        "--measure",
        metavar="TARGET",
        help="measure instead of guessing: 'module:factory' or 'path.py:factory', a function returning your "
        "LightningModule (or a (module, dataloader) pair); every candidate trains it in a fresh process",
    )
    parser.add_argument("--candidates", help="comma-separated plugin names to try (default: what runs here)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per candidate (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="steps left out of the timing (default 3)")
    parser.add_argument("--budget", type=float, default=None, help="seconds for the whole search")
    parser.add_argument(
        "--tolerance", type=float, default=DEFAULT_TOLERANCE,
        help=f"largest mean relative loss deviation from 32-true (default {DEFAULT_TOLERANCE})",
    )  # fmt: skip
    parser.add_argument("--devices", default="1", help="the Trainer's devices for every candidate (default 1)")
    parser.add_argument("--accelerator", default="auto", help="the Trainer's accelerator (default auto)")
    parser.add_argument("--out", type=Path, default=None, help="also write tune.json (and tune.png) into this folder")


class Progress:
    """The search's progress on ``stream``: on a terminal, a tqdm bar over the runs (the reference, then each
    candidate) naming the one training, with each finished candidate's line printed above it; elsewhere (a log, a
    pipe) only the finished candidates' lines, one each."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.bar: Optional[Any] = None
        self.use_bar = stream.isatty()

    def start(self, spec: str, position: int, total: int) -> None:
        if not self.use_bar:
            return
        if self.bar is None:
            from tqdm import tqdm  # Lightning's own dependency: present wherever a candidate can train

            self.bar = tqdm(total=total, file=self.stream, unit="run", leave=False, dynamic_ncols=True)
        self.bar.set_description(f"[measure] training {spec}")

    def finish(self, trial: Trial) -> None:
        timing = f"{trial.step_ms:.1f} ms/step" if trial.step_ms is not None else trial.reason
        line = f"[measure] {trial.spec}: {trial.status}, {timing} ({trial.wall_s:.0f} s)"
        if self.bar is None:
            print(line, file=self.stream, flush=True)
            return
        self.bar.write(line, file=self.stream)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(args: argparse.Namespace) -> int:
    """Run the search ``args`` describes and print it."""
    devices = int(args.devices) if str(args.devices).isdigit() else args.devices
    candidates = [c.strip() for c in args.candidates.split(",") if c.strip()] if args.candidates else None
    progress = Progress(sys.stderr)
    try:
        result = tune_precision(
            args.measure, candidates=candidates, steps=args.steps, warmup=args.warmup, budget_s=args.budget,
            tolerance=args.tolerance, devices=devices, accelerator=args.accelerator, on_trial=progress.finish,
            on_start=progress.start,
        )  # fmt: skip
    finally:
        progress.close()
    data = result.as_dict()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tune.json").write_text(json.dumps(data, indent=2) + "\n")
        try:
            from precision_base.tune.plot import draw

            draw(result, args.out / "tune.png")
        except ImportError as exc:  # matplotlib is optional: say what is missing, keep the JSON
            print(f"[measure] {args.out / 'tune.png'} not written: {exc} (pip install matplotlib); tune.json is",
                  file=sys.stderr)  # fmt: skip
    print(json.dumps(data, indent=2) if args.json else result.render())
    return 0 if result.picked else 1


__all__ = ["Progress", "add_arguments", "run"]
