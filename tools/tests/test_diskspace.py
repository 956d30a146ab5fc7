"""tools/diskspace.py: a session short of disk stops before installing, says what to remove; clean removes it."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from tools import diskspace
from tools.diskspace import NEED_CPU_TORCH, NEED_CUDA_TORCH, GiB, Usage

MiB = 2**20


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A repository root with a 3 MiB venv, a 1 MiB build/, and caches of 2 MiB (pip) and 4 MiB (uv)."""
    write(tmp_path / "repo" / ".nox" / "tests-x" / "lib" / "big", 3 * MiB)
    write(tmp_path / "repo" / "build" / "matrix" / "r.json", 1 * MiB)
    write(tmp_path / "pip" / "http" / "a" / "b", 1 * MiB)
    write(tmp_path / "pip" / "wheels" / "ab" / "x-1.0-py3-none-any.whl", 1 * MiB)
    write(tmp_path / "uv" / "archive" / "y", 4 * MiB)
    return tmp_path / "repo"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"PIP_CACHE_DIR": str(tmp_path / "pip"), "UV_CACHE_DIR": str(tmp_path / "uv")}


def test_short_session_gets_one_line_naming_the_biggest_to_remove(root: Path, env: dict[str, str]) -> None:
    venv = root / ".nox" / "tests-y"  # not created yet: its nearest existing parent is read
    message = diskspace.check("tests-y", 6 * GiB, [venv], root, env, usage=lambda _: Usage(100 * GiB, GiB // 2))
    assert message == (
        f"tests-y: needs 6.0 GB free on {root / '.nox'}, 512 MB free; nothing was installed. Biggest to remove: "
        f"uv cache ({env['UV_CACHE_DIR']}) 4 MB, .nox/tests-x 3 MB, pip cache ({env['PIP_CACHE_DIR']}) 2 MB, "
        "build/ 1 MB; `nox -s clean` removes .nox venvs and build/, "
        "`nox -s clean -- --caches` also pip's and uv's caches"
    )
    assert diskspace.check("tests-y", 6 * GiB, [venv], root, env, usage=lambda _: Usage(100 * GiB, 7 * GiB)) is None


def test_nothing_to_remove_says_so(tmp_path: Path) -> None:
    none = {"PIP_CACHE_DIR": str(tmp_path / "no-pip"), "UV_CACHE_DIR": str(tmp_path / "no-uv")}
    message = diskspace.check("s", 2 * GiB, [tmp_path], tmp_path, none, usage=lambda _: Usage(GiB, 512 * MiB))
    assert message is not None
    assert message == (
        f"s: needs 2.0 GB free on {tmp_path}, 512 MB free; nothing was installed. Nothing of nox's to remove here "
        "(.nox, build/, pip's and uv's caches are empty); free space elsewhere"
    )


def test_real_reading(tmp_path: Path) -> None:
    assert diskspace.check("s", 1, [tmp_path], tmp_path) is None
    message = diskspace.check("s", 10**18, [tmp_path / "venv"], tmp_path)
    assert message is not None
    assert message.startswith(f"s: needs 931322574.6 GB free on {tmp_path}, ")


def test_places_on_one_filesystem_are_counted_once(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    need = free - 256 * MiB  # twice that would not fit
    if need < free // 2 + 64 * MiB:
        pytest.skip(f"only {free // MiB} MiB free here: too little to tell one count from two")
    assert diskspace.shortage(need, [tmp_path / "venv", tmp_path / "cache" / "pip"]) is None
    assert diskspace.shortage(free * 4, [tmp_path / "venv", tmp_path / "cache"]) is not None


def test_torch_need(tmp_path: Path) -> None:
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    links = ["/nonexistent", f"file://{tmp_path}"]
    assert diskspace.torch_need("==2.13.*", {}, links) == NEED_CPU_TORCH
    assert diskspace.torch_need("", {}, [str(tmp_path)]) == NEED_CPU_TORCH
    cpu_index = {"PIP_EXTRA_INDEX_URL": "https://pypi.org/simple https://download.pytorch.org/whl/cpu/"}
    assert diskspace.torch_need("==2.15.*", cpu_index, []) == NEED_CPU_TORCH
    if sys.platform != "linux":
        pytest.skip("off Linux PyPI's torch is the CPU build: no CUDA need to check")
    assert diskspace.torch_need("==2.15.*", {}, links) == NEED_CUDA_TORCH
    assert diskspace.torch_need("==2.13.*", {"PIP_INDEX_URL": "https://example.org/whl/cu121"}, []) == NEED_CUDA_TORCH


def test_pip_find_links_reads_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_FIND_LINKS", f"{tmp_path / 'a'} file://{tmp_path / 'b'}")
    found = diskspace.pip_find_links()
    assert str(tmp_path / "a") in found
    assert str(tmp_path / "b") in found
    assert diskspace.pip_find_links(str(tmp_path / "no-python")) == [str(tmp_path / "a"), str(tmp_path / "b")]


def test_cache_dirs(tmp_path: Path) -> None:
    assert diskspace.cache_dirs({"XDG_CACHE_HOME": str(tmp_path), "UV_CACHE_DIR": "/u"}) == {
        "pip": tmp_path / "pip",
        "uv": Path("/u"),
    }


def test_size_of_skips_symlinks(tmp_path: Path) -> None:
    write(tmp_path / "d" / "f", 1000)
    (tmp_path / "d" / "loop").symlink_to(tmp_path)
    assert 1000 <= diskspace.size_of(tmp_path / "d") < 1000 + 4096
    assert diskspace.size_of(tmp_path / "missing") == 0


def test_clean_keeps_the_caches_unless_asked(tmp_path: Path, root: Path, env: dict[str, str]) -> None:
    write(root / ".nox" / "b" / "f", MiB)
    lines = diskspace.clean(root, caches=False, env=env)
    assert lines == [
        "removed .nox/b (1 MB)",
        "removed .nox/tests-x (3 MB)",
        "removed build/ (1 MB)",
        f"pip cache {env['PIP_CACHE_DIR']}: 2 MB",
        f"uv cache {env['UV_CACHE_DIR']}: 4 MB",
    ]
    assert list((root / ".nox").iterdir()) == []
    assert not (root / "build").exists()
    assert diskspace.clean(root, caches=False, env=env)[0] == "nothing to remove in .nox and build/"
    lines = diskspace.clean(root, caches=True, env=env)  # the real `pip cache purge` (a uv venv has no pip)
    purged = "pip cache purge" if importlib.util.find_spec("pip") else "removed the folder"
    assert lines[1] == f"pip cache {env['PIP_CACHE_DIR']}: freed 2 MB ({purged})"
    how = "uv cache clean" if shutil.which("uv") else "removed the folder"
    assert lines[2] == f"uv cache {env['UV_CACHE_DIR']}: freed 4 MB ({how})"
    assert diskspace.size_of(tmp_path / "pip") == diskspace.size_of(tmp_path / "uv") == 0
    assert diskspace.describe_caches(env) == [
        f"pip cache {tmp_path / 'pip'}: empty",
        f"uv cache {tmp_path / 'uv'}: empty",
    ]
