"""What the machine must have before nox starts a session: checked when the noxfile loads, so a missing program stops
the run in its first seconds with one line, instead of after twenty minutes of other sessions.

Today one thing: the ``docs`` session's browser test needs a Chromium. It is there (on ``PATH`` or named by
``CHROMIUM``), or the session can install Debian's package itself (root, with ``apt-get``); otherwise, when the
sessions nox was asked for include ``docs``, the run stops before any session runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
NEEDS_CHROMIUM = "docs"
"""The session whose browser test needs Chromium (docs/tests/test_site.py)."""


@dataclass(frozen=True)
class Machine:
    """The facts the check reads; :func:`this_machine` reads them here, a test passes its own."""

    which: Callable[[str], str | None]
    env: Mapping[str, str]
    root: bool


def this_machine() -> Machine:
    return Machine(shutil.which, os.environ, os.geteuid() == 0)


def chromium(machine: Machine) -> str | None:
    """The Chromium the browser test will use: ``CHROMIUM`` when set, else the first of :data:`CHROMIUM_NAMES` on
    ``PATH``."""
    if machine.env.get("CHROMIUM"):
        return machine.env["CHROMIUM"]
    return next((path for name in CHROMIUM_NAMES if (path := machine.which(name))), None)


def can_install_chromium(machine: Machine) -> bool:
    """The docs session installs Debian's ``chromium`` itself where it runs as root with ``apt-get``."""
    return machine.root and machine.which("apt-get") is not None


def selected(argv: Sequence[str], tags_of: Mapping[str, Iterable[str]], default_tags: Sequence[str]) -> set[str] | None:
    """The session names a nox command line runs (``tags_of``: every session's name -> its tags), or None when it
    runs none (``-l``, ``--help``, ``--version``) or selects by keyword (``-k``: left to the session itself)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-s", "-e", "--session", "--sessions", nargs="*", dest="sessions")
    parser.add_argument("-t", "--tags", nargs="*")
    parser.add_argument("-k", "--keywords")
    for flag in ("-l", "--list", "--list-sessions", "--json", "-h", "--help", "--version"):
        parser.add_argument(flag, action="store_true", dest=flag.lstrip("-").replace("-", "_"))
    args, _rest = parser.parse_known_args(list(argv[: argv.index("--")] if "--" in argv else argv))
    if args.keywords or any(getattr(args, f) for f in ("l", "list", "list_sessions", "json", "h", "help", "version")):
        return None
    if args.sessions:
        return {name for name in tags_of if name in args.sessions or name.split("(")[0] in args.sessions}
    tags = set(args.tags or default_tags)
    return {name for name, own in tags_of.items() if tags & set(own)}


def problems(names: set[str], machine: Machine) -> list[str]:
    """One line per missing prerequisite of the sessions ``names``."""
    if NEEDS_CHROMIUM in names and chromium(machine) is None and not can_install_chromium(machine):
        return [
            "nox: nothing was run: the docs session's browser test needs Chromium and none is on PATH; install it "
            "(Debian/Ubuntu: `sudo apt-get install chromium`; as root with apt-get the session installs it itself) "
            "or set CHROMIUM=/path/to/chromium"
        ]
    return []
