"""Discovery cost: what finding and resolving a plugin costs a fresh interpreter, and how it grows with plugins.

Every timed command runs in a fresh interpreter of a venv holding 0, 1, 10 or 100 dummy plugin distributions
(:mod:`bench.dummies`) next to the real precision-fsdp and precision-deepspeed. Commands run in shuffled
round-robin order (every command and environment once per round), after one untimed warm-up run each (bytecode
written, files in the page cache). The wall time of the whole process is measured from outside; in-process
times of ``list_plugins()`` and ``resolve()`` alone are printed by the process itself. A separate run of each
command records which modules it imported.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import stats
from bench.dummies import make_env
from bench.report import envelope, md_table, pyplot, write_json, write_markdown

COMMANDS: dict[str, str] = {
    "python -c pass": "pass",
    "import precision_base": "import precision_base",
    "precision-plugins list": "import sys; from precision_base.cli import main; sys.exit(main(['list']))",
    "resolve('fsdp:bf16-mixed')": "import precision_base; precision_base.resolve('fsdp:bf16-mixed')",
    "import lightning": "import lightning",
}
"""Label -> the code run with ``python -c``. ``precision-plugins list`` runs what its console script runs."""

HEAVY_COMMANDS = ("resolve('fsdp:bf16-mixed')", "import lightning")
"""Commands that import torch and Lightning (seconds each): timed at fewer plugin counts and repeats."""

IN_PROCESS: dict[str, str] = {
    "list_plugins()": (
        "import time, precision_base as pb\nt = time.perf_counter()\npb.list_plugins()\nprint(time.perf_counter() - t)"
    ),
    "get_entry('fsdp')": (
        "import time, precision_base as pb\nt = time.perf_counter()\npb.get_entry('fsdp')\n"
        "print(time.perf_counter() - t)"
    ),
}
"""Calls timed inside the process, after ``import precision_base``. ``get_entry('fsdp')`` is everything
``resolve('fsdp:bf16-mixed')`` does before importing the plugin class (discovery, checks of that one plugin)."""

HEAVY_MODULES = (
    "torch",
    "lightning",
    "lightning_fabric",
    "pytorch_lightning",
    "lightning_utilities",
    "deepspeed",
    "numpy",
    "sympy",
    "triton",
    "fsspec",
    "yaml",
)

_MODULES_HOOK = (
    "import atexit as _a, sys as _s, json as _j\n"
    "_a.register(lambda: _s.stderr.write('\\n@@MODULES@@' + _j.dumps(sorted(_s.modules)) + '\\n'))\n"
)


def settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "counts": [0, 10],
            "heavy_counts": [0],
            "repeats": 2,
            "heavy_repeats": 1,
            "heavy_commands": ["resolve('fsdp:bf16-mixed')"],
            "heavy_warmup": False,
        }
    return {
        "counts": [0, 1, 10, 100],
        "heavy_counts": [0],
        "repeats": 10,
        "heavy_repeats": 3,
        "heavy_commands": list(HEAVY_COMMANDS),
        "heavy_warmup": True,
    }


def clean_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH"):
        env.pop(key, None)
    env["PYTHONWARNINGS"] = "ignore"
    return env


def run_once(python: Path, code: str, env: dict[str, str], timeout: float = 300) -> tuple[float, str, str]:
    start = time.perf_counter()
    proc = subprocess.run(
        [str(python), "-c", code], env=env, capture_output=True, text=True, timeout=timeout, cwd=tempfile.gettempdir()
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{python} -c {code!r} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout, proc.stderr


def _modules_from(stderr: str) -> list[str]:
    line = next(x for x in stderr.splitlines() if x.startswith("@@MODULES@@"))
    return list(json.loads(line.removeprefix("@@MODULES@@")))


def module_facts(modules: list[str]) -> dict[str, Any]:
    stdlib = set(sys.stdlib_module_names)
    top = sorted({m.split(".")[0] for m in modules})
    third = [m for m in top if m not in stdlib and not m.startswith("_")]
    return {
        "modules": len(modules),
        "heavy": [m for m in HEAVY_MODULES if m in top],
        "third_party_top_level": third,
        "plugin_packages": [m for m in top if m.startswith("precision_") and m != "precision_base"],
    }


def measure(cache: Path, quick: bool) -> dict[str, Any]:
    cfg = settings(quick)
    env = clean_env()
    build_start = time.perf_counter()
    pythons = {n: make_env(cache, n) for n in cfg["counts"]}
    build_s = time.perf_counter() - build_start

    jobs: list[tuple[str, int, str, int]] = []  # (label, count, kind, repeats)
    for n in cfg["counts"]:
        for label in COMMANDS:
            heavy = label in HEAVY_COMMANDS
            if heavy and (n not in cfg["heavy_counts"] or label not in cfg["heavy_commands"]):
                continue
            jobs.append((label, n, "process", cfg["heavy_repeats"] if heavy else cfg["repeats"]))
        for label in IN_PROCESS:
            jobs.append((label, n, "in-process", cfg["repeats"]))

    def code_of(label: str, kind: str) -> str:
        # the process commands carry an atexit hook that lists sys.modules on stderr (~1 ms, after the work)
        return _MODULES_HOOK + COMMANDS[label] if kind == "process" else IN_PROCESS[label]

    for label, n, kind, _ in jobs:  # warm-up, untimed; one heavy run warms the page cache for all heavy ones
        if label not in HEAVY_COMMANDS:
            run_once(pythons[n], code_of(label, kind), env)
    if cfg["heavy_warmup"]:
        run_once(pythons[0], COMMANDS["import lightning"], env)

    samples: dict[tuple[str, int, str], list[float]] = {(lb, n, k): [] for lb, n, k, _ in jobs}
    module_lists: dict[str, list[str]] = {}
    rng = random.Random(0)
    for r in range(max(j[3] for j in jobs)):
        todo = [j for j in jobs if j[3] > r]
        rng.shuffle(todo)
        for label, n, kind, _ in todo:
            wall, out, err = run_once(pythons[n], code_of(label, kind), env)
            samples[(label, n, kind)].append(wall if kind == "process" else float(out.strip().splitlines()[-1]))
            if kind == "process" and n == 0 and label not in module_lists:
                module_lists[label] = _modules_from(err)

    modules = {label: module_facts(mods) for label, mods in module_lists.items()}

    # the real console script, in the environment running this benchmark (no dummies)
    script = shutil.which("precision-plugins", path=str(Path(sys.executable).parent))
    console: dict[str, Any] | None = None
    if script:
        times = []
        for i in range(cfg["repeats"] + 1):
            start = time.perf_counter()
            subprocess.run([script, "list"], env=env, capture_output=True, check=True, timeout=120)
            if i:
                times.append(time.perf_counter() - start)
        console = stats.summarize(times)

    return {"settings": cfg, "env_build_s": build_s, "samples": samples, "modules": modules, "console_script": console}


def analyse(raw: dict[str, Any]) -> dict[str, Any]:
    samples = raw["samples"]
    process: dict[str, dict[str, Any]] = {}
    in_process: dict[str, dict[str, Any]] = {}
    for (label, n, kind), values in samples.items():
        target = process if kind == "process" else in_process
        target.setdefault(label, {})[str(n)] = stats.summarize(values)
    versus: dict[str, dict[str, Any]] = {}
    for (label, n, kind), values in samples.items():
        if kind != "process":
            continue
        entry: dict[str, Any] = {}
        base = samples.get(("python -c pass", n, "process"))
        if base and label != "python -c pass":
            entry["extra_over_pass_s"] = stats.median(values) - stats.median(base)
            entry["vs_pass"] = stats.ratio(values, base, resamples=1000)
        light = samples.get(("import lightning", n, "process"))
        if light and label != "import lightning":
            entry["vs_import_lightning"] = stats.ratio(values, light, resamples=1000)
        versus.setdefault(label, {})[str(n)] = entry
    return {
        "process_wall_s": process,
        "in_process_s": in_process,
        "comparisons": versus,
        "modules": raw["modules"],
        "console_script_list_s": raw["console_script"],
        "env_build_s": raw["env_build_s"],
    }


def findings(results: dict[str, Any]) -> list[str]:
    out = []
    ip = results["in_process_s"].get("list_plugins()", {})
    counts = sorted(ip, key=int)
    if len(counts) >= 2:
        lo, hi = counts[0], counts[-1]
        a, b = ip[lo]["median"], ip[hi]["median"]
        per = (b - a) / (int(hi) - int(lo)) if int(hi) != int(lo) else 0.0
        out.append(
            f"list_plugins() in-process: {a * 1e3:.1f} ms with {lo} dummy plugins, {b * 1e3:.1f} ms with {hi} "
            f"({per * 1e3:.2f} ms per extra installed plugin distribution)"
        )
    for label in ("import precision_base", "precision-plugins list"):
        heavy = results["modules"][label]["heavy"]
        out.append(f"{label} imports {', '.join(heavy) if heavy else 'none of torch, Lightning, DeepSpeed, numpy'}")
    return out


def table(data: dict[str, Any]) -> str:
    res = data["results"]
    proc = res["process_wall_s"]
    counts = sorted({n for v in proc.values() for n in v}, key=int)
    header = [
        "command",
        *[f"{n} dummies: ms (IQR)" for n in counts],
        "extra over `pass` (0 dummies)",
        "/ import lightning",
    ]
    rows = []
    for label in COMMANDS:
        cells = [f"`{label}`"]
        for n in counts:
            s = proc.get(label, {}).get(n)
            cells.append("-" if s is None else f"{s['median'] * 1e3:.0f} ({s['iqr'] * 1e3:.0f})")
        cmp0 = res["comparisons"].get(label, {}).get(counts[0], {})
        extra = cmp0.get("extra_over_pass_s")
        cells.append("-" if extra is None else f"{extra * 1e3:+.0f} ms ({stats.fmt_ratio(cmp0['vs_pass'])}x)")
        vl = cmp0.get("vs_import_lightning")
        cells.append("-" if vl is None else stats.fmt_ratio(vl))
        rows.append(cells)
    ip = res["in_process_s"]
    ip_rows = []
    for label, per in ip.items():
        ip_rows.append(
            [f"`{label}`"]
            + [
                "-" if per.get(n) is None else f"{per[n]['median'] * 1e3:.2f} ({per[n]['iqr'] * 1e3:.2f})"
                for n in counts
            ]
        )

    def third(f: dict[str, Any]) -> str:
        names = f["third_party_top_level"]
        return ", ".join(names) if len(names) <= 6 else f"{len(names)} packages"

    mod_rows = [
        [f"`{label}`", f["modules"], ", ".join(f["heavy"]) or "none", third(f)]
        for label, f in sorted(res["modules"].items(), key=lambda kv: list(COMMANDS).index(kv[0]))
    ]
    s = data["config"]["settings"]
    console = res.get("console_script_list_s")
    body = (
        "Every command runs in a fresh interpreter of a venv with 0, 1, 10 or 100 dummy plugin distributions "
        "installed (real wheels, installed by pip; each declares `torch>=2.0` like a real plugin) next to "
        "precision-fsdp and precision-deepspeed. Commands interleaved in shuffled rounds after one warm-up run each: "
        f"{s['repeats']} runs of the light commands, {s['heavy_repeats']} of those that import torch. "
        "`precision-plugins list` runs exactly what its console script runs. Cells: median wall time of the whole "
        "process in ms (IQR); ratios are of medians with a 95% bootstrap interval.\n\n"
        + md_table(header, rows)
        + "\n\nIn-process time of the call alone, after `import precision_base` (ms, IQR):\n\n"
        + md_table(["call", *[f"{n} dummies" for n in counts]], ip_rows)
        + "\n\nModules each command imports (0 dummies):\n\n"
        + md_table(
            ["command", "modules in sys.modules", "heavy modules imported", "third-party top-level packages"], mod_rows
        )
    )
    if console:
        body += (
            "\n\nThe installed `precision-plugins list` console script itself: "
            f"{console['median'] * 1e3:.0f} ms median (IQR {console['iqr'] * 1e3:.0f} ms)."
        )
    if data["findings"]:
        body += "\n\n" + "\n".join(f"- {f}" for f in data["findings"])
    body += "\n\n![discovery cost](discovery.png)\n"
    return body


def plot(results: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    proc = results["process_wall_s"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    labels = [lb for lb in COMMANDS if "0" in proc.get(lb, {})]
    meds = [proc[lb]["0"]["median"] * 1e3 for lb in labels]
    errs = [
        [(proc[lb]["0"]["median"] - proc[lb]["0"]["p25"]) * 1e3 for lb in labels],
        [(proc[lb]["0"]["p75"] - proc[lb]["0"]["median"]) * 1e3 for lb in labels],
    ]
    ax1.barh(range(len(labels)), meds, xerr=errs, color="#1f77b4", capsize=3)
    ax1.set_yticks(range(len(labels)), labels, fontsize=8)
    ax1.set_xscale("log")
    ax1.set_xlabel("fresh-interpreter wall time, ms (log; bars: IQR)")
    ax1.set_title("cost of each command (no dummy plugins)", fontsize=9)
    for label, style in (("precision-plugins list", "o-"), ("import precision_base", "s-"), ("python -c pass", "^-")):
        per = proc.get(label, {})
        ns = sorted(per, key=int)
        ax2.plot([max(int(n), 0.5) for n in ns], [per[n]["median"] * 1e3 for n in ns], style, label=label)
    ip = results["in_process_s"].get("list_plugins()", {})
    ns = sorted(ip, key=int)
    ax2.plot(
        [max(int(n), 0.5) for n in ns], [ip[n]["median"] * 1e3 for n in ns], "d--", label="list_plugins() in-process"
    )
    ax2.set_xscale("log")
    ax2.set_xlabel("installed dummy plugin distributions (0 drawn at 0.5)")
    ax2.set_ylabel("ms")
    ax2.set_title("scaling with installed plugins", fontsize=9)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(quick: bool, machine: dict[str, Any], out: Path, cache: Path) -> list[Path]:
    start = time.perf_counter()
    raw = measure(cache, quick)
    results = analyse(raw)
    data = envelope(
        "discovery",
        machine=machine,
        config={"settings": raw["settings"], "commands": COMMANDS, "in_process": IN_PROCESS},
        results=results,
        duration_s=time.perf_counter() - start,
        quick=quick,
        findings=findings(results),
    )
    base = out / "discovery"
    return [
        write_json(base.with_suffix(".json"), data),
        plot(results, base.with_suffix(".png")),
        write_markdown(base.with_suffix(".md"), "Discovery cost", table(data), data),
    ]
