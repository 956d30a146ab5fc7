"""The release wiring: ``nox -s bump`` (hatch version + towncrier) on a copy of the real packages' metadata."""

from __future__ import annotations

import datetime
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.packages import ROOT, packages
from tools.tests.fake_repo import copy_tooling


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """noxfile.py, tools/, pyproject.toml and each package's metadata, changelog and version file (no fragments)."""
    copy_tooling(tmp_path)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for pkg in packages(unpublished=True).values():  # the package list names the unpublished ones too
        dest = tmp_path / pkg.path.relative_to(ROOT)
        (dest / "src" / pkg.module).mkdir(parents=True)
        shutil.copy(pkg.about, dest / "src" / pkg.module / "__about__.py")
        for name in ("pyproject.toml", "CHANGELOG.md", "README.md", "LICENSE"):
            if (pkg.path / name).exists():  # precision-testsupport, never released, has no CHANGELOG.md
                shutil.copy(pkg.path / name, dest / name)
        if (pkg.path / "changelog.d").is_dir():  # without the repository's pending fragments: only the test's own
            (dest / "changelog.d").mkdir()
            shutil.copy(pkg.path / "changelog.d" / "README.md", dest / "changelog.d" / "README.md")
    return tmp_path


def _nox(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    for tool in ("hatch", "towncrier"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not on PATH: run these tests through `nox -s tools`, which installs it")
    command = [sys.executable, "-m", "nox", "--no-venv", "--no-install", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=repo)


def test_bump_sets_the_version_and_renders_the_fragments(repo: Path) -> None:
    fsdp = repo / "packages" / "precision-fsdp"
    old = (fsdp / "src" / "precision_fsdp" / "__about__.py").read_text()
    (fsdp / "changelog.d" / "15.added.md").write_text("`FSDPPrecision` takes a name inside `plugins=`.\n")
    (fsdp / "changelog.d" / "+typo.fixed.md").write_text("A typo in an error message.\n")
    done = _nox(repo, "-s", "bump", "--", "fsdp", "minor")
    assert done.returncode == 0, done.stdout + done.stderr
    major, minor = (int(x) for x in old.split('"')[1].split(".")[:2])
    new = f"{major}.{minor + 1}.0"
    assert (fsdp / "src" / "precision_fsdp" / "__about__.py").read_text() == f'__version__ = "{new}"\n'
    changelog = (fsdp / "CHANGELOG.md").read_text()
    entry = f"## [{new}] - {datetime.date.today().isoformat()}\n\n### Added\n\n"
    entry += "- `FSDPPrecision` takes a name inside `plugins=`. (#15)\n\n### Fixed\n\n- A typo in an error message.\n"
    assert entry in changelog
    assert changelog.index("<!-- towncrier release notes start -->") < changelog.index(entry)
    assert sorted(p.name for p in (fsdp / "changelog.d").iterdir()) == ["README.md"]  # fragments consumed
    assert (repo / "packages" / "precision-base" / "CHANGELOG.md").read_text() == (
        ROOT / "packages" / "precision-base" / "CHANGELOG.md"
    ).read_text()  # other packages untouched


def test_bump_without_its_two_arguments_says_how_to_call_it(repo: Path) -> None:
    done = _nox(repo, "-s", "bump", "--", "fsdp")
    assert done.returncode == 1
    assert "usage: nox -s bump -- <package> <major|minor|patch|X.Y.Z>" in done.stderr


WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def test_every_action_is_pinned_by_commit_sha_with_its_version_and_dependabot_updates_them() -> None:
    import re

    uses = [
        (path.name, line.strip())
        for path in WORKFLOWS
        for line in path.read_text().splitlines()
        if re.match(r"\s*(- )?uses:", line)
    ]
    assert len(uses) >= 24
    pinned = re.compile(r"(- )?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+)*\Z")
    assert [u for u in uses if not pinned.match(u[1])] == []
    dependabot = (ROOT / ".github" / "dependabot.yml").read_text()
    assert "package-ecosystem: github-actions" in dependabot


def test_release_workflow_runs_only_from_main_or_the_packages_tag_and_publishes_per_package() -> None:
    text = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    gate = text[text.index("name: only from main or from this package's release tag") :]
    gate = gate[: gate.index("- uses:")]
    assert "refs/heads/main) " in gate
    assert '"refs/tags/${PACKAGE}=="*) ' in gate
    assert '*) echo "::error::Release runs from main or a ${PACKAGE}==<version> tag, not ${REF}"; exit 1 ;;' in gate
    assert text.index("only from main") < text.index("actions/checkout")  # before anything else of the build job
    assert "name: pypi-${{ inputs.package }}" in text  # one publishing environment per package
    assert "if: needs.build.outputs.from_tag != 'true'" in text  # a re-run from the tag does not tag again
    assert '-- "$PACKAGE" --release' in text  # the build's --release check: changelog entry, no fragments


def test_release_gate_accepts_main_and_the_tag_and_refuses_any_other_ref(tmp_path: Path) -> None:
    """The gate's shell, run as the workflow runs it (bash), for each kind of ref."""
    import re

    text = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    block = text[text.index("name: only from main or from this package's release tag") :]
    script = block[block.index("run: |\n") + len("run: |\n") : block.index("- uses:")]
    script = "\n".join(line[10:] for line in script.splitlines())
    results = {}
    for ref in ("refs/heads/main", "refs/tags/precision-fsdp==0.2.0", "refs/heads/feature", "refs/tags/v1"):
        out = tmp_path / "out"
        out.write_text("")
        env = {"REF": ref, "PACKAGE": "precision-fsdp", "GITHUB_OUTPUT": str(out), "PATH": "/usr/bin:/bin"}
        done = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True, env=env)
        results[ref] = (done.returncode, out.read_text().strip() or re.sub(r"\s+", " ", done.stdout.strip()))
    assert results == {
        "refs/heads/main": (0, "from_tag=false"),
        "refs/tags/precision-fsdp==0.2.0": (0, "from_tag=true"),
        "refs/heads/feature": (
            1,
            "::error::Release runs from main or a precision-fsdp==<version> tag, not refs/heads/feature",
        ),
        "refs/tags/v1": (1, "::error::Release runs from main or a precision-fsdp==<version> tag, not refs/tags/v1"),
    }
