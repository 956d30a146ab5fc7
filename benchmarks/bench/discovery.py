"""Discovery cost: what finding and resolving a plugin costs a fresh interpreter, timed by ``pyperf command`` in
venvs holding 0, 1, 10 or 100 dummy plugin wheels next to this interpreter's packages; one more run of each command
records which modules it imported."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import report
from precision_testsupport.wheels import build_wheels, make_venv, write_project

COMMANDS = {
    "python -c pass": "pass",
    "import precision_base": "import precision_base",
    "precision-plugins list": "import sys; from precision_base.cli import main; sys.exit(main(['list']))",
    "resolve('fsdp:bf16-mixed')": "import precision_base; precision_base.resolve('fsdp:bf16-mixed')",
    "import lightning": "import lightning",
}
"""Label -> code run with ``python -c``; ``precision-plugins list`` runs what its console script runs."""
HEAVY = ("resolve('fsdp:bf16-mixed')", "import lightning")  # import torch: timed without dummies only
HEAVY_MODULES = ("torch", "lightning", "pytorch_lightning", "deepspeed", "numpy", "sympy", "yaml")


def environments(cache: Path, counts: list[int]) -> dict[int, Path]:
    """A venv per dummy count (cached under ``cache`` between runs); returns count -> its python."""
    root = cache / f"discovery-py{sys.version_info.major}{sys.version_info.minor}"
    projects = [root / "projects" / f"precision-bench-dummy-{i:03d}" for i in range(max(counts))]
    if len(list((root / "wheels").glob("*.whl"))) < len(projects):
        for i, project in enumerate(projects):
            if not project.exists():
                write_project(project.parent, project.name, f"dummy{i:03d}", info_extra=", requires=('torch>=2.0',)")
        build_wheels(projects, root / "wheels")
    wheels = sorted((root / "wheels").glob("*.whl"))
    pythons = {}
    for n in counts:
        env = root / f"venv-{n}"
        if not (env / ".complete").exists():
            make_venv(env, wheels[:n], inherit=True)
            (env / ".complete").write_text("ok\n")
        pythons[n] = env / "bin" / "python"
    return pythons


def pyperf_times(python: Path, code: str, quick: bool, heavy: bool) -> list[float]:
    """Seconds per fresh-process run of ``python -c code``, from ``pyperf command``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = ["-m", "pyperf", "command", "--quiet", "-p", "2" if quick or heavy else "10", "-n", "1" if heavy else "3",
               "-w", "1", "-l", "1"]  # fmt: skip
        subprocess.run([sys.executable, *cmd, "-o", str(out), "--", str(python), "-c", code], check=True, cwd=tmp)
        import pyperf

        return list(pyperf.Benchmark.load(str(out)).get_values())


def imported(python: Path, code: str) -> dict[str, Any]:
    dump = "\nimport sys as _s, json as _j; print('@@' + _j.dumps(sorted(_s.modules)))"
    cmd = [str(python), "-c", code.replace("sys.exit(", "(") + dump]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    modules = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("@@"))[2:])
    top = {m.split(".")[0] for m in modules}
    return {"modules": len(modules), "heavy": [m for m in HEAVY_MODULES if m in top]}


def run(quick: bool, cache: Path) -> dict[str, Any]:
    """``cache``: where the venvs are kept between runs."""
    counts = [0, 10] if quick else [0, 1, 10, 100]
    pythons = environments(cache, counts)
    samples: dict[str, dict[str, list[float]]] = {}
    for label, code in COMMANDS.items():
        for n in [0] if label in HEAVY else counts:
            samples.setdefault(label, {})[str(n)] = pyperf_times(pythons[n], code, quick, label in HEAVY)
    base = samples["python -c pass"]["0"]
    results: dict[str, Any] = {
        "process_wall_s": {k: {n: report.summarize(v) for n, v in per.items()} for k, per in samples.items()},
        "modules": {label: imported(pythons[0], code) for label, code in COMMANDS.items()},
        "vs_pass": {k: report.ratio(per["0"], base) for k, per in samples.items() if k != "python -c pass"},
    }
    return {"config": {"counts": counts, "commands": COMMANDS}, "results": results}
