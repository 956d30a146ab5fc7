"""Which heavy libraries a plugin's info module and package ``__init__`` import, checked in a fresh interpreter.

Listing plugins must stay cheap: a plugin whose info module or package ``__init__`` imports torch, Lightning or
DeepSpeed makes every ``precision-plugins list`` (and every import of its package) pay for them. ``doctor`` and the
conformance kit report it with [`heavy_imports`][precision_base.import_check.heavy_imports].
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

HEAVY_MODULES = ("torch", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed")
"""Top-level modules an info module or a plugin package's ``__init__`` must not import."""

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


def heavy_imports(module: str, attribute: str = "", timeout: float = 120.0) -> HeavyImports:
    """Load ``module:attribute`` (as listing does) and then ``module``'s top-level package, in a new interpreter.

    With an empty ``attribute`` only the top-level package of ``module`` is imported.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # what this interpreter sees
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, module, attribute, ",".join(HEAVY_MODULES)],
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
