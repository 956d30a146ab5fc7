"""tools/gpu_rehearsal.py's own logic (the rehearsals themselves are ``nox -s gpu_kit_rehearsal``, in the ci tag,
and ``nox -s gpu_rehearsal``, nightly): the venvs' requirements from the targets, the node command's caps, and each
problem it names."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tools import gpu_kit, gpu_rehearsal

LISTING = (
    "BACKEND    DISTRIBUTION         VERSION  PRECISIONS  STATUS  SUMMARY\n"
    "deepspeed  precision-deepspeed  0.1.0    32-true     ok      DeepSpeed\n"
    "fsdp       precision-fsdp       0.1.0    32-true     ok      FSDP\n"
)


def test_the_venv_gets_the_rehearsal_targets_installed_set_pinned_as_written() -> None:
    wanted = gpu_rehearsal.requirements()
    assert "torch==2.13.0" in wanted
    assert "lightning==2.6.6" in wanted
    assert "pip" in wanted
    assert not [r for r in wanted if r.split("==")[0] in ("deepspeed", "torchao", "hjson", "pydantic")]


def test_the_rehearsal_target_is_a_target_whose_kit_brings_deepspeed_and_torchao() -> None:
    target = gpu_kit.load_target(gpu_rehearsal.TARGET)
    assert target.python_short == "3.11"
    items = {item.name: item for item in gpu_kit.plan(target)}
    assert items["deepspeed"].how == "sdist"
    assert items["torchao"].spec == "torchao==0.18.0"
    assert {"precision-base", "precision-fsdp", "precision-deepspeed"} <= set(items)


def test_the_node_commands_caps_are_read_from_the_script() -> None:
    assert gpu_rehearsal.caps(gpu_rehearsal.NODE_SCRIPT.read_text()) == {"NODE_TESTS_S": 120, "NODE_BENCH_S": 270}


def _node(tmp_path: Path, differences: list[str]) -> tuple[Path, Path]:
    node, kit = tmp_path / "node", tmp_path / "kit"
    node.mkdir()
    (kit / "site").mkdir(parents=True)
    (node / "node.json").write_text(json.dumps({"differences": differences}))
    return node, kit


def test_a_clean_dry_run_has_no_problem(tmp_path: Path) -> None:
    node, kit = _node(tmp_path, [])
    done = subprocess.CompletedProcess([], 0, "gpu_node: finished with exit status 0\n", "")
    where = {"deepspeed": str(kit / "site" / "deepspeed" / "__init__.py")}
    assert gpu_rehearsal.problems(node, kit, done, 20.0, tmp_path / "no-git", LISTING, where) == []


def test_every_problem_is_named(tmp_path: Path) -> None:
    node, kit = _node(tmp_path, ["difference: torch is 2.12.0 here; rehearsal.toml says 2.13.0"])
    (tmp_path / "git-log").write_text("git rev-parse HEAD\n")
    done = subprocess.CompletedProcess([], 3, "Looking in indexes: https://example.invalid\n", "")
    where = {"torchao": "/usr/lib/python3/site-packages/torchao/__init__.py"}
    found = gpu_rehearsal.problems(node, kit, done, 60.0, tmp_path / "git-log", LISTING.replace(" ok ", " broken "),
                                   where)  # fmt: skip
    text = "\n".join(found)
    assert "the node command exited 3" in text
    assert "the node saw a difference: torch is 2.12.0 here" in text
    assert (
        f"torchao is imported from /usr/lib/python3/site-packages/torchao/__init__.py, not from the kit's {kit}" in text
    )
    assert "precision-plugins list does not show fsdp as ok" in text
    assert "precision-plugins list does not show deepspeed as ok" in text
    assert "the node run can take 450 s" in text
    assert "the node command called git: git rev-parse HEAD" in text
    assert "'Looking in indexes'" in text
    assert len(found) == 8


def test_a_version_without_a_local_label_takes_any_build_of_that_release() -> None:
    from tools.gpu_node_check import differences

    target = {"installed": {"torch": "2.13.0", "triton": "3.6.0+git1", "numpy": "*"}, "_path": "t.toml"}
    have = {"torch": "2.13.0+cpu", "triton": "3.6.0", "numpy": "2.4.6"}
    assert differences(target, [], have) == ["difference: triton is 3.6.0 here; t.toml says 3.6.0+git1"]
    assert differences(target, [], {**have, "torch": "2.13.1+cpu"})[0] == (
        "difference: torch is 2.13.1+cpu here; t.toml says 2.13.0"
    )


def test_the_nightly_rehearsal_installs_the_h200_targets_versions() -> None:
    assert gpu_rehearsal.requirement("torch", gpu_rehearsal.H200) == "torch==2.11.0"
    wanted = gpu_rehearsal.requirements(gpu_rehearsal.H200)
    assert {"lightning==2.6.6", "transformers==5.17.0", "numpy==2.5.2"} <= set(wanted)
    assert gpu_kit.load_target(gpu_rehearsal.H200).python_short == "3.12"


def test_a_local_label_alone_is_a_note_not_a_problem(tmp_path: Path) -> None:
    label = "difference: torch is 2.11.0 here; tools/gpu_targets/h200.toml says 2.11.0+cu130"
    release = "difference: torch is 2.11.1 here; tools/gpu_targets/h200.toml says 2.11.0+cu130"
    missing = "difference: hjson is not installed here; tools/gpu_targets/h200.toml says 3.1.0"
    assert gpu_rehearsal.label_only(label)
    assert not gpu_rehearsal.label_only(release)
    assert not gpu_rehearsal.label_only(missing)
    assert not gpu_rehearsal.label_only("difference: torch is 2.11.0+cu130 here; h200.toml says 2.11.0+cu130")
    node, kit = _node(tmp_path, [label, release])
    done = subprocess.CompletedProcess([], 0, "", "")
    where = {"deepspeed": str(kit / "site" / "deepspeed" / "__init__.py")}
    found = gpu_rehearsal.problems(node, kit, done, 20.0, tmp_path / "no-git", LISTING, where)
    assert found == [f"the node saw a {release}"]


def test_an_unknown_target_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_rehearsal.main(["--target", "nowhere", "out"]) == 2
    assert "usage: python -m tools.gpu_rehearsal [--target NAME] OUT" in capsys.readouterr().err


def test_the_targets_own_git_check_is_not_a_call_to_git(tmp_path: Path) -> None:
    node, kit = _node(tmp_path, [])
    (tmp_path / "git-log").write_text("git --version\n")
    done = subprocess.CompletedProcess([], 0, "", "")
    where = {"deepspeed": str(kit / "site" / "deepspeed" / "__init__.py")}
    checks = ("git --version", "cc --version")
    assert gpu_rehearsal.problems(node, kit, done, 20.0, tmp_path / "git-log", LISTING, where, checks) == []
    (tmp_path / "git-log").write_text("git --version\ngit rev-parse HEAD\n")
    found = gpu_rehearsal.problems(node, kit, done, 20.0, tmp_path / "git-log", LISTING, where, checks)
    assert found == ["the node command called git: git rev-parse HEAD"]
