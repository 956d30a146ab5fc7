"""docs/architecture.md's "Where a change goes" table names files that exist: a moved or renamed module fails here
until the table says where the change goes now."""

from __future__ import annotations

import re

from tools.packages import ROOT, packages

SECTION = "## Where a change goes"


def _named_paths() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| change")]
    assert len(rows) >= 10, "the table has a row per kind of change"
    named = [token for row in rows for token in re.findall(r"`([^`\s]+)`", row)]
    return [t for t in named if ("/" in t or t.endswith((".py", ".toml"))) and "<" not in t]


def _exists(name: str) -> bool:
    """A path from the repository root, a module path from a package's src/ (``precision_fsdp/policy.py``), or a
    file name any plugin package has (``steps.py`` in a row about "the plugin's" files)."""
    name = name.rstrip("/")
    if (ROOT / name).exists():
        return True
    sources = [pkg.src for pkg in packages().values()]
    if any((src / name).exists() for src in sources):
        return True
    return "/" not in name and any((pkg.src / pkg.module / name).exists() for pkg in packages().values())


def test_every_file_the_table_names_exists() -> None:
    named = _named_paths()
    assert "precision_fsdp/sharding/sharded_init.py" in named
    assert "noxfile.py" in named
    missing = [name for name in named if not _exists(name)]
    assert missing == [], f"docs/architecture.md names files that do not exist: {missing}"
