"""tools/gpu_kit.py without the network: the target file, the kit's plan, the resolution of requirements (with fake
wheels and a fake fetch), the manifest, the size refusal and the commands it gives pip and the node."""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tools import gpu_kit
from tools.gpu_kit import Target, load_target, manifest, resolve, too_big, top_level, torchao_for, unmet
from tools.packages import ROOT, Package
from tools.tests.fake_repo import make_package


def write_target(
    folder: Path, installed: dict[str, str], absent: Iterable[str] = (), also: Iterable[str] = ()
) -> Target:
    rows = "".join(f'{name} = "{version}"\n' for name, version in installed.items())
    names = ", ".join(f'"{n}"' for n in also)
    gone = ", ".join(f'"{n}"' for n in absent)
    path = folder / "node.toml"
    path.write_text(
        f'name = "node"\npython = "3.12.3"\nglibc = "2.28"\n\n[installed]\n{rows}\n'
        f"[also_installed]\nnames = [{names}]\n\n[absent]\nnames = [{gone}]\n\n"
        '[checks]\ngit = "git --version"\n'
    )
    return load_target(path)


def fake_wheel(folder: Path, name: str, version: str, requires: Iterable[str] = (), size: int = 0) -> Path:
    """A wheel file with a METADATA of ``requires`` and, to weigh ``size`` bytes more, an incompressible payload."""
    stem = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{stem}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{stem}.dist-info/METADATA", meta)
        if size:
            zf.writestr("payload.bin", hashlib.shake_256(name.encode()).digest(size))
    return path


def test_the_h200_target_is_the_default_and_says_python_3_12_and_torch_2_11() -> None:
    target = load_target()
    assert target.path == gpu_kit.DEFAULT_TARGET == ROOT / "tools" / "gpu_targets" / "h200.toml"
    assert (target.name, target.python, target.python_short) == ("h200", "3.12.3", "3.12")
    assert target.torch == "2.11.0+cu130"
    assert target.installed["lightning"] == target.installed["pytorch-lightning"] == "2.6.6"
    assert target.installed["numpy"] == "2.5.2"
    assert target.has("typing_extensions")
    assert target.installed["typing-extensions"] is None
    assert target.has("nvidia-ml-py")  # from the image's package list ([also_installed])
    assert {"deepspeed", "torchao", "hjson", "pydantic", "hatchling", "nox"} <= target.absent
    assert not any(target.has(name) for name in target.absent)
    assert target.platforms()[0] == "manylinux_2_39_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(target.platforms())
    assert {"git", "c-compiler", "python-headers", "pydantic"} <= set(target.checks)
    assert target.facts["gpu"] == {"name": "NVIDIA H200", "compute_capability": "9.0", "memory_gb": 141}


def test_a_name_both_installed_and_absent_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="listed as installed and as absent: hjson"):
        write_target(tmp_path, {"torch": "2.11.0"}, absent=["hjson"], also=["hjson"])


@pytest.mark.parametrize(
    ("torch", "torchao"),
    [
        ("2.11.0+cu130", "0.18.0"),
        ("2.13.0", "0.18.0"),
        ("2.10.0+cu128", "0.16.0"),
        ("2.9.1", "0.15.0"),
        ("2.9.0", "0.14.1"),
        ("2.8.0", "0.13.0"),
        ("2.7.1", None),
    ],
)
def test_torchao_is_the_newest_built_for_the_node_torch(torch: str, torchao: str | None) -> None:
    assert torchao_for(torch) == torchao


@pytest.fixture
def repo(tmp_path: Path) -> tuple[list[Package], list[Package]]:
    """Published packages: a base, a plugin on DeepSpeed, a plugin with a torchao extra; and unpublished helpers."""
    published = [
        make_package(tmp_path, "precision-base", ["packaging>=22"], entry_point=False),
        make_package(tmp_path, "precision-ds", ["precision-base>=0.1,<1", "deepspeed>=0.14.4"], entry_point=True),
        make_package(tmp_path, "precision-ao", ["precision-base>=0.1,<1"], True, extras={"fp8": ["torchao>=0.13"]}),
    ]
    return published, [make_package(tmp_path, "precision-helpers", ["precision-base"], entry_point=False)]


