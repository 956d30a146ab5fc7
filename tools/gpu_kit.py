"""The offline kit for a GPU node (``nox -s gpu_kit [-- TARGET.toml]``, issue 29): built here, with the network, into
``build/gpu-kit/``; the node has no network and takes packages only as wheel files in the working tree.

A target file (default :data:`DEFAULT_TARGET`, ``tools/gpu_targets/h200.toml``) says what the node has: its Python
and platform, what is installed (with versions where known), what is not, and what a run must check first. The kit
holds what a GPU run (``benchmarks/gpu_bench.py``) needs and the node lacks, and nothing the node already has:

1. the top level (:func:`top_level`): this repository's published packages, built from this tree; the unpublished
   test helpers (precision-testsupport) only where the GPU run imports them; DeepSpeed :data:`DEEPSPEED`, where a
   package requires DeepSpeed and the node lacks it, built from its sdist with ``DS_BUILD_OPS=0`` (a pure-Python
   wheel: its ops compile on the node when first used); torchao where a package's extra names it and the node
   lacks it, at the newest version built for the node's torch (:func:`torchao_for`, table :data:`TORCHAO`);
2. then every requirement of those wheels (and of theirs) that the node lacks (:func:`resolve`, :func:`unmet`:
   markers evaluated for the node, an extra's only where it was asked for), each the newest wheel pip finds for
   the node's Python and platform (``pip download --no-deps --only-binary :all:``, :func:`download_args`); a
   requirement the node meets by name only (no version known) is recorded as assumed, one its known version fails
   as a conflict (both printed, and kept in ``kit.json`` for the node's checks);
3. ``manifest.json`` (a list: name, version, file, sha256, size, why; :func:`manifest`) and ``kit.json`` (the
   target, the commit, the total, the assumed requirements and conflicts, the node command);
4. a kit above :data:`LIMIT` (48 MiB: the working tree that travels must stay under 64 MiB) is refused, naming its
   largest files (:func:`too_big`), and gets no manifest;
5. the node command is printed (:data:`NODE_RUN`): ``tools/gpu_node.sh`` installs the kit there with
   :func:`node_command`'s pip line (into ``build/gpu-kit/site``), runs the target's checks and then the GPU run.

``python -m tools.gpu_kit --plan [TARGET.toml]`` prints step 1 and the target's facts; no network, nothing written.
The network and subprocess steps are the thin functions at the end; everything above them is pure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path
from typing import Any

import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from tools.packages import ROOT, Package, packages, unpublished_packages

DEFAULT_TARGET = ROOT / "tools" / "gpu_targets" / "h200.toml"
KIT = ROOT / "build" / "gpu-kit"
LIMIT = 48 * 2**20
"""The kit's largest size in bytes: it travels inside a working tree that must stay under 64 MiB."""
GPU_RUN = ("benchmarks/gpu_bench.py", "benchmarks/bench")
"""What the GPU run executes (files, or folders of ``*.py``): scanned for imports of the unpublished packages."""
DEEPSPEED = "0.19.8"
DS_BUILD = {"DS_BUILD_OPS": "0"}
TORCHAO: tuple[tuple[str, str], ...] = (
    # From 0.17.0 torchao is ABI-stable against torch and gates on a minimum: torch >= 2.11.0.
    ("0.18.0", ">=2.11"),
    ("0.17.0", ">=2.11"),
    # Before: each release's C++ extensions were built against one torch and are skipped under any other.
    ("0.16.0", "==2.10.0"),
    ("0.15.0", "==2.9.1"),
    ("0.14.1", "==2.9.0"),
    ("0.13.0", "==2.8.0"),  # the floor of precision-fsdp's fp8 extra
)
"""torchao version -> the torch it supports, newest first. torchao declares no torch requirement (pip cannot pick
it), so :func:`torchao_for` does: the first row whose specifier the node's torch (local label dropped) meets."""


