"""The CPU benchmarks and their shared harness. The repository root goes on ``sys.path`` here, so that the drivers,
the ranks and the tests import ``tools``: the package list, the results' schema and freshness, the page generators."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
