"""Per-package versions and Keep-a-Changelog files: bump a version, check a version has an entry.

Bump one package (writes ``__about__.py`` and turns the changelog's ``## [Unreleased]`` section into
``## [<version>] - <date>``, leaving a fresh empty ``## [Unreleased]`` above it)::

    python -m tools.changelog bump precision-fsdp minor          # 0.1.0 -> 0.2.0
    python -m tools.changelog bump precision-fsdp 0.2.0rc1       # an explicit version
    python -m tools.changelog bump precision-base --release      # release the current version as is

Check before releasing that the current version has a dated changelog entry (exit 1 if not)::

    python -m tools.changelog check precision-fsdp

``check --all --allow-unreleased`` (run by ``nox -s build``) accepts a version that has not been released
yet as long as the changelog's ``Unreleased`` section has entries, and still catches a malformed changelog.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from tools.packages import Package, find, packages

HEADING_RE = re.compile(r"^## \[(?P<name>[^\]]+)\](?:\s*-\s*(?P<date>\d{4}-\d{2}-\d{2}))?\s*$", re.MULTILINE)
UNRELEASED = "Unreleased"


class ChangelogError(Exception):
    """A changelog or version file is not in the shape the tools expect."""


@dataclass(frozen=True)
class Section:
    name: str
    date: str | None
    start: int  # offset of the heading
    body_start: int  # offset after the heading line
    end: int  # offset of the next ``## `` heading, or of the file's end

    def body(self, text: str) -> str:
        return text[self.body_start : self.end]


def sections(text: str) -> list[Section]:
    found = list(HEADING_RE.finditer(text))
    result = []
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else _link_refs_start(text, m.end())
        result.append(Section(m.group("name"), m.group("date"), m.start(), m.end() + 1, end))
    return result


def _link_refs_start(text: str, after: int) -> int:
    """Keep-a-Changelog files may end with ``[x.y.z]: https://...`` link references; stop before them."""
    m = re.search(r"^\[[^\]]+\]:\s*\S+", text[after:], re.MULTILINE)
    return after + m.start() if m else len(text)


def has_entries(body: str) -> bool:
    return any(line.strip().startswith(("-", "*")) for line in body.splitlines())


def released_versions(text: str) -> list[Version]:
    versions = []
    for s in sections(text):
        if s.name == UNRELEASED:
            continue
        try:
            versions.append(Version(s.name))
        except InvalidVersion:
            raise ChangelogError(f"changelog heading [{s.name}] is neither 'Unreleased' nor a version") from None
    return versions


def check(pkg: Package, allow_unreleased: bool = False) -> str:
    """Return a one-line verdict, or raise :class:`ChangelogError`."""
    version = Version(pkg.version())
    text = pkg.changelog.read_text(encoding="utf-8")
    secs = sections(text)
    names = [s.name for s in secs]
    if len(set(names)) != len(names):
        raise ChangelogError(f"{pkg.changelog}: a heading appears twice: {names}")
    released = released_versions(text)
    if released != sorted(released, reverse=True):
        raise ChangelogError(f"{pkg.changelog}: versions are not newest first: {[str(v) for v in released]}")
    if released and released[0] > version:
        raise ChangelogError(
            f"{pkg.changelog} has an entry for {released[0]}, newer than {pkg.dist}'s version {version} in {pkg.about}"
        )
    if version in released:
        dated = next(s.date for s in secs if s.name != UNRELEASED and Version(s.name) == version)
        return f"{pkg.dist} {version}: changelog entry found" + ("" if dated else " (not dated yet)")
    unreleased = next((s for s in secs if s.name == UNRELEASED), None)
    if allow_unreleased and unreleased is not None and has_entries(unreleased.body(text)):
        return (
            f"{pkg.dist} {version}: not released yet; 'Unreleased' has entries "
            f"(run `python -m tools.changelog bump {pkg.dist} --release` or a bump before releasing)"
        )
    raise ChangelogError(
        f"{pkg.changelog} has no entry for {pkg.dist} {version}; run "
        f"`python -m tools.changelog bump {pkg.dist} <major|minor|patch|X.Y.Z|--release>` to write it"
    )


