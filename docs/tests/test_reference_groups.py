"""The API reference lists each package's modules in two groups: what users import, then the internals.

What users import is read from the docs themselves (the package's own exports and the modules the readers' pages
and examples name); the contributors' pages come from mkdocs.yml's "Contributing" nav group.
"""

from __future__ import annotations

import re

import pytest

from tools.docgen import reference


def test_the_contributors_pages_come_from_the_nav() -> None:
    assert reference._contributors_pages() == {"architecture.md", "releasing.md"}


def test_the_guides_leave_out_contributors_pages_and_generated_benchmarks() -> None:
    text = reference.guides_text()
    assert "Where a change goes" in (reference.DOCS / "architecture.md").read_text(encoding="utf-8")
    assert "Where a change goes" not in text
    assert "precision_base.Trainer" in text


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("use `precision_fsdp.fabric.FSDPPrecision`", ["precision_fsdp.fabric"]),
        ("see precision_fsdp.float8.switch", ["precision_fsdp.float8"]),
        ("precision_fsdp.fabricated or x.precision_fsdp.fabric", []),
        ("from precision_fsdp.sharding import units", ["precision_fsdp.sharding"]),
    ],
)
def test_a_module_is_named_as_itself_or_as_the_prefix_of_a_name(text: str, named: list[str]) -> None:
    modules = ["precision_fsdp.fabric", "precision_fsdp.float8", "precision_fsdp.sharding"]
    assert reference.in_guides(modules, text) == named


def test_each_package_page_lists_what_users_import_before_the_internals() -> None:
    pages = reference.pages()
    fsdp = pages["precision_fsdp.md"]
    users, internals = fsdp.index("**What users import**"), fsdp.index("**Internals**")
    assert users < internals
    assert "[`precision_fsdp.plugin`]" in fsdp[users:internals]  # defines precision_fsdp.FSDPPrecision
    assert "[`precision_fsdp.fabric`]" in fsdp[users:internals]  # the guides name it
    assert "[`precision_fsdp.sharding.units`]" in fsdp[internals:]
    nav = pages["SUMMARY.md"]
    assert nav.index("    * What users import") < nav.index("    * Internals")


def test_every_reference_page_is_in_the_navigation_once() -> None:
    """Grouping leaves no module behind: each generated page (a package's own page, each module's) is linked from
    the section's navigation exactly once, and the navigation links no page that is not generated."""
    pages = reference.pages()
    nav = pages.pop("SUMMARY.md")
    linked = re.findall(r"\]\(([\w.]+\.md)\)", nav)
    assert sorted(linked) == sorted(pages)
    for package in reference.sources():
        if f"{package}.md" in pages and "What users import" in pages[f"{package}.md"]:
            listing = pages[f"{package}.md"].split("## Modules", 1)[1]
            modules = sorted(m[: -len(".md")] for m in pages if m.startswith(f"{package}.") and m != f"{package}.md")
            assert sorted(re.findall(r"\]\(([\w.]+)\.md\)", listing)) == modules, package