def test_the_plan_holds_what_the_node_lacks_and_nothing_it_has(
    tmp_path: Path, repo: tuple[list[Package], list[Package]]
) -> None:
    published, helpers = repo
    lacking = write_target(tmp_path, {"torch": "2.11.0+cu130"}, absent=["deepspeed", "torchao"])
    items = top_level(lacking, published, helpers, "import os\nfrom precision_helpers.models import TinyGPT\n")
    assert [(i.name, i.how) for i in items] == [
        ("precision-base", "project"),
        ("precision-ds", "project"),
        ("precision-ao", "project"),
        ("precision-helpers", "project"),
        ("deepspeed", "sdist"),
        ("torchao", "binary"),
    ]
    deepspeed, torchao = items[-2:]
    assert deepspeed.spec == f"deepspeed=={gpu_kit.DEEPSPEED}"
    assert "DS_BUILD_OPS=0" in deepspeed.why
    assert "required by precision-ds" in deepspeed.why
    assert torchao.spec == "torchao==0.18.0"
    assert "precision-ao[fp8]" in torchao.why

    having = write_target(tmp_path, {"torch": "2.10.0", "deepspeed": "0.19.8", "torchao": "*"})
    names = [i.name for i in top_level(having, published, helpers, "import precision_base\n")]
    assert names == ["precision-base", "precision-ds", "precision-ao"]  # no helpers: the run does not import them

    older = write_target(tmp_path, {"torch": "2.10.0"})
    assert top_level(older, published, [], "")[-1].spec == "torchao==0.16.0"


def test_the_real_plan_for_the_h200_target() -> None:
    """This tree's packages on the default target: the helpers (the GPU run imports them), DeepSpeed from its sdist,
    torchao 0.18.0 for torch 2.11."""
    text = "\n".join(gpu_kit.describe(load_target(), gpu_kit.plan(load_target())))
    assert "precision-testsupport [project]: the GPU run imports precision_testsupport" in text
    assert "deepspeed==0.19.8 [sdist]" in text
    assert "torchao==0.18.0 [binary]" in text


def test_requirements_are_read_for_the_node(tmp_path: Path) -> None:
    target = write_target(tmp_path, {"torch": "2.11.0+cu130", "numpy": "2.5.2", "typing-extensions": "*"})
    requires = [
        "hjson",
        "numpy>=1.20",
        "torch<2.7; python_version >= '3.8'",
        "pydantic>=2.0.0",
        "typing-extensions>=4.14.1",
        "colorama; sys_platform == 'win32'",
        "pytest>=8; extra == 'dev'",
        "tomli; python_version < '3.11'",
        "precision-base>=0.1,<1",
        "Hjson>=3",  # named twice: fetched once
    ]
    needs = unmet("deepspeed", requires, target, {"precision-base": "0.4.0"})
    assert [str(r) for r in needs.fetch] == ["hjson", "pydantic>=2.0.0"]
    assert needs.assumed == ["deepspeed: typing-extensions>=4.14.1 (the node's version is not known)"]
    assert needs.conflicts == ["deepspeed requires torch<2.7, but the node has 2.11.0+cu130"]
    with_extra = unmet("pydantic", ["email-validator>=2; extra == 'email'", "hjson"], target, {}, extras=["email"])
    assert [f"{r.name}{r.specifier}" for r in with_extra.fetch] == ["email-validator>=2", "hjson"]
    assert unmet("x", ["precision-base>=1"], target, {"precision-base": "0.4.0"}).conflicts == [
        "x requires precision-base>=1, but the kit has 0.4.0"
    ]


def test_resolution_fetches_what_the_node_lacks_transitively(tmp_path: Path) -> None:
    target = write_target(tmp_path, {"torch": "2.11.0+cu130", "numpy": "2.5.2"}, also=["typing-extensions"])
    index = {
        "hjson": ("3.1.0", []),
        "pydantic": ("2.12.5", ["annotated-types>=0.6.0", "pydantic-core==2.41.5", "typing-extensions>=4.14.1"]),
        "pydantic-core": ("2.41.5", ["typing-extensions>=4.14.1"]),
        "annotated-types": ("0.7.0", []),
    }
    asked: list[str] = []

    def fetch(requirement: str) -> Path:
        asked.append(requirement)
        name = Requirement(requirement).name
        version, requires = index[name]
        return fake_wheel(tmp_path, name, version, requires)

    top = fake_wheel(tmp_path, "deepspeed", "0.19.8", ["hjson", "numpy", "pydantic>=2.0.0", "torch"])
    done = resolve([top], {top.name: "top"}, target, fetch)
    assert asked == ["hjson", "pydantic>=2.0.0", "annotated-types>=0.6.0", "pydantic-core==2.41.5"]
    assert [w.name for w in done.wheels] == [
        "deepspeed-0.19.8-py3-none-any.whl",
        "hjson-3.1.0-py3-none-any.whl",
        "pydantic-2.12.5-py3-none-any.whl",
        "annotated_types-0.7.0-py3-none-any.whl",
        "pydantic_core-2.41.5-py3-none-any.whl",
    ]
    assert done.why["pydantic_core-2.41.5-py3-none-any.whl"].startswith("required by pydantic (pydantic-core==2.41.5)")
    assert len(done.assumed) == 2
    assert done.conflicts == []