def next_version(current: Version, how: str) -> Version:
    if how in ("major", "minor", "patch"):
        major, minor, patch = ([*list(current.release), 0, 0])[:3]
        if how == "major":
            return Version(f"{major + 1}.0.0")
        if how == "minor":
            return Version(f"{major}.{minor + 1}.0")
        return Version(f"{major}.{minor}.{patch + 1}")
    try:
        return Version(how)
    except InvalidVersion:
        raise ChangelogError(f"{how!r} is neither major/minor/patch nor a version") from None


def release_changelog(text: str, version: Version, date: str) -> str:
    """Turn ``## [Unreleased]`` into ``## [version] - date`` under a fresh, empty ``## [Unreleased]``."""
    unreleased = next((s for s in sections(text) if s.name == UNRELEASED), None)
    if unreleased is None:
        raise ChangelogError("the changelog has no '## [Unreleased]' section to release")
    if not has_entries(unreleased.body(text)):
        raise ChangelogError("the changelog's 'Unreleased' section has no entries: write what changed first")
    if version in released_versions(text):
        raise ChangelogError(f"the changelog already has an entry for {version}")
    heading = f"## [{UNRELEASED}]\n\n## [{version}] - {date}\n"
    return text[: unreleased.start] + heading + text[unreleased.body_start :]


def write_version(about: Path, version: Version) -> None:
    text = about.read_text(encoding="utf-8")
    new, count = re.subn(
        r'^(__version__\s*=\s*)["\'][^"\']+["\']', rf'\g<1>"{version}"', text, count=1, flags=re.MULTILINE
    )
    if count != 1:
        raise ChangelogError(f"{about}: no __version__ line to rewrite")
    about.write_text(new, encoding="utf-8")


def bump(pkg: Package, how: str | None, date: str | None = None) -> Version:
    """Set ``pkg``'s version (``how=None`` keeps it) and release its changelog's Unreleased section."""
    current = Version(pkg.version())
    version = current if how is None else next_version(current, how)
    if how is not None and version <= current:
        raise ChangelogError(f"{pkg.dist}: new version {version} is not greater than {current}")
    text = pkg.changelog.read_text(encoding="utf-8")
    new_text = release_changelog(text, version, date or _dt.date.today().isoformat())
    pkg.changelog.write_text(new_text, encoding="utf-8")
    write_version(pkg.about, version)
    return version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.changelog", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_bump = sub.add_parser("bump", help="set a package's version and date its changelog's Unreleased section")
    p_bump.add_argument("package", help="precision-base, precision-fsdp, precision-deepspeed (or base/fsdp/...)")
    p_bump.add_argument("how", nargs="?", help="major, minor, patch or an explicit version")
    p_bump.add_argument("--release", action="store_true", help="keep the current version, only date its entry")
    p_bump.add_argument("--date", help="release date (default: today), YYYY-MM-DD")
    p_check = sub.add_parser("check", help="fail unless the package's current version has a changelog entry")
    p_check.add_argument("package", nargs="?")
    p_check.add_argument("--all", action="store_true", help="check every package")
    p_check.add_argument("--allow-unreleased", action="store_true", help="accept a not-yet-released version")
    args = parser.parse_args(argv)

    try:
        if args.command == "bump":
            if (args.how is None) == (not args.release):
                parser.error("give either a version/major/minor/patch or --release")
            pkg = find(args.package)
            version = bump(pkg, None if args.release else args.how, args.date)
            print(f"{pkg.dist} {version}: wrote {pkg.about.name} and {pkg.changelog.name}; tag: {pkg.dist}=={version}")
            return 0
        targets = list(packages().values()) if args.all else [find(args.package)] if args.package else []
        if not targets:
            parser.error("name a package or pass --all")
        for pkg in targets:
            print(check(pkg, allow_unreleased=args.allow_unreleased))
    except ChangelogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
