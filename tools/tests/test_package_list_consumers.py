"""Copies of the package list that cannot read it at run time agree with it.

The one list is ``[tool.precision-plugins]`` in the root ``pyproject.toml`` (:func:`tools.packages.packages`). The
registry ships in the precision-base wheel, without that file, so it keeps its own ``PUBLISHED_DISTRIBUTIONS``; the
docs hooks keep theirs (``EXPECTED_BACKENDS``, which the strategy-error block iterates too, and ``PACKAGE_SOURCES``)
for pages built where a plugin is missing. Each must name exactly the packages the list does.
"""

from __future__ import annotations

from tools import docs_hooks
from tools.packages import packages


def _backends() -> dict[str, str]:
    return {pkg.backend: pkg.dist for pkg in packages().values() if pkg.backend is not None}


def test_the_registrys_published_distributions_are_the_package_lists_backends() -> None:
    from precision_base.registry import PUBLISHED_DISTRIBUTIONS

    assert _backends() == PUBLISHED_DISTRIBUTIONS, (
        "precision_base.statuses.PUBLISHED_DISTRIBUTIONS differs from the backends of [tool.precision-plugins] "
        "in pyproject.toml: change both"
    )


def test_the_docs_hooks_backend_lists_are_the_package_lists() -> None:
    assert _backends() == docs_hooks.EXPECTED_BACKENDS, "tools/docs_hooks.py EXPECTED_BACKENDS: change it with the list"
    sources = {pkg.module: pkg.src for pkg in packages().values()}
    assert sources == docs_hooks.PACKAGE_SOURCES, "tools/docs_hooks.py PACKAGE_SOURCES: change it with the list"
