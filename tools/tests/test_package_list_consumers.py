"""Copies of the package list that cannot read it at run time agree with it.

The one list is ``[tool.precision-plugins]`` in the root ``pyproject.toml`` (:func:`tools.packages.packages`). The
registry ships in the precision-base wheel, without that file, so it keeps its own ``PUBLISHED_DISTRIBUTIONS``,
which must name exactly the packages the list does. The docs' generators (tools/docgen/) read the list itself;
the test checks what they derive from it.
"""

from __future__ import annotations

from tools.docgen import errors, reference
from tools.packages import packages


def _backends() -> dict[str, str]:
    return {pkg.backend: pkg.dist for pkg in packages().values() if pkg.backend is not None}


def test_the_registrys_published_distributions_are_the_package_lists_backends() -> None:
    from precision_base.registry.statuses import PUBLISHED_DISTRIBUTIONS

    assert _backends() == PUBLISHED_DISTRIBUTIONS, (
        "precision_base.registry.statuses.PUBLISHED_DISTRIBUTIONS differs from the backends of "
        "[tool.precision-plugins] in pyproject.toml: change both"
    )


def test_the_docs_generators_read_the_package_list() -> None:
    assert errors.backends() == _backends()
    published = {pkg.module: pkg.src for pkg in packages().values() if getattr(pkg, "published", True)}
    assert reference.sources() == published
