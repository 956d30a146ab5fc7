"""The one package list: what it holds, and that a fourth package is a folder plus one line.

The fourth-package test copies the real noxfile.py and tools/ next to four tiny packages and asks the real
readers (nox's session list, CI planning, the dist checks) what they see.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tools import ci_plan
from tools.check_dist import check_dir
from tools.packages import ROOT, find, packages
from tools.tests.fake_repo import build, copy_tooling, make_package, write_package_list

REAL_ROWS = [
    '{ dist = "precision-base", forbid = ["torch", "lightning", "pytorch-lightning", "deepspeed"] }',
    '{ dist = "precision-fsdp", backend = "fsdp", forbid = ["deepspeed"] }',
    '{ dist = "precision-deepspeed", backend = "deepspeed" }',
]
FOURTH = '{ dist = "precision-fake", backend = "fake", forbid = ["deepspeed"] }'


def test_the_repository_lists_its_three_packages_base_first() -> None:
    found = list(packages().values())
    assert [p.dist for p in found] == ["precision-base", "precision-fsdp", "precision-deepspeed"]
    assert [p.tag for p in found] == ["base", "fsdp", "deepspeed"]
    assert find("fsdp") == find("precision_fsdp") == find("precision-fsdp")


def test_the_test_helpers_are_listed_as_a_package_that_is_never_published() -> None:
    """precision-testsupport is in the list with ``published = false``: left out of :func:`packages` (so of every
    build, release, matrix cell and docs list), found only when asked for, refused by the release's name check."""
    from tools.packages import unpublished_packages

    (helpers,) = unpublished_packages()
    assert (helpers.dist, helpers.module, helpers.published) == (
        "precision-testsupport",
        "precision_testsupport",
        False,
    )
    assert "precision_testsupport" not in packages()
    assert find("testsupport", unpublished=True) == helpers
    with pytest.raises(SystemExit, match="unknown package 'precision-testsupport'; expected one of precision-base"):
        find("precision-testsupport")  # the release workflow's first step
    classifiers = tomllib.loads(helpers.pyproject.read_text())["project"]["classifiers"]
    assert "Private :: Do Not Upload" in classifiers  # PyPI refuses such an upload


def test_each_backend_in_the_list_is_the_entry_point_its_pyproject_declares() -> None:
    for pkg in packages().values():
        project = tomllib.loads(pkg.pyproject.read_text())["project"]
        declared = list(project.get("entry-points", {}).get("precision_base.plugins", {}))
        assert declared == ([pkg.backend] if pkg.backend else []), pkg.dist


def test_an_unknown_name_and_a_listed_folder_that_is_missing_are_errors(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="unknown package 'tpu'; expected one of precision-base, precision-fsdp"):
        find("tpu")
    write_package_list(tmp_path, REAL_ROWS[:1])
    with pytest.raises(
        SystemExit, match=r"lists precision-base, but .*/packages/precision-base/pyproject.toml does not"
    ):
        packages(tmp_path)


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository's tooling with a fourth package: its folder and one more line in the list."""
    root = tmp_path_factory.mktemp("four")
    copy_tooling(root)
    write_package_list(root, [*REAL_ROWS, FOURTH])
    make_package(root, "precision-base", ["packaging>=22"], entry_point=False)
    make_package(root, "precision-fsdp", ["precision-base>=0.1,<1"], entry_point=True)
    make_package(root, "precision-deepspeed", ["precision-base>=0.1,<1"], entry_point=True)
    make_package(root, "precision-fake", ["precision-base>=0.1,<1"], entry_point=True)
    return root


def test_a_fourth_package_is_listed(four: Path) -> None:
    fake = find("fake", four)
    assert (fake.dist, fake.module, fake.backend, fake.forbid) == (
        "precision-fake",
        "precision_fake",
        "fake",
        ("deepspeed",),
    )
    assert list(packages(four))[-1] == "precision_fake"


def test_a_fourth_package_gets_nox_sessions_and_ci_jobs(four: Path) -> None:
    pytest.importorskip("nox")
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "-l", "--json", *ci_plan.NOX_TAGS], capture_output=True, text=True, cwd=four
    )
    assert listed.returncode == 0, listed.stderr
    sessions = json.loads(listed.stdout)
    fake = [s for s in sessions if "precision_fake" in s["session"]]
    names = {s["session"] for s in fake}
    assert "tests-precision_fake(python='3.11', torch='2.13', lightning='2.6')" in names
    assert "lowest-precision_fake" in names
    assert all("fake" in s["tags"] and "matrix" in s["tags"] for s in fake)
    # CI planning: a change inside the new package runs its CI cell and not the other plugins' cells
    chosen = ci_plan.select(sessions, ["packages/precision-fake/src/precision_fake/x.py"], full=False, root=four)
    assert "tests-precision_fake(python='3.11', torch='2.13', lightning='2.6')" in chosen
    assert not any(name.startswith(("tests-precision_fsdp", "tests-precision_deepspeed")) for name in chosen)
    assert ci_plan.touched_packages(["packages/precision-base/x.py"], four) == {"base", "fsdp", "deepspeed", "fake"}


def test_a_fourth_package_is_checked_when_built(four: Path) -> None:
    pytest.importorskip("build")
    fake = find("fake", four)
    build(fake, four / "dist")
    checked, problems = check_dir(four / "dist", root=four)
    assert problems == []
    assert len(checked) == 2
    assert all(name.startswith("precision_fake-0.3.0") for name in checked)


def test_the_package_list_is_the_only_one_in_the_tooling() -> None:
    """No tool, workflow or the noxfile spells the three distributions out again (the list is read instead)."""
    readers = [ROOT / "noxfile.py", *(ROOT / "tools").glob("*.py"), *(ROOT / "tools" / "docgen").glob("*.py")]
    readers += (ROOT / ".github" / "workflows").glob("*.yml")
    for path in readers:
        if path.name == "errors.py":  # the docs' error page quotes names in its examples
            continue
        text = path.read_text()
        assert "precision-deepspeed" not in text, path
        assert "precision_deepspeed" not in text, path


DOCS_URL = "https://precision-plugins.github.io/precision-plugins/"


def test_package_readmes_link_absolutely_and_metadata_names_the_published_docs() -> None:
    """PyPI renders a package's README without the repository around it, so every link there is absolute; the docs
    URL in the metadata is where the docs workflow publishes (GitHub Pages)."""
    import re

    for pkg in packages().values():
        readme = (pkg.path / "README.md").read_text()
        relative = [t for t in re.findall(r"\]\(([^)\s]+)\)", readme) if not t.startswith(("https://", "#"))]
        assert relative == [], f"{pkg.dist}/README.md has relative links: {relative}"
        urls = tomllib.loads(pkg.pyproject.read_text())["project"]["urls"]
        assert urls["Documentation"] == DOCS_URL, pkg.dist
    assert DOCS_URL in (ROOT / ".github" / "workflows" / "docs.yml").read_text()


def test_requires_reads_run_time_dependencies_not_extras() -> None:
    """lowest-<module> keeps torch at its declared floor only where the package declares one."""
    found = {pkg.dist: (pkg.requires("torch"), pkg.requires("lightning")) for pkg in packages().values()}
    assert found["precision-base"] == (False, False)  # Lightning only through the [lightning] extra
    assert found["precision-fsdp"] == (True, True)
    assert found["precision-deepspeed"] == (True, True)
