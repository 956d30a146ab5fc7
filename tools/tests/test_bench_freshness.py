"""When a committed benchmark result is stale (tools/bench_freshness.py): written by another harness schema, or at a
commit older than the last change to the code it measures. Staleness warns where a contributor works (CI's
``tools`` session runs the script without ``--check``) and fails where results are published (``--check``: ``nox -s
bench -- --check`` and the release workflow). Shown in a scratch git repository and on this repository with a result
that records an old commit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import bench_freshness as freshness
from tools.packages import ROOT

DOCS = ROOT / "docs" / "benchmarks"


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env)
    return proc.stdout.strip()


def _commit(repo: Path, path: str, text: str) -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    _git(repo, "add", path)
    _git(repo, "commit", "-q", "-m", f"change {path}")
    return _git(repo, "rev-parse", "HEAD")


def _result(folder: Path, name: str, commit: str, schema: str = freshness.SCHEMA) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(
        json.dumps({"schema": schema, "benchmark": name, "quick": False, "machine": {"git_commit": commit}})
    )
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    _commit(tmp_path, "packages/precision-fsdp/src/precision_fsdp/plugin.py", "v1\n")
    return tmp_path


def _script(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The freshness script as a contributor runs it, from the scratch repository's own copy."""
    script = repo / "tools" / "bench_freshness.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, check=False)


def test_a_stale_result_warns_in_ci_and_fails_the_publishing_check(repo: Path) -> None:
    script = repo / "tools" / "bench_freshness.py"
    script.parent.mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "bench_freshness.py", script)
    _commit(repo, "tools/bench_freshness.py", script.read_text())
    measured_at = _git(repo, "rev-parse", "HEAD")
    _result(repo / "docs" / "benchmarks", "overhead-fsdp", measured_at)
    _commit(repo, "docs/benchmarks/overhead-fsdp.json", (repo / "docs/benchmarks/overhead-fsdp.json").read_text())
    current = (0, f"every result in {repo / 'docs' / 'benchmarks'} is current")
    assert [(r.returncode, r.stdout.strip()) for r in (_script(repo), _script(repo, "--check"))] == [current] * 2
    _commit(repo, "README.md", "a change elsewhere\n")  # neither a warning nor a failure
    assert [(r.returncode, r.stdout.strip()) for r in (_script(repo), _script(repo, "--check"))] == [current] * 2

    plugin = repo / "packages/precision-fsdp/src/precision_fsdp/plugin.py"
    comment = _commit(
        repo, "packages/precision-fsdp/src/precision_fsdp/plugin.py", plugin.read_text() + "# a comment\n"
    )
    ci = _script(repo)
    assert ci.returncode == 0, ci.stderr
    assert ci.stdout.splitlines() == [
        f"warning: stale benchmark result overhead-fsdp: measured at commit {measured_at[:10]}, older than "
        f"{comment[:10]}, the last change to the code it measures (1 commit(s) to the plugins or its harness since: "
        f"{comment[:7]} change packages/precision-fsdp/src/precision_fsdp/plugin.py); refresh: nox -s bench -- "
        "--update-docs --only overhead-fsdp (not a failure here; `nox -s bench -- --check` fails on it)"
    ]
    publish = _script(repo, "--check")
    assert publish.returncode == 1
    assert publish.stdout.startswith(f"STALE overhead-fsdp: measured at commit {measured_at[:10]}")
    assert freshness.check_result(repo / "docs/benchmarks/overhead-fsdp.json", repo).since == comment[:7]


