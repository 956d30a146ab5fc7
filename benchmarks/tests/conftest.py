"""The benchmark code's non-timing logic; nothing here measures or asserts speed."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