@dataclass(frozen=True)
class Target:
    """A GPU node, read from a target file by :func:`load_target`. ``installed``: canonical name -> version (None
    where the file gives none, ``"*"``, or lists the name under ``[also_installed]``)."""

    name: str
    path: Path
    python: str
    implementation: str
    machine: str
    glibc: str
    installed: Mapping[str, str | None]
    absent: frozenset[str]
    checks: Mapping[str, str]
    facts: Mapping[str, object] = field(default_factory=dict)

    @property
    def python_short(self) -> str:
        """``3.12`` for Python 3.12.3: what ``pip --python-version`` takes."""
        return ".".join(self.python.split(".")[:2])

    @property
    def torch(self) -> str | None:
        return self.installed.get("torch")

    def has(self, name: str) -> bool:
        return canonicalize_name(name) in self.installed

    def platforms(self) -> list[str]:
        """Every manylinux tag the node takes, newest first: ``manylinux_2_<N>_<machine>`` from its glibc down to
        2.5, and the legacy aliases (manylinux2014 = 2.17, manylinux2010 = 2.12, manylinux1 = 2.5)."""
        major, minor = (int(p) for p in self.glibc.split("."))
        tags = [f"manylinux_{major}_{n}_{self.machine}" for n in range(minor, 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        return tags + [f"{alias}_{self.machine}" for n, alias in legacy.items() if n <= minor]

    def environment(self) -> dict[str, str]:
        """The environment markers are evaluated in on the node (CPython on Linux)."""
        return {
            "python_version": self.python_short,
            "python_full_version": self.python,
            "implementation_name": "cpython",
            "implementation_version": self.python,
            "platform_python_implementation": "CPython",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "platform_machine": self.machine,
            "os_name": "posix",
            "platform_release": "",
            "platform_version": "",
            "extra": "",
        }


def load_target(path: Path = DEFAULT_TARGET) -> Target:
    """Read a target file (see ``tools/gpu_targets/h200.toml``); a name both installed and absent is an error."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    installed: dict[str, str | None] = {}
    for name, version in data.get("installed", {}).items():
        installed[canonicalize_name(name)] = None if version == "*" else str(version)
    for name in data.get("also_installed", {}).get("names", []):
        installed.setdefault(canonicalize_name(name), None)
    absent = frozenset(canonicalize_name(n) for n in data.get("absent", {}).get("names", []))
    both = sorted(absent & set(installed))
    if both:
        raise SystemExit(f"{path}: listed as installed and as absent: {', '.join(both)}")
    try:
        return Target(
            name=data["name"],
            path=path,
            python=str(data["python"]),
            implementation=data.get("implementation", "cp"),
            machine=data.get("machine", "x86_64"),
            glibc=str(data["glibc"]),
            installed=installed,
            absent=absent,
            checks=dict(data.get("checks", {})),
            facts={k: v for k, v in data.items() if k not in ("installed", "also_installed", "absent", "checks")},
        )
    except KeyError as missing:
        need = "a target file names the node, its python and glibc"
        raise SystemExit(f"{path}: no {missing.args[0]!r} ({need})") from None


def torchao_for(torch: str) -> str | None:
    """The newest torchao of :data:`TORCHAO` that supports ``torch`` (``2.11.0+cu130`` -> ``0.18.0``), or None."""
    public = Version(torch).public
    return next((ao for ao, spec in TORCHAO if SpecifierSet(spec).contains(public, prereleases=True)), None)


def imports(text: str, module: str) -> bool:
    """Whether Python source ``text`` imports ``module`` (``import m``, ``from m import``, ``from m.sub import``)."""
    return re.search(rf"^\s*(?:from|import)\s+{re.escape(module)}\b", text, re.MULTILINE) is not None


def gpu_run_text(root: Path = ROOT, parts: Iterable[str] = GPU_RUN) -> str:
    """The source of the GPU run: the files of :data:`GPU_RUN`, and the ``*.py`` files of its folders."""
    files: list[Path] = []
    for part in parts:
        path = root / part
        files += sorted(path.glob("*.py")) if path.is_dir() else [path] if path.is_file() else []
    return "\n".join(f.read_text(encoding="utf-8") for f in files)


@dataclass(frozen=True)
class Item:
    """One distribution of the kit's top level. ``how``: ``project`` (built from ``spec``, a folder of this tree),
    ``sdist`` (pip builds ``spec`` from its sdist) or ``binary`` (pip downloads ``spec``'s wheel for the node)."""

    name: str
    spec: str
    how: str
    why: str


def extra_naming(pkg: Package, name: str) -> str | None:
    """The extra of ``pkg`` that requires distribution ``name``, if any."""
    project = tomllib.loads(pkg.pyproject.read_text(encoding="utf-8"))["project"]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        if any(canonicalize_name(Requirement(r).name) == canonicalize_name(name) for r in reqs):
            return str(extra)
    return None


def top_level(target: Target, published: list[Package], helpers: list[Package], run_text: str) -> list[Item]:
    """What the kit is built from, before the requirements of what it holds: see the module's docstring."""
    items = [Item(p.dist, str(p.path), "project", "this repository's package, built from this tree") for p in published]
    items += [
        Item(p.dist, str(p.path), "project", f"the GPU run imports {p.module} (test helpers, never published)")
        for p in helpers
        if imports(run_text, p.module)
    ]
    users = [p.dist for p in published if p.requires("deepspeed")]
    if users and not target.has("deepspeed"):
        why = (
            f"required by {', '.join(users)}; built from its sdist with DS_BUILD_OPS=0, so its ops compile on the "
            "node when first used"
        )
        items.append(Item("deepspeed", f"deepspeed=={DEEPSPEED}", "sdist", why))
    extras = [f"{p.dist}[{extra}]" for p in published if (extra := extra_naming(p, "torchao"))]
    if extras and not target.has("torchao") and target.torch is not None:
        ao = torchao_for(target.torch)
        if ao is not None:
            why = f"{', '.join(extras)}: the GPU run's fp8 section; the newest torchao for torch {target.torch}"
            items.append(Item("torchao", f"torchao=={ao}", "binary", why))
    return items


def plan(target: Target, root: Path = ROOT) -> list[Item]:
    """:func:`top_level` for the packages and the GPU run of the tree at ``root``."""
    return top_level(target, list(packages(root).values()), unpublished_packages(root), gpu_run_text(root))


@dataclass
class Needs:
    """What one wheel's requirements ask of the kit: ``fetch`` (the node lacks them), ``assumed`` (met by name
    only: the node's version is not known), ``conflicts`` (a known version that fails the requirement)."""

    fetch: list[Requirement] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)


def unmet(
    who: str, requires: Iterable[str], target: Target, kit: Mapping[str, str], extras: Iterable[str] = ()
) -> Needs:
    """The requirements ``requires`` of distribution ``who``, against the node and the kit so far (``kit``:
    canonical name -> version). Requirements whose marker is false on the node are skipped, those of an extra
    too unless ``extras`` (what was asked of ``who``) names it."""
    needs = Needs()
    envs = [target.environment(), *({**target.environment(), "extra": extra} for extra in extras)]
    for text in requires:
        req = Requirement(text)
        if req.marker is not None and not any(req.marker.evaluate(env) for env in envs):
            continue
        name = canonicalize_name(req.name)
        if name in target.installed or name in kit:
            where = "the node" if name in target.installed else "the kit"
            version = target.installed[name] if name in target.installed else kit[name]
            if version is None:
                if req.specifier:
                    needs.assumed.append(f"{who}: {req.name}{req.specifier} (the node's version is not known)")
            elif not req.specifier.contains(version, prereleases=True):
                needs.conflicts.append(f"{who} requires {req.name}{req.specifier}, but {where} has {version}")
        elif name not in {canonicalize_name(r.name) for r in needs.fetch}:
            needs.fetch.append(req)
    return needs


def wheel_name(path: Path) -> tuple[str, str]:
    """(canonical name, version) from a wheel's file name."""
    name, version, _, _ = parse_wheel_filename(path.name)
    return str(name), str(version)


def wheel_requires(path: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA."""
    with zipfile.ZipFile(path) as zf:
        meta = next(n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        return list(Parser().parsestr(zf.read(meta).decode("utf-8")).get_all("Requires-Dist") or [])


@dataclass
class Resolved:
    wheels: list[Path]
    why: dict[str, str]
    assumed: list[str]
    conflicts: list[str]


def resolve(wheels: list[Path], why: Mapping[str, str], target: Target, fetch: Callable[[str], Path]) -> Resolved:
    """Add to ``wheels`` (with ``why``: file name -> reason) every requirement the node lacks, transitively;
    ``fetch(requirement)`` returns the wheel file for one (``name`` + specifier, no marker)."""
    done = Resolved(list(wheels), dict(why), [], [])
    kit = dict(wheel_name(w) for w in wheels)
    extras: dict[str, set[str]] = {}  # what was asked of a fetched distribution: `pydantic[email]` -> email
    queue = list(wheels)
    while queue:
        wheel = queue.pop(0)
        who = wheel_name(wheel)[0]
        needs = unmet(who, wheel_requires(wheel), target, kit, extras.get(who, ()))
        done.assumed += needs.assumed
        done.conflicts += needs.conflicts
        for req in needs.fetch:
            new = fetch(f"{req.name}{req.specifier}")
            name, version = wheel_name(new)
            kit[name] = version
            extras[name] = set(req.extras)
            done.wheels.append(new)
            done.why[new.name] = f"required by {who} ({req.name}{req.specifier}); not on the node"
            queue.append(new)
    return done


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest(wheels: Iterable[Path], why: Mapping[str, str]) -> list[dict[str, Any]]:
    """One entry per wheel, by name: name, version, file, sha256, size (bytes), why."""
    entries: list[dict[str, Any]] = []
    for wheel in sorted(wheels, key=lambda w: wheel_name(w)[0]):
        name, version = wheel_name(wheel)
        entries.append(
            {
                "name": name,
                "version": version,
                "file": wheel.name,
                "sha256": sha256(wheel),
                "size": wheel.stat().st_size,
                "why": why.get(wheel.name, ""),
            }
        )
    return entries


def mib(size: int) -> str:
    """``12.3 MiB``; below 1 MiB, ``456 KiB``."""
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.0f} KiB"


def too_big(entries: list[dict[str, Any]], limit: int = LIMIT, shown: int = 5) -> str | None:
    """The refusal of a kit above ``limit`` bytes, naming its largest files; None when it fits."""
    sizes = {str(e["file"]): int(e["size"]) for e in entries}
    total = sum(sizes.values())
    if total <= limit:
        return None
    largest = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:shown]
    named = ", ".join(f"{file} ({mib(size)})" for file, size in largest)
    return (
        f"gpu_kit: refused: the kit is {mib(total)}, above its {mib(limit)} limit (the working tree that travels "
        f"to the node must stay under 64 MiB); largest: {named}. No manifest was written: drop what the node has "
        "(list it under [installed] in the target file) or carry less."
    )


NODE_RUN = 'bash tools/gpu_node.sh "$OUT"'
"""The node command, from the repository's root there (``$OUT``: the folder whose files come back)."""


def node_command(kit: Path, root: Path = ROOT) -> str:
    """What installs the kit on the node, from the repository's root there (pip, offline, into ``<kit>/site``)."""
    rel = kit.relative_to(root) if kit.is_relative_to(root) else kit
    site = f"{rel}/site" if rel.is_absolute() else f"$PWD/{rel}/site"
    return (
        f"python3 -m pip install -q --no-index --no-deps --no-compile --target {rel}/site {rel}/*.whl"
        f" && export PYTHONPATH={site}"
    )


def download_args(target: Target, requirement: str, dest: Path) -> list[str]:
    """``pip download`` of one distribution's wheel for the node, without its dependencies."""
    platforms = [arg for tag in target.platforms() for arg in ("--platform", tag)]
    return [
        *("download", "--no-deps", "--only-binary", ":all:", "--python-version", target.python_short),
        *("--implementation", target.implementation, *platforms, "--dest", str(dest), requirement),
    ]


def describe(target: Target, items: list[Item]) -> list[str]:
    """The plan as lines: the node, then the top level with the reason for each."""
    lines = [
        f"target {target.name} ({target.path.name}): {target.facts.get('summary', '')}",
        f"  Python {target.python}, torch {target.torch}, wheels for {target.platforms()[0]} and older tags",
        f"  not on the node: {', '.join(sorted(target.absent)) or 'nothing listed'}",
        f"  checked first on the node: {', '.join(target.checks) or 'nothing'}",
        "the kit's top level:",
        *(f"  {item.spec if item.how != 'project' else item.name} [{item.how}]: {item.why}" for item in items),
        "then what their wheels require that the node lacks (resolved for the node by pip, one wheel each)",
    ]
    if target.torch is not None and not target.has("torchao") and torchao_for(target.torch) is None:
        lines.append(f"  no torchao is known to support torch {target.torch}: the GPU run's fp8 section will not run")
    return lines


# The thin steps: subprocesses, the network, the file system.


def run(args: list[str], env: Mapping[str, str] | None = None) -> None:
    print("$", " ".join(args), flush=True)
    subprocess.run(args, check=True, env={**os.environ, **(env or {})})


def single_wheel(folder: Path, out: Path) -> Path:
    (wheel,) = folder.glob("*.whl")
    return Path(shutil.move(wheel, out / wheel.name))


def obtain(item: Item, target: Target, out: Path) -> Path:
    """Build or download one top-level item's wheel into ``out``."""
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        if item.how == "project":
            run([sys.executable, "-m", "build", "--wheel", "--outdir", tmp, item.spec])
        elif item.how == "sdist":
            pip = ["wheel", "--no-deps", "--no-binary", item.name, "--wheel-dir", tmp, item.spec]
            run([sys.executable, "-m", "pip", *pip], env=DS_BUILD)
        else:
            run([sys.executable, "-m", "pip", *download_args(target, item.spec, Path(tmp))])
        return single_wheel(Path(tmp), out)


def fetcher(target: Target, out: Path) -> Callable[[str], Path]:
    def fetch(requirement: str) -> Path:
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            run([sys.executable, "-m", "pip", *download_args(target, requirement, Path(tmp))])
            return single_wheel(Path(tmp), out)

    return fetch


def commit(root: Path = ROOT) -> tuple[str, bool]:
    """The repository's commit and whether the tree has changes ("unknown" outside git)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
    return (head.stdout.strip() or "unknown", bool(status.stdout.strip()))


def clear(out: Path) -> None:
    """Empty a kit folder of what this tool writes (wheels, manifest, kit.json, the node's site/)."""
    out.mkdir(parents=True, exist_ok=True)
    for path in [*out.glob("*.whl"), out / "manifest.json", out / "kit.json"]:
        path.unlink(missing_ok=True)
    shutil.rmtree(out / "site", ignore_errors=True)


def make_kit(target: Target, out: Path = KIT, root: Path = ROOT) -> list[dict[str, Any]]:
    """Build the kit for ``target`` into ``out``: the steps of the module's docstring; returns the manifest."""
    items = plan(target, root)
    print("\n".join(describe(target, items)), flush=True)
    clear(out)
    built = {obtain(item, target, out): item.why for item in items}
    done = resolve(list(built), {w.name: why for w, why in built.items()}, target, fetcher(target, out))
    entries = manifest(done.wheels, done.why)
    refusal = too_big(entries, LIMIT)
    if refusal:
        raise SystemExit(refusal)
    head, dirty = commit(root)
    total = sum(int(e["size"]) for e in entries)
    where = out.relative_to(root) if out.is_relative_to(root) else out
    kit = {
        "target": str(target.path.relative_to(root) if target.path.is_relative_to(root) else target.path),
        "commit": head,
        "dirty": dirty,
        "python": target.python,
        "platforms": target.platforms(),
        "wheels": len(entries),
        "size": total,
        "limit": LIMIT,
        "assumed": done.assumed,
        "conflicts": done.conflicts,
        "checks": dict(target.checks),
        "install": node_command(out, root),
    }
    (out / "manifest.json").write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    (out / "kit.json").write_text(json.dumps(kit, indent=2) + "\n", encoding="utf-8")
    for e in entries:
        print(f"  {e['file']:<60} {mib(int(e['size'])):>9}  {e['why']}")
    print(f"{where}/: {len(entries)} wheels, {mib(total)} (limit {mib(LIMIT)}), manifest.json, kit.json")
    for line in [*(f"conflict: {c}" for c in done.conflicts), *(f"assumed: {a}" for a in done.assumed)]:
        print(f"  {line}")
    print(f"on the node, from the repository's root (the run carries {where}, an ignored folder):")
    print(f"  {NODE_RUN}")
    print(f"  (tools/gpu_node.sh installs the kit with: {kit['install']}; then the target's checks, then the run)")
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", nargs="?", type=Path, default=DEFAULT_TARGET, help="the node's target file")
    parser.add_argument("--out", type=Path, default=KIT, help="the kit folder (default: build/gpu-kit)")
    parser.add_argument("--plan", action="store_true", help="print the top level only: no network, nothing written")
    args = parser.parse_args(argv)
    target = load_target(args.target.resolve())
    if args.plan:
        print("\n".join(describe(target, plan(target))))
        return 0
    make_kit(target, args.out.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