def test_a_result_older_than_the_measured_code_fails_with_the_refresh_command(repo: Path) -> None:
    measured_at = _git(repo, "rev-parse", "HEAD")
    result = _result(repo / "docs", "overhead-fsdp", measured_at)
    assert freshness.check_result(result, repo) is None
    _commit(repo, "README.md", "docs only\n")  # not measured code: still current
    _commit(repo, "tools/docgen/benchmark_pages.py", "page generator\n")  # outside benchmarks/: pages only
    assert freshness.check_result(result, repo) is None
    last = _commit(repo, "packages/precision-fsdp/src/precision_fsdp/plugin.py", "v2\n")
    problem = freshness.check_result(result, repo)
    assert problem is not None
    assert problem.fatal
    assert f"measured at commit {measured_at[:10]}, older than {last[:10]}" in str(problem)
    assert "1 commit(s) to" in str(problem)
    assert str(problem).endswith("refresh: nox -s bench -- --update-docs --only overhead-fsdp")
    _commit(repo, "benchmarks/gpu_bench.py", "the GPU driver\n")  # not run by a CPU result
    _commit(repo, "benchmarks/bench/audit.py", "another benchmark\n")  # not run by this one
    assert "0 commit(s) to" not in str(freshness.check_result(_result(repo / "docs", "overhead-fsdp", last), repo))
    assert freshness.check_result(_result(repo / "docs", "overhead-fsdp", last), repo) is None
    _commit(repo, "benchmarks/bench/runs.py", "harness\n")  # the shared harness counts too
    assert "1 commit(s) to" in str(freshness.check_result(_result(repo / "docs", "overhead-fsdp", last), repo))
    assert "2 commit(s) to" in str(freshness.check_result(_result(repo / "docs", "audit", last), repo))  # audit.py too
    at_runs = _git(repo, "rev-parse", "HEAD")
    _commit(repo, "benchmarks/bench/overhead.py", "its own module\n")
    assert freshness.check_result(_result(repo / "docs", "memory", at_runs), repo) is None
    assert "1 commit(s) to" in str(freshness.check_result(_result(repo / "docs", "overhead-fsdp", at_runs), repo))


def test_an_old_schema_fails(repo: Path) -> None:
    result = _result(repo / "docs", "memory", _git(repo, "rev-parse", "HEAD"), schema="precision-plugins-bench/1")
    problem = freshness.check_result(result, repo)
    assert problem is not None
    assert problem.fatal
    assert f"written by harness schema 'precision-plugins-bench/1', the harness writes {freshness.SCHEMA!r}" in str(
        problem
    )


def test_an_unknown_commit_and_a_quick_run_fail(repo: Path) -> None:
    unknown = freshness.check_result(_result(repo / "docs", "numerics", "0" * 40), repo)
    assert unknown is not None
    assert "is not in this repository's history" in unknown.message
    quick = _result(repo / "docs", "numerics", _git(repo, "rev-parse", "HEAD"))
    quick.write_text(json.dumps({**json.loads(quick.read_text()), "quick": True}))
    assert "--quick smoke run" in str(freshness.check_result(quick, repo))


def test_a_stale_gpu_result_is_a_warning_only(repo: Path) -> None:
    result = _result(repo / "docs", "gpu", _git(repo, "rev-parse", "HEAD"))
    _commit(repo, "packages/precision-base/src/precision_base/spec.py", "v2\n")
    problem = freshness.check_result(result, repo)
    assert problem is not None
    assert not problem.fatal
    assert "nox -s gpu" in str(problem)


def test_this_repository_with_a_result_from_its_first_commit_fails(tmp_path: Path) -> None:
    first = _git(ROOT, "rev-list", "--max-parents=0", "HEAD").splitlines()[0]
    problems = freshness.check_folder(_result(tmp_path, "overhead-deepspeed", first).parent, ROOT)
    assert [p.fatal for p in problems] == [True]
    last = freshness.last_change(ROOT, freshness.measured("overhead-deepspeed"))
    assert f"measured at commit {first[:10]}, older than {last[:10]}" in str(problems[0])
    assert freshness.main(["--check", str(tmp_path)]) == 1
    assert freshness.main([str(tmp_path)]) == 0


def test_the_site_keeps_a_stale_result_and_marks_it_stale_since_the_change(repo: Path) -> None:
    from tools.docgen import benchmarks

    folder = repo / "docs" / "benchmarks"
    _result(folder, "overhead-fsdp", _git(repo, "rev-parse", "HEAD"))
    assert "Every result is current" in benchmarks.glance(folder, repo)
    change = _commit(repo, "packages/precision-fsdp/src/precision_fsdp/plugin.py", "v2\n")
    page = benchmarks.glance(folder, repo)
    assert "Every result is current" not in page
    stale = f"- `overhead-fsdp`: **Stale since {change[:7]}**: the code it measures changed after it ran; refresh: "
    assert stale in page
    shown = page.split("### [Step time, FSDP2")[1]  # the result's own entry stays, marked
    assert f"- **Stale since {change[:7]}**:" in shown
    assert "refresh: `nox -s bench -- --update-docs --only overhead-fsdp`" in shown
    assert "change packages/" not in page, "a reader gets the commit, not its message"
