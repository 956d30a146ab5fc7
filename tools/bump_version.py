"""Bump one package's version and date its changelog: ``python tools/bump_version.py precision-fsdp minor``.

A shortcut for ``python -m tools.changelog bump ...``; see :mod:`tools.changelog` for the options.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tools.changelog import main

    raise SystemExit(main(["bump", *sys.argv[1:]]))
