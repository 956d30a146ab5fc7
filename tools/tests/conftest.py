from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.packages import Package

CHANGELOG = """# Changelog

All notable changes to `precision-demo` are documented here.

## [Unreleased]

### Added
- A new knob.

## [0.1.0] - 2025-01-02

### Added
- First release.

[0.1.0]: https://example.invalid/precision-demo/0.1.0
"""


@pytest.fixture
def pkg(tmp_path: Path) -> Package:
    """A throwaway package with version 0.1.0, a released 0.1.0 entry and an Unreleased section with an entry."""
    path = tmp_path / "packages" / "precision-demo"
    (path / "src" / "precision_demo").mkdir(parents=True)
    (path / "src" / "precision_demo" / "__about__.py").write_text('__version__ = "0.1.0"\n')
    (path / "CHANGELOG.md").write_text(CHANGELOG)
    return Package(dist="precision-demo", module="precision_demo", path=path)
