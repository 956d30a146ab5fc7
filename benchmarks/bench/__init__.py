"""The CPU benchmarks and their shared harness; the repository root goes on ``sys.path`` here, for ``tools``."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
