"""Build hook: the backends this project publishes, written into the package at build time from the one list.

The repository's package list (``[tool.precision-plugins]`` in the root ``pyproject.toml``) names each plugin's
distribution and the backend it registers. precision-base needs those pairs at run time, to offer the install line
for a backend that is not installed and to refuse a third-party distribution that registers a published backend's
name, but it must not name any backend in its code. So every build (wheel, editable, sdist) writes them to
``src/precision_base/registry/published.json``, which is git-ignored and shipped as a build artifact. An sdist
carries the file, so a wheel built from it (where the repository is not around) keeps it. This file is in the sdist
only, never in the wheel.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

try:
    import tomllib
except ImportError:  # Python 3.10: hatchling itself depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

CATALOG = Path("src", "precision_base", "registry", "published.json")


def published(repository_pyproject: Path) -> Optional[dict[str, str]]:
    """``{backend: distribution}`` of the package list's published plugins; ``None`` where ``repository_pyproject``
    is not the repository's root ``pyproject.toml`` (a built sdist has none two folders up)."""
    try:
        table = tomllib.loads(repository_pyproject.read_text(encoding="utf-8")).get("tool", {}).get("precision-plugins")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    if table is None:
        return None
    return {
        row["backend"]: row["dist"]
        for row in table["packages"]
        if row.get("backend") is not None and row.get("published", True)
    }


class PublishedBackendsHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        target = root / CATALOG
        repository = root.parent.parent / "pyproject.toml"
        listed = published(repository)
        if listed is not None:
            text = json.dumps(listed, indent=1) + "\n"  # the package list's order
            if not target.is_file() or target.read_text(encoding="utf-8") != text:
                partial = target.with_suffix(".json.tmp")
                partial.write_text(text, encoding="utf-8")
                os.replace(partial, target)  # whole or not at all, even with builds side by side
        elif not target.is_file():
            raise RuntimeError(
                f"{CATALOG} is missing and there is no repository package list at {repository} to write it from: "
                "build precision-base from the repository or from its sdist"
            )
