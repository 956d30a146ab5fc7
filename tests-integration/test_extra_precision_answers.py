"""Issue 21: one answer about an extra precision (fsdp:fp8-*) whose optional dependency (torchao) is missing.

torchao is installed in the test environments (the CI cell installs ``precision-fsdp[fp8]``), so each test runs a
child Python whose environment is this one minus torchao, honestly: a temporary site folder holding a symbolic
link to every entry of this environment's site-packages except ``torchao`` and ``torchao-*.dist-info``, read with
``site.addsitedir`` (so the ``.pth`` files of the editable installs still work) after ``python -S`` dropped the real
one. In that child neither ``import torchao`` nor ``importlib.metadata`` find torchao, as after
``pip install precision-fsdp`` without ``[fp8]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("precision_fsdp")

SITE = Path(sysconfig.get_paths()["purelib"])


@pytest.fixture(scope="module")
def without_torchao(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("no-torchao") / "site-packages"
    site.mkdir()
    for entry in SITE.iterdir():
        if entry.name == "torchao" or entry.name.lower().startswith("torchao-"):
            continue
        (site / entry.name).symlink_to(entry)
    return site


def run(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    boot = (
        f"import site, sys; sys.path[:] = [p for p in sys.path if p != {str(SITE)!r}]; site.addsitedir({str(site)!r})"
    )
    env = {**os.environ, "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    script = boot + "\n" + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-S", "-c", script], capture_output=True, text=True, timeout=300, cwd=cwd, env=env
    )


def torchao_requirement() -> str:
    """The fp8 extra's torchao requirement as precision-fsdp's metadata declares it (``torchao>=0.13``), which the
    refusals quote."""
    from importlib import metadata

    from packaging.requirements import Requirement

    for line in metadata.requires("precision-fsdp") or []:
        requirement = Requirement(line)
        if requirement.name == "torchao":
            return f"torchao{requirement.specifier}"
    raise AssertionError("precision-fsdp declares no torchao requirement")


def expected_line(cwd: Path) -> str:
    """What install_command must say for this environment's precision-fsdp (a checkout here, an index elsewhere)."""
    from importlib import metadata

    direct = metadata.distribution("precision-fsdp").read_text("direct_url.json")
    if not direct:
        return 'pip install "precision-fsdp[fp8]"'
    data = json.loads(direct)
    path = Path(data["url"].removeprefix("file://"))
    editable = "-e " if data.get("dir_info", {}).get("editable") else ""
    shown = f"./{path.relative_to(cwd)}" if path.is_relative_to(cwd) else str(path)
    return f'pip install {editable}"{shown}[fp8]"'


def test_the_child_really_has_no_torchao(without_torchao: Path, tmp_path: Path) -> None:
    done = run(
        without_torchao,
        """
        import importlib.util
        from importlib import metadata
        try:
            metadata.version("torchao"); print("metadata: found")
        except metadata.PackageNotFoundError:
            print("metadata: missing")
        print("module:", importlib.util.find_spec("torchao"))
        import precision_fsdp, lightning; print("others: ok")
        """,
        tmp_path,
    )
    assert done.stdout.split("\n")[:3] == ["metadata: missing", "module: None", "others: ok"], done.stderr


