"""``import precision_base``: what it lists, and what it does not import."""

from __future__ import annotations

import subprocess
import sys

import precision_base


def test_dir_lists_every_export_lazy_ones_included() -> None:
    missing = [name for name in precision_base.__all__ if name not in dir(precision_base)]
    assert missing == [], f"dir(precision_base) lacks {missing}"
    assert "Trainer" in dir(precision_base)
    assert "resolve_fabric" in dir(precision_base)


def test_dir_imports_nothing_heavy() -> None:
    code = (
        "import sys, precision_base; dir(precision_base); "
        "print(sorted(m for m in ('torch', 'lightning', 'pytorch_lightning', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
