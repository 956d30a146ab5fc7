"""tools/changelog.py: bumping one package's version and checking that a version has a changelog entry."""

from __future__ import annotations

import pytest
from packaging.version import Version

from tools import changelog
from tools.changelog import ChangelogError, bump, check, next_version, sections
from tools.packages import Package


@pytest.mark.parametrize(
    ("current", "how", "expected"),
    [
        ("0.1.0", "patch", "0.1.1"),
        ("0.1.3", "minor", "0.2.0"),
        ("0.9.3", "major", "1.0.0"),
        ("1.2", "patch", "1.2.1"),
        ("0.1.0", "0.3.0rc1", "0.3.0rc1"),
    ],
)
def test_next_version(current: str, how: str, expected: str) -> None:
    assert next_version(Version(current), how) == Version(expected)


def test_next_version_rejects_nonsense() -> None:
    with pytest.raises(ChangelogError, match="neither major/minor/patch nor a version"):
        next_version(Version("0.1.0"), "bigger")


def test_bump_minor_moves_unreleased_and_writes_version(pkg: Package) -> None:
    assert bump(pkg, "minor", date="2025-03-04") == Version("0.2.0")
    assert pkg.version() == "0.2.0"
    text = pkg.changelog.read_text()
    assert [(s.name, s.date) for s in sections(text)] == [
        ("Unreleased", None),
        ("0.2.0", "2025-03-04"),
        ("0.1.0", "2025-01-02"),
    ]
    new = next(s for s in sections(text) if s.name == "0.2.0")
    assert "- A new knob." in new.body(text)
    unreleased = sections(text)[0]
    assert unreleased.body(text).strip() == ""
    assert text.rstrip().endswith("[0.1.0]: https://example.invalid/precision-demo/0.1.0")
    assert check(pkg) == "precision-demo 0.2.0: changelog entry found"


def test_bump_refuses_an_empty_unreleased_section(pkg: Package) -> None:
    bump(pkg, "patch", date="2025-03-04")
    before = (pkg.changelog.read_text(), pkg.about.read_text())
    with pytest.raises(ChangelogError, match="no entries"):
        bump(pkg, "patch")
    assert (pkg.changelog.read_text(), pkg.about.read_text()) == before


def test_bump_refuses_going_backwards(pkg: Package) -> None:
    with pytest.raises(ChangelogError, match="not greater"):
        bump(pkg, "0.0.9")
    assert pkg.version() == "0.1.0"


def test_release_keeps_the_version(pkg: Package) -> None:
    pkg.about.write_text('__version__ = "0.1.1"\n')
    assert bump(pkg, None, date="2025-05-06") == Version("0.1.1")
    assert pkg.version() == "0.1.1"
    assert "## [0.1.1] - 2025-05-06" in pkg.changelog.read_text()


def test_check_fails_without_an_entry(pkg: Package) -> None:
    pkg.about.write_text('__version__ = "0.1.1"\n')
    with pytest.raises(ChangelogError, match=r"no entry for precision-demo 0\.1\.1.*tools\.changelog bump"):
        check(pkg)
    assert "not released yet" in check(pkg, allow_unreleased=True)


def test_an_undated_entry_counts(pkg: Package) -> None:
    pkg.changelog.write_text(pkg.changelog.read_text().replace("## [0.1.0] - 2025-01-02", "## [0.1.0]"))
    assert check(pkg) == "precision-demo 0.1.0: changelog entry found (not dated yet)"


def test_allow_unreleased_still_needs_entries(pkg: Package) -> None:
    pkg.about.write_text('__version__ = "0.1.1"\n')
    pkg.changelog.write_text(pkg.changelog.read_text().replace("### Added\n- A new knob.\n", ""))
    with pytest.raises(ChangelogError, match="no entry"):
        check(pkg, allow_unreleased=True)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.replace("## [0.1.0]", "## [zero]"), "neither 'Unreleased' nor a version"),
        (lambda t: t + "\n## [0.1.0] - 2024-01-01\n- again\n", "appears twice"),
        (lambda t: t.replace("## [Unreleased]", "## [0.2.0] - 2025-02-02"), "newer than"),
        (lambda t: t + "\n## [0.2.0] - 2025-02-02\n- out of order\n", "not newest first"),
    ],
)
def test_check_catches_malformed_changelogs(pkg: Package, mutate: object, message: str) -> None:
    pkg.changelog.write_text(mutate(pkg.changelog.read_text()))  # type: ignore[operator]
    with pytest.raises(ChangelogError, match=message):
        check(pkg, allow_unreleased=True)


def test_cli_bump_and_check(pkg: Package, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(changelog, "find", lambda name: pkg)
    assert changelog.main(["check", "precision-demo"]) == 0
    assert changelog.main(["bump", "precision-demo", "patch", "--date", "2025-07-08"]) == 0
    assert "tag: precision-demo==0.1.1" in capsys.readouterr().out
    assert changelog.main(["check", "precision-demo"]) == 0
    pkg.about.write_text('__version__ = "0.1.2"\n')
    assert changelog.main(["check", "precision-demo"]) == 1
    assert "no entry for precision-demo 0.1.2" in capsys.readouterr().err


def test_the_repositorys_changelogs_are_well_formed() -> None:
    from tools.packages import packages

    for real in packages().values():
        assert real.dist in check(real, allow_unreleased=True)
