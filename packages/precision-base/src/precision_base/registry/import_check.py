"""Which heavy libraries a plugin's info module and package ``__init__`` import, checked in a fresh interpreter.

Listing plugins must stay cheap: a plugin whose info module or package ``__init__`` imports torch, Lightning or a
library its backend needs (what its distribution requires) makes every ``precision-plugins list`` (and every import
of its package) pay for them. ``doctor`` and the
conformance kit report it with [`heavy_imports`][precision_base.registry.import_check.heavy_imports].
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

from precision_base.registry.discovery import canonical_dist

HEAVY_MODULES = ("torch", "lightning", "pytorch_lightning", "lightning_fabric")
"""Top-level modules no info module or plugin package ``__init__`` may import; to these
[`heavy_imports`][precision_base.registry.import_check.heavy_imports] adds the modules of every distribution built on
torch that the plugin's own distribution requires at run time (a backend's engine, such as DeepSpeed for
precision-deepspeed)."""

_SCRIPT = """
import importlib, json, sys
from precision_base.registry.loading import load_object

heavy = sys.argv[3].split(",")
result = {"info": [], "package": [], "error": ""}
try:
    if sys.argv[2]:
        load_object(sys.argv[1], sys.argv[2])
    result["info"] = [m for m in heavy if m in sys.modules]
    importlib.import_module(sys.argv[1].split(".")[0])
    result["package"] = [m for m in heavy if m in sys.modules and m not in result["info"]]
except BaseException as exc:
    result["error"] = f"{type(exc).__name__}: {exc}"[:500]
print(json.dumps(result))
"""


def _run_time_requirements(distribution: str) -> set[str]:
    """The canonical names of what ``distribution`` requires at run time (its extras' lines left out)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        lines = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return set()
    reqs = [Requirement(line) for line in lines]
    return {canonical_dist(r.name) for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})}


def torch_built(distribution: str) -> tuple[str, ...]:
    """The top-level modules of each distribution ``distribution`` requires at run time that is torch or requires
    torch itself (a backend's engine, such as DeepSpeed for precision-deepspeed); none for an empty name."""
    if not distribution:
        return ()
    from importlib import metadata

    needs = {d for d in _run_time_requirements(distribution) if d == "torch" or "torch" in _run_time_requirements(d)}
    return tuple(
        top
        for top, dists in sorted(metadata.packages_distributions().items())
        if top not in HEAVY_MODULES and not top.startswith("_") and any(canonical_dist(d) in needs for d in dists)
    )


@dataclass(frozen=True)
class HeavyImports:
    """Heavy modules imported by a plugin's info module and, on top of those, by its package ``__init__``."""

    info: tuple[str, ...]
    package: tuple[str, ...]
    error: str = ""

    def problems(self, where: str) -> list[str]:
        """One sentence per finding, naming ``where`` (e.g. the entry point)."""
        out = []
        if self.info:
            out.append(f"the info module of {where} imports {', '.join(self.info)} (listing plugins then pays for it)")
        if self.package:
            out.append(f"the package __init__ of {where} imports {', '.join(self.package)}; import it lazily")
        if self.error:
            out.append(f"importing {where} in a fresh interpreter failed: {self.error}")
        return out


def heavy_imports(module: str, attribute: str = "", timeout: float = 120.0, distribution: str = "") -> HeavyImports:
    """Load ``module:attribute`` (as listing does) and then ``module``'s top-level package, in a new interpreter.

    With an empty ``attribute`` only the top-level package of ``module`` is imported. Heavy are
    [`HEAVY_MODULES`][precision_base.registry.import_check.HEAVY_MODULES] and, given the plugin's ``distribution``,
    the top-level modules of each distribution it requires at run time (not its extras) that requires torch.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # what this interpreter sees
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, module, attribute, ",".join(HEAVY_MODULES + torch_built(distribution))],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return HeavyImports((), (), f"the check's interpreter exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return HeavyImports(tuple(data["info"]), tuple(data["package"]), data["error"])