def test_the_manifest_is_computed_from_the_files(tmp_path: Path) -> None:
    wheels = [fake_wheel(tmp_path, "pydantic-core", "2.41.5", size=300), fake_wheel(tmp_path, "hjson", "3.1.0")]
    entries = manifest(wheels, {wheels[0].name: "required by pydantic"})
    assert [(e["name"], e["version"], e["file"]) for e in entries] == [
        ("hjson", "3.1.0", "hjson-3.1.0-py3-none-any.whl"),
        ("pydantic-core", "2.41.5", "pydantic_core-2.41.5-py3-none-any.whl"),
    ]
    for entry, wheel in zip(entries, reversed(wheels), strict=True):
        assert entry["size"] == wheel.stat().st_size
        assert entry["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert entries[1]["why"] == "required by pydantic"
    assert entries[0]["why"] == ""


def test_a_kit_over_the_limit_is_refused_naming_its_largest_files(tmp_path: Path) -> None:
    assert gpu_kit.LIMIT == 48 * 2**20
    sizes = {"torchao": 30_000, "deepspeed": 20_000, "hjson": 10, "annotated-types": 20}
    entries = manifest([fake_wheel(tmp_path, name, "1.0", size=n) for name, n in sizes.items()], {})
    total = sum(e["size"] for e in entries)
    assert too_big(entries, limit=total) is None
    refusal = too_big(entries, limit=40_000, shown=2)
    assert refusal is not None
    assert refusal.startswith(f"gpu_kit: refused: the kit is {total // 1024} KiB, above its 39 KiB limit")
    assert "largest: torchao-1.0-py3-none-any.whl (30 KiB), deepspeed-1.0-py3-none-any.whl (20 KiB)." in refusal
    assert "hjson" not in refusal
    assert "No manifest was written" in refusal


def test_pip_is_asked_for_wheels_of_the_node_python_and_platform(tmp_path: Path) -> None:
    target = write_target(tmp_path, {"torch": "2.11.0"})
    args = gpu_kit.download_args(target, "pydantic>=2", tmp_path)
    assert args[:2] == ["download", "--no-deps"]
    assert args[-1] == "pydantic>=2"
    for flag, value in [("--only-binary", ":all:"), ("--python-version", "3.12"), ("--implementation", "cp")]:
        assert args[args.index(flag) + 1] == value
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert platforms[:2] == ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64"]
    assert platforms[-3:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


def test_the_node_command_installs_the_kit_offline_from_the_repository_root() -> None:
    command = gpu_kit.node_command(ROOT / "build" / "gpu-kit")
    assert command == (
        "python3 -m pip install -q --no-index --no-deps --no-compile --target build/gpu-kit/site build/gpu-kit/*.whl"
        " && export PYTHONPATH=$PWD/build/gpu-kit/site"
    )


def test_imports_are_found_in_source_text() -> None:
    assert gpu_kit.imports("from precision_helpers.launch import run_ranks\n", "precision_helpers")
    assert gpu_kit.imports("    import precision_helpers as h\n", "precision_helpers")
    assert not gpu_kit.imports("# precision_helpers is not imported\nimport precision_helpers_x\n", "precision_helpers")


def test_the_kit_folder_gets_the_wheels_a_manifest_list_and_kit_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """make_kit with the network steps faked: each top-level item a small wheel, DeepSpeed's requiring hjson."""

    def obtain(item: gpu_kit.Item, target: Target, out: Path) -> Path:
        version = item.spec.split("==")[1] if "==" in item.spec else "0.1.0"
        return fake_wheel(out, item.name, version, ["hjson", "torch"] if item.name == "deepspeed" else [])

    monkeypatch.setattr(gpu_kit, "obtain", obtain)
    monkeypatch.setattr(gpu_kit, "fetcher", lambda target, out: lambda req: fake_wheel(out, req, "3.1.0"))
    monkeypatch.setattr(gpu_kit, "commit", lambda root: ("abc123", False))
    out = tmp_path / "kit"
    (out / "site").mkdir(parents=True)
    (out / "stale-1.0-py3-none-any.whl").write_bytes(b"from an earlier kit")
    entries = gpu_kit.make_kit(load_target(), out)

    listed = json.loads((out / "manifest.json").read_text())
    assert listed == entries
    assert {e["name"] for e in listed} >= {"deepspeed", "hjson", "torchao", "precision-base", "precision-testsupport"}
    assert all({"name", "version", "file", "sha256", "size"} <= set(e) for e in listed)
    assert sorted(p.name for p in out.glob("*.whl")) == sorted(e["file"] for e in listed)  # the stale one is gone
    kit = json.loads((out / "kit.json").read_text())
    assert (kit["commit"], kit["python"], kit["wheels"]) == ("abc123", "3.12.3", len(listed))
    assert kit["target"] == "tools/gpu_targets/h200.toml"
    printed = capsys.readouterr().out
    assert "python3 -m pip install -q --no-index --no-deps" in printed
    assert 'bash tools/gpu_node.sh "$OUT"' in printed

    monkeypatch.setattr(gpu_kit, "LIMIT", 100)
    with pytest.raises(SystemExit, match=r"gpu_kit: refused: the kit is .* above its 0 KiB limit"):
        gpu_kit.make_kit(load_target(), out)
    assert not (out / "manifest.json").exists()