def test_every_door_gives_the_same_refusal_with_a_working_install_line(without_torchao: Path) -> None:
    cwd = Path(__file__).resolve().parent.parent  # the repository root: a checkout's line is ./packages/...
    line = expected_line(cwd)
    done = run(
        without_torchao,
        """
        import precision_base as pb
        doors = {
            "resolve": lambda: pb.resolve("fsdp:fp8-tensorwise"),
            "resolve_fabric": lambda: pb.resolve_fabric("fsdp:fp8-tensorwise"),
            "Trainer": lambda: pb.Trainer(precision_plugin="fsdp:fp8-rowwise", accelerator="cpu", devices=1),
            "Fabric": lambda: pb.Fabric(precision_plugin="fsdp:fp8-rowwise", accelerator="cpu", devices=1),
        }
        for name, door in doors.items():
            try:
                door(); print(name, "|", "accepted")
            except Exception as exc:
                print(name, "|", type(exc).__name__, "|", exc)
        """,
        cwd,
    )
    rows = [line_.split(" | ") for line_ in done.stdout.splitlines() if " | " in line_]
    assert [r[0] for r in rows] == ["resolve", "resolve_fabric", "Trainer", "Fabric"], done.stdout + done.stderr
    why = (
        f"needs {torchao_requirement()}, which is not installed (the 'fp8' extra of precision-fsdp "
        f"{pytest.importorskip('precision_fsdp').__version__}); install it with: {line}"
    )
    docs = (cwd / "docs" / "names-and-errors.md").read_text(encoding="utf-8")  # the page shows an index's line
    index_why = why.replace(f"install it with: {line}", 'install it with: pip install "precision-fsdp[fp8]"')
    assert f"PluginRequirementError: fsdp:fp8-tensorwise is unavailable here: it {index_why}\n" in docs
    for name, kind, message in rows:
        spec = "fsdp:fp8-tensorwise" if name.startswith("resolve") else "fsdp:fp8-rowwise"
        assert kind == "PluginRequirementError", (name, kind, message)
        assert message == f"{spec} is unavailable here: it {why}", name


def test_list_show_and_doctor_mark_the_extra_unavailable_and_say_why(without_torchao: Path) -> None:
    cwd = Path(__file__).resolve().parent.parent
    line = expected_line(cwd)
    done = run(
        without_torchao,
        """
        import json
        from precision_base.cli import main
        for argv in (["list"], ["list", "--json"], ["doctor", "--skip-import-check"], ["show", "fsdp:fp8-tensorwise"]):
            print("@@", flush=True)
            print("rc", main(argv), flush=True)
        """,
        cwd,
    )
    out = done.stdout
    sections = [part.strip().rsplit("\n", 1) for part in out.split("@@")[1:]]
    (listing, rc_list), (as_json, _), (doctor, rc_doctor), show = sections
    assert (rc_list, rc_doctor, show) == ("rc 0", "rc 0", ["rc 2"]), out  # the backend is ok; show refuses
    assert "fp8-tensorwise (unavailable),fp8-rowwise (unavailable),mxfp8-rceil (unavailable)" in listing
    assert (
        "fsdp:fp8-tensorwise, fsdp:fp8-rowwise, fsdp:mxfp8-rceil unavailable: "
        f"needs {torchao_requirement()}, which is not installed" in out
    )
    assert f"install it with: {line}" in listing
    fsdp = next(e for e in json.loads(as_json) if e["backend"] == "fsdp")
    assert sorted(fsdp["unavailable"]) == ["fp8-rowwise", "fp8-tensorwise", "mxfp8-rceil"]
    assert fsdp["status"] == "ok"
    assert "[ok] fsdp (precision-fsdp" in doctor
    unavailable = "fsdp:fp8-tensorwise, fsdp:fp8-rowwise, fsdp:mxfp8-rceil"
    assert f"  - unavailable: {unavailable}: needs {torchao_requirement()}" in doctor
    assert "precision-plugins: error: fsdp:fp8-tensorwise is unavailable here" in done.stderr


def test_with_torchao_doctor_resolves_and_lists_the_extra_precisions(tmp_path: Path) -> None:
    pytest.importorskip("torchao")
    done = subprocess.run(
        [sys.executable, "-m", "precision_base.cli", "doctor", "--skip-import-check"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    fsdp = next(line for line in done.stdout.splitlines() if line.startswith("[ok] fsdp"))
    assert fsdp.endswith("16-mixed, bf16-mixed, fp8-tensorwise, fp8-rowwise, mxfp8-rceil")
    assert "unavailable" not in done.stdout
