"""Installed distributions written straight into a folder on ``sys.path``, for fast in-process discovery tests.

:func:`add_distribution` writes what an installer leaves behind: a ``<name>-<version>.dist-info`` folder with
``METADATA`` and ``entry_points.txt``, and the package's source files beside it. ``importlib.metadata`` reads that
folder like any installed distribution, so discovery runs through the real metadata machinery in milliseconds.
(Real wheels installed into fresh venvs are in :mod:`precision_testsupport.wheels`.) Imports no torch.
"""

from __future__ import annotations

import importlib
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from precision_base.registry import Registry

__all__ = ["INFO_MODULE", "LITE_CLASS", "PluginSite", "add_distribution"]

INFO_MODULE = """\
from precision_base import PluginInfo

INFO = PluginInfo(backend={backend!r}, precisions=("32-true",), plugin_class={plugin_class!r}, summary={summary!r})
"""
"""Source of a plain info module; ``{backend}``, ``{plugin_class}`` and ``{summary}`` are filled in."""


def add_distribution(
    site: Path,
    name: str,
    *,
    version: Optional[str] = "1.0",
    entry_points: Sequence[tuple[str, str]] = (),
    files: Optional[Mapping[str, str]] = None,
    requires: Sequence[str] = (),
    group: str = "precision_base.plugins",
) -> Path:
    """Write distribution ``name`` into ``site`` (a folder that is, or will be, on ``sys.path``).

    Args:
        site: the folder standing for site-packages.
        name: the distribution name (``Name:`` in its metadata).
        version: ``Version:`` in its metadata; ``None`` leaves the field out (a damaged installation).
        entry_points: ``(name, "module:attr")`` pairs in ``group``, written in this order (duplicates kept).
        files: source files relative to ``site`` (e.g. ``{"pkg/__init__.py": ""}``), dedented.
        requires: ``Requires-Dist`` lines.
        group: the entry-point group.

    Returns:
        The ``.dist-info`` folder.
    """
    stem = name.replace("-", "_")
    info_dir = site / f"{stem}-{version or '0'}.dist-info"
    info_dir.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}"]
    if version is not None:
        lines.append(f"Version: {version}")
    lines += [f"Requires-Dist: {req}" for req in requires]
    (info_dir / "METADATA").write_text("\n".join(lines) + "\n")
    eps = "".join(f"{ep_name} = {value}\n" for ep_name, value in entry_points)
    (info_dir / "entry_points.txt").write_text(f"[{group}]\n{eps}")
    for relative, text in (files or {}).items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    importlib.invalidate_caches()
    return info_dir


LITE_CLASS = """\
from precision_base import DtypeTable, PrecisionPlugin


class LitePrecision(PrecisionPlugin):
    backend = {backend!r}
    precisions = ("32-true",)

    def __init__(self, precision, **options):
        self.precision = precision

    def dtypes(self):
        return DtypeTable("float32", "float32", "float32", "float32", "float32", "float32")
"""
"""Source of a pure-Python plugin class (resolvable without torch); ``{backend}`` is filled in."""


@dataclass
class PluginSite:
    """A folder on ``sys.path`` plus an entry-point group of its own, to write plugin distributions into.

    Module and distribution names carry ``tag``, so sites of different tests never share a module.
    """

    path: Path
    group: str
    tag: str

    def plugin(
        self,
        backend: str,
        dist: str = "",
        *,
        info_prelude: str = "",
        init: str = "",
        plugin_prelude: str = "",
        version: Optional[str] = "1.0",
        requires: Sequence[str] = (),
        entry_points: Sequence[tuple[str, str]] = (),
        summary: str = "",
    ) -> str:
        """Write a plugin distribution registering ``backend``; return its top-level module name.

        ``info_prelude``/``plugin_prelude`` are prepended to the info module / the plugin class module;
        ``init`` is the package's ``__init__.py``.
        """
        module = f"plug_{backend.replace('-', '_')}_{self.tag}"
        files = {
            f"{module}/__init__.py": init,
            f"{module}/_info.py": info_prelude
            + INFO_MODULE.format(backend=backend, plugin_class=f"{module}.plugin:LitePrecision", summary=summary),
            f"{module}/plugin.py": plugin_prelude + LITE_CLASS.format(backend=backend),
        }
        add_distribution(
            self.path,
            dist or f"precision-{backend}-{self.tag}",
            version=version,
            entry_points=entry_points or ((backend, f"{module}._info:INFO"),),
            files=files,
            requires=requires,
            group=self.group,
        )
        return module

    def registry(self) -> Registry:
        """A registry over this site's entry-point group."""
        from precision_base.registry import Registry

        return Registry(group=self.group)
