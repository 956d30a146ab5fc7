"""Discovery through real installed distributions: wheels built here, installed into a fresh virtual environment.

The environment holds precision-base, several small plugin distributions and the test helpers the dummy plugin imports
(precision-testsupport), and no torch, Lightning or DeepSpeed at all, which is what a user with only precision-base
installed has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from precision_testsupport.wheels import build_wheels, make_venv, write_project

pytestmark = pytest.mark.slow

BASE_PROJECT = Path(__file__).resolve().parents[1]
DUMMY_PROJECT = Path(__file__).parent / "fixtures" / "dummy_plugin"
# the dummy plugin's info and class live in the repository's test helpers (never published): a wheel here too
SUPPORT_PROJECT = BASE_PROJECT.parent / "precision-testsupport"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("projects")
    out = tmp_path_factory.mktemp("wheels")
    projects = {
        "base": BASE_PROJECT,
        "dummy": DUMMY_PROJECT,
        "testsupport": SUPPORT_PROJECT,
        "lite": write_project(root, "precision-lite", "lite"),
        "twin-a": write_project(root, "precision-twin-a", "twin"),
        "twin-b": write_project(root, "precision-twin-b", "twin"),
        "broken": write_project(root, "precision-broken", "broken", info_prelude="import no_such_module_abc\n"),
        "needy": write_project(root, "precision-needy", "needy", info_extra=", requires=('deepspeed>=99',)"),
        "ancient": write_project(root, "precision-ancient", "ancient", info_extra=", contract_version=0"),
        "mismatch": write_project(root, "precision-mismatch", "mismatch"),
    }
    # "mismatch" registers entry point `mismatch` whose info says backend 'lite2'
    info = projects["mismatch"] / "src" / "precision_mismatch" / "_info.py"
    info.write_text(info.read_text().replace("backend='mismatch'", "backend='lite2'"))
    return dict(zip(projects, build_wheels(list(projects.values()), out), strict=True))


@pytest.fixture(scope="module")
def python(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_venv(tmp_path_factory.mktemp("venv") / "env", list(wheels.values()))


def run(python: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def cli(python: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    exe = python.parent / "precision-plugins"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def test_environment_has_no_backend(python: Path) -> None:
    out = run(
        python, "import importlib.util as u; print([m for m in ('torch','lightning','deepspeed') if u.find_spec(m)])"
    )
    assert out.stdout.strip() == "[]", out.stderr


def test_list_reports_every_status_without_importing_plugin_code(python: Path) -> None:
    out = run(
        python,
        """
        import json, sys
        import precision_base
        entries = precision_base.list_plugins()
        loaded = sorted(m for m in sys.modules if m.startswith("precision_") and m.endswith(".plugin"))
        print(json.dumps({"status": {e.backend: e.status for e in entries}, "loaded": loaded,
                          "heavy": [m for m in ("torch", "lightning", "deepspeed") if m in sys.modules]}))
    """,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == {
        "ancient": "incompatible contract",
        "broken": "broken",
        "dummy": "ok",
        "lite": "ok",
        "mismatch": "broken",
        "needy": "requirement missing",
        "twin": "conflict",
    }
    assert result["loaded"] == [], "listing must not import any plugin class module"
    assert result["heavy"] == []


def test_cli_list_table(python: Path) -> None:
    out = cli(python, "list")
    assert out.returncode == 1, "list exits 1 while any plugin is not ok"
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["BACKEND", "DISTRIBUTION", "VERSION", "PRECISIONS", "STATUS", "SUMMARY"]
    row = next(line for line in lines if line.startswith("dummy "))
    assert row.split()[:5] == ["dummy", "precision-dummy", "0.3.1", "32-true,bf16-true,bf16-mixed", "ok"]
    assert "broken: precision plugin 'broken' from precision-broken 1.2.3 failed to load its info object" in out.stdout
    assert "No module named 'no_such_module_abc'" in out.stdout
    assert "needy: needs deepspeed>=99, which is not installed" in out.stdout
    listed = cli(python, "list", "--json")
    assert {e["backend"]: e["distribution"] for e in json.loads(listed.stdout)}["twin"] == (
        "precision-twin-a 1.2.3, precision-twin-b 1.2.3"
    )


def test_resolve_imports_only_the_requested_plugin(python: Path) -> None:
    out = run(
        python,
        """
        import json, sys
        import precision_base
        plugin = precision_base.resolve("lite:32", answer=42)
        print(json.dumps({"cls": type(plugin).__module__, "options": plugin.options,
                          "loaded": sorted(m for m in sys.modules if m.endswith(".plugin"))}))
    """,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result == {"cls": "precision_lite.plugin", "options": {"answer": 42}, "loaded": ["precision_lite.plugin"]}


@pytest.mark.parametrize(
    ("spec", "error", "words"),
    [
        (
            "dummy:32-true",
            "PluginLoadError",
            [
                "precision plugin 'dummy' from precision-dummy 0.3.1 failed to import",
                "No module named",
                "cause=ModuleNotFoundError",
            ],
        ),
        (
            "twin:32-true",
            "DuplicateBackendError",
            ["registered by more than one distribution: precision-twin-a 1.2.3 and precision-twin-b 1.2.3"],
        ),
        (
            "needy:32-true",
            "PluginRequirementError",
            ["precision plugin 'needy' from precision-needy 1.2.3 cannot load: it needs deepspeed>=99, which is not"],
        ),
        ("ancient:32-true", "ContractVersionError", ["built for precision-base contract version 0", "version 1"]),
        ("broken:32-true", "PluginLoadError", ["failed to load its info object", "cause=ModuleNotFoundError"]),
        ("mismatch:32-true", "InvalidPluginInfoError", ["entry point is named 'mismatch'", "declares backend 'lite2'"]),
        ("fsdp:bf16-mixed", "UnknownBackendError", ["To use it, run: pip install precision-fsdp"]),
        ("deepspeed:16", "UnknownBackendError", ["To use it, run: pip install precision-deepspeed"]),
        ("lite:bf16-mixed", "UnsupportedPrecisionError", ["does not offer 'bf16-mixed'; it offers 32-true"]),
    ],
)
def test_failures_are_isolated_and_explained(python: Path, spec: str, error: str, words: list[str]) -> None:
    out = run(
        python,
        f"""
        import precision_base
        try:
            precision_base.resolve({spec!r})
        except precision_base.PrecisionPluginError as exc:
            print(type(exc).__name__, "|", exc, "| cause=" + type(exc.__cause__).__name__)
        # every other plugin keeps working afterwards
        print("lite still resolves:", precision_base.resolve("lite:32-true").precision)
    """,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(error + " |"), out.stdout
    for word in words:
        assert word in out.stdout
    assert "lite still resolves: 32-true" in out.stdout


def test_disable_variable_hides_a_plugin(python: Path) -> None:
    out = cli(python, "show", "lite:32-true", PRECISION_PLUGINS_DISABLE="lite,twin")
    assert out.returncode == 2
    assert out.stderr.strip().startswith("precision-plugins: error: precision backend 'lite'")
    assert "disabled by PRECISION_PLUGINS_DISABLE='lite,twin'" in out.stderr
    listing = cli(python, "list", "--json", PRECISION_PLUGINS_DISABLE="lite,twin")
    statuses = {e["backend"]: e["status"] for e in json.loads(listing.stdout)}
    assert statuses["lite"] == "disabled"
    assert statuses["twin"] == "disabled", "disabling a name in conflict resolves the conflict"


def test_cli_show_and_bad_input(python: Path) -> None:
    ok = cli(python, "show", "lite:32")
    assert ok.returncode == 0, ok.stderr
    assert "spec:         lite:32-true" in ok.stdout
    assert [line.split() for line in ok.stdout.splitlines() if line.strip().startswith("parameters")] == [
        ["parameters", "float32"]
    ]
    for bad, words in [("lite", "has no ':'"), ("nope:32", "Installed backends:"), ("lite:64", "unknown precision")]:
        out = cli(python, "show", bad)
        assert out.returncode == 2
        assert out.stdout == ""
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert words in out.stderr


def test_cli_doctor_reports_problems_with_nonzero_exit(python: Path) -> None:
    out = cli(python, "doctor")
    assert out.returncode == 1
    assert "[ok] lite (precision-lite 1.2.3): 32-true" in out.stdout
    assert "[broken] dummy:\n  - dummy:32-true: PluginLoadError" in out.stdout
    assert "[conflict] twin:\n  - conflict: precision backend 'twin' is registered by more than one" in out.stdout


def test_import_precision_base_imports_no_heavy_module_even_when_installed() -> None:
    """In the development environment torch, Lightning and DeepSpeed are installed: still none is imported."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, precision_base; precision_base.list_plugins(); "
            "print([m for m in ('torch', 'lightning', 'deepspeed', 'lightning_utilities') if m in sys.modules])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
