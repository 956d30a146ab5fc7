"""tools/check_dist.py against wheels built from tiny projects (good ones and ones that break the rules)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tools.check_dist import check_dir
from tools.packages import Package
from tools.tests.fake_repo import build, make_package, write_package_list

ROWS = [
    '{ dist = "precision-base", forbid = ["torch", "lightning", "pytorch-lightning", "deepspeed"] }',
    '{ dist = "precision-fsdp", backend = "fsdp", forbid = ["deepspeed"] }',
    '{ dist = "precision-deepspeed", backend = "deepspeed" }',
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build")
    pytest.importorskip("hatchling")
    root = tmp_path_factory.mktemp("repo")
    write_package_list(root, ROWS[:2])
    out = root / "dist"
    build(make_package(root, "precision-base", ["packaging>=22"], entry_point=False), out)
    build(make_package(root, "precision-fsdp", ["precision-base>=0.3,<1", "torch>=2.6"], entry_point=True), out)
    return root


def test_good_distributions_pass(built: Path) -> None:
    checked, problems = check_dir(built / "dist", root=built)
    assert problems == []
    assert len(checked) == 4


@pytest.mark.parametrize(
    ("dist", "deps", "entry_point", "typed", "license_file", "expected"),
    [
        ("precision-base", ["packaging>=22", "torch>=2.6"], False, True, True, "must not depend on torch"),
        ("precision-fsdp", ["precision-base>=0.1,<1", "deepspeed>=0.16"], True, True, True, "must not depend on deep"),
        ("precision-fsdp", ["precision-base==0.1"], True, True, True, "floor and a major cap"),
        ("precision-fsdp", ["precision-base>=0.1"], True, True, True, "floor and a major cap"),
        ("precision-deepspeed", ["precision-base>=0.1,<1"], False, True, True, "no entry point 'deepspeed'"),
        ("precision-deepspeed", ["precision-base>=0.1,<1"], True, False, True, "missing precision_deepspeed/py.typed"),
        ("precision-fsdp", ["precision-base>=0.1,<1"], True, True, False, "missing LICENSE"),
        ("precision-fsdp", ["precision-base>=0.1,<1"], True, True, False, "dist-info/licenses/LICENSE"),
    ],
)
def test_rule_breakers_are_reported(
    tmp_path: Path, dist: str, deps: list[str], entry_point: bool, typed: bool, license_file: bool, expected: str
) -> None:
    pytest.importorskip("build")
    write_package_list(tmp_path, ROWS)
    pkg = make_package(tmp_path, dist, deps, entry_point, typed, license_file)
    for other in {"precision-base", "precision-fsdp", "precision-deepspeed"} - {dist}:  # listed, not built here
        (tmp_path / "packages" / other).mkdir(parents=True)
        (tmp_path / "packages" / other / "pyproject.toml").write_text("")
    build(pkg, tmp_path / "dist")
    _, problems = check_dir(tmp_path / "dist", root=tmp_path)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    ("deps", "extras", "expected"),
    [
        (["precision-base>=0.1,<1", "lightning>=2.4"], None, "lightning>=2.4, which admits lightning 2.6.2, 2.6.3"),
        (["precision-base>=0.1,<1", "lightning>=2.4,!=2.6.2"], None, "which admits lightning 2.6.3 (malicious"),
        (["precision-base>=0.1,<1", "pytorch-lightning==2.6.*"], None, "admits pytorch-lightning 2.6.2, 2.6.3"),
        (["precision-base>=0.1,<1"], {"lightning": ["lightning>=2.5"]}, 'lightning>=2.5; extra == "lightning", which'),
    ],
)
def test_a_requirement_admitting_the_malicious_lightning_releases_is_refused(
    tmp_path: Path, deps: list[str], extras: dict[str, list[str]] | None, expected: str
) -> None:
    pytest.importorskip("build")
    write_package_list(tmp_path, ROWS[:2])
    make_package(tmp_path, "precision-base", ["packaging>=22"], entry_point=False)  # listed first, not built
    build(make_package(tmp_path, "precision-fsdp", deps, entry_point=True, extras=extras), tmp_path / "dist")
    _, problems = check_dir(tmp_path / "dist", root=tmp_path)
    assert any(expected in p and "GHSA-w37p-236h-pfx3" in p and "add !=2.6.2,!=2.6.3" in p for p in problems), problems


def test_the_real_wheels_exclude_the_malicious_lightning_releases(tmp_path: Path) -> None:
    """The three packages of this repository, built as the release builds them, then read from the wheels'
    METADATA: every Lightning requirement (precision-base's `[lightning]` extra included) excludes 2.6.2 and 2.6.3."""
    pytest.importorskip("build")
    from tools.check_dist import BANNED, _metadata
    from tools.packages import packages

    seen = {}
    for pkg in packages().values():
        build(pkg, tmp_path)
        (wheel,) = tmp_path.glob(f"{pkg.module}-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            _, _, requires = _metadata(zf.read(meta).decode())
        seen[pkg.dist] = [str(r) for r in requires if r.name in BANNED]
        for req in requires:
            if req.name in BANNED:
                assert not any(req.specifier.contains(v, prereleases=True) for v in BANNED[req.name][0]), req
    assert seen == {
        "precision-base": ['lightning!=2.6.2,!=2.6.3,>=2.4; extra == "lightning"'],
        "precision-fsdp": ["lightning!=2.6.2,!=2.6.3,>=2.4"],
        "precision-deepspeed": ["lightning!=2.6.2,!=2.6.3,>=2.4"],
    }
    checked, problems = check_dir(tmp_path)
    assert problems == []
    assert len(checked) == 6


def test_version_mismatch_and_missing_sdist(built: Path, tmp_path: Path) -> None:
    import shutil

    dist = tmp_path / "dist"
    dist.mkdir()
    for wheel in (built / "dist").glob("precision_fsdp-*.whl"):
        shutil.copy(wheel, dist)
    about = built / "packages" / "precision-fsdp" / "src" / "precision_fsdp" / "__about__.py"
    original = about.read_text()
    about.write_text('__version__ = "0.4.0"\n')
    try:
        _, problems = check_dir(dist, root=built)
    finally:
        about.write_text(original)
    assert any("metadata version 0.3.0 != " in p for p in problems), problems
    assert any("found only ['wheel']" in p for p in problems), problems


def test_release_needs_a_changelog_entry_for_the_version(built: Path) -> None:
    _, problems = check_dir(built / "dist", only="precision-fsdp", root=built, release=True)
    assert problems == [
        "precision_fsdp-0.3.0.tar.gz: CHANGELOG.md has no '## [0.3.0]' entry; "
        "run `nox -s bump -- precision-fsdp <how>` first"
    ]


@pytest.mark.parametrize("dist", ["precision-base", "precision-fsdp"])
def test_release_refuses_unrendered_fragments_of_the_package_itself(tmp_path: Path, dist: str) -> None:
    pytest.importorskip("build")
    write_package_list(tmp_path, ROWS[:2])
    pkgs = {
        "precision-base": make_package(tmp_path, "precision-base", ["packaging>=22"], entry_point=False),
        "precision-fsdp": make_package(tmp_path, "precision-fsdp", ["precision-base>=0.3,<1"], entry_point=True),
    }
    pkg = pkgs[dist]
    pkg.changelog.write_text(pkg.changelog.read_text() + "\n## [0.3.0] - 2026-11-30\n")
    (pkg.path / "changelog.d").mkdir()
    (pkg.path / "changelog.d" / "README.md").write_text("not a fragment\n")
    (pkg.path / "changelog.d" / "21.security.md").write_text("Lightning 2.6.2 and 2.6.3 excluded.\n")
    build(pkg, tmp_path / "dist")
    _, problems = check_dir(tmp_path / "dist", only=dist, root=tmp_path, release=True)
    assert problems == [
        f"{dist}: 1 changelog fragment(s) in {dist}/changelog.d/ are not in CHANGELOG.md (21.security.md): "
        f"run `nox -s bump -- {dist} <how>`, which renders them into the version's entry"
    ]
    (pkg.path / "changelog.d" / "21.security.md").unlink()  # what `nox -s bump` does once it rendered them
    assert check_dir(tmp_path / "dist", only=dist, root=tmp_path, release=True)[1] == []


def test_release_of_a_plugin_needs_a_released_current_precision_base(tmp_path: Path) -> None:
    pytest.importorskip("build")
    write_package_list(tmp_path, ROWS[:2])
    base = make_package(tmp_path, "precision-base", ["packaging>=22"], entry_point=False)
    fsdp = make_package(tmp_path, "precision-fsdp", ["precision-base>=0.1,<1"], entry_point=True)
    fsdp.changelog.write_text(fsdp.changelog.read_text() + "\n## [0.3.0] - 2026-11-30\n")
    (base.path / "changelog.d").mkdir()
    (base.path / "changelog.d" / "README.md").write_text("not a fragment\n")
    (base.path / "changelog.d" / "12.added.md").write_text("A new helper the plugins call.\n")
    build(fsdp, tmp_path / "dist")
    _, problems = check_dir(tmp_path / "dist", only="precision-fsdp", root=tmp_path, release=True)
    assert [p.split(".whl: ", 1)[1] for p in problems] == [
        "precision-fsdp was tested against unreleased changes of precision-base (precision-base/changelog.d/ "
        "holds 1, e.g. 12.added.md): release precision-base first (`nox -s bump -- precision-base <how>`), "
        "then raise precision-fsdp's floor to its version",
        "precision-fsdp requires precision-base<1,>=0.1, but its tests ran against precision-base 0.3.0: "
        "raise the floor to precision-base>=0.3.0",
    ]
    _, problems = check_dir(tmp_path / "dist", only="precision-fsdp", root=tmp_path)  # not a release: no rule
    assert problems == []


def test_every_package_of_the_repository_carries_the_license_text() -> None:
    from tools.packages import ROOT, packages

    license_text = (ROOT / "LICENSE").read_text()
    assert "Version 2.0, January 2004" in license_text
    for pkg in packages().values():
        assert (pkg.path / "LICENSE").read_text() == license_text, f"{pkg.path / 'LICENSE'} differs from LICENSE"
        assert 'license-files = ["LICENSE"]' in pkg.pyproject.read_text()


HELPERS_ROW = '{ dist = "precision-testsupport", published = false }'
NEVER_PUBLISHED = "they belong to precision-testsupport (packages/precision-testsupport/), which is never published"


def _with_test_helpers(root: Path) -> tuple[Package, Package]:
    """precision-base with a conformance kit in ``testing/``, and the unpublished test helpers package."""
    write_package_list(root, [ROWS[0], HELPERS_ROW])
    base = make_package(root, "precision-base", ["packaging>=22"], entry_point=False)
    kit = base.src / base.module / "testing"
    kit.mkdir()
    (kit / "__init__.py").write_text("")
    (kit / "conformance.py").write_text("")
    helpers = make_package(root, "precision-testsupport", ["precision-base"], entry_point=False)
    for name in ("models", "dummy_plugin"):
        (helpers.src / helpers.module / f"{name}.py").write_text("")
    return base, helpers


def test_a_wheel_that_carries_the_test_helpers_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("build")
    base, _ = _with_test_helpers(tmp_path)
    build(base, tmp_path / "kit-only")
    assert check_dir(tmp_path / "kit-only", root=tmp_path)[1] == []  # the kit alone is fine
    kit = base.src / base.module / "testing"
    (kit / "models.py").write_text("")
    (kit / "dummy_plugin.py").write_text("")
    build(base, tmp_path / "dist")
    _, problems = check_dir(tmp_path / "dist", root=tmp_path)
    assert problems == [
        "precision_base-0.3.0-py2.py3-none-any.whl: carries the repository's test helpers "
        f"['precision_base/testing/dummy_plugin.py', 'precision_base/testing/models.py']: {NEVER_PUBLISHED}"
    ]


def test_every_way_a_wheel_can_carry_the_test_helpers_is_named() -> None:
    from tools.check_dist import check_helpers
    from tools.packages import find

    helpers = find("precision-testsupport", unpublished=True)  # the real package and its modules
    names = [
        "precision_base/testing/conformance.py",
        "precision_base/testing/ranks.py",
        "precision_base/testing/launch.py",
        "precision_testsupport/__init__.py",
        "precision_fsdp/models.py",  # a plugin's own module of that name, not under testing/
    ]
    assert check_helpers(names, [helpers]) == [
        f"carries the repository's test helpers ['precision_base/testing/launch.py', "
        f"'precision_testsupport/__init__.py']: {NEVER_PUBLISHED}"
    ]


def test_a_wheel_or_sdist_of_the_test_helpers_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("build")
    _, helpers = _with_test_helpers(tmp_path)
    build(helpers, tmp_path / "dist")
    _, problems = check_dir(tmp_path / "dist", root=tmp_path)
    why = "precision-testsupport is never published (published = false in the package list): "
    assert problems == [
        f"precision_testsupport-0.3.0-py2.py3-none-any.whl: {why}no wheel or sdist of it belongs in a release",
        f"precision_testsupport-0.3.0.tar.gz: {why}no wheel or sdist of it belongs in a release",
    ]


def test_the_real_precision_base_wheel_holds_the_kit_and_none_of_the_test_helpers(tmp_path: Path) -> None:
    pytest.importorskip("build")
    from tools.check_dist import _metadata, check_helpers
    from tools.packages import find, unpublished_packages

    build(find("precision-base"), tmp_path)
    (wheel,) = tmp_path.glob("precision_base-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert sorted(n for n in names if n.startswith("precision_base/testing/")) == [
        "precision_base/testing/__init__.py",
        "precision_base/testing/audit_fit.py",
        "precision_base/testing/conformance.py",
        "precision_base/testing/fabric_conformance.py",
        "precision_base/testing/ranks.py",
    ]
    assert check_helpers(names, unpublished_packages()) == []
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        _, _, requires = _metadata(zf.read(meta).decode())
    assert 'pytest>=8; extra == "testing"' in [str(r) for r in requires]  # pip install precision-base[testing]
