"""Which zoo cases run: the full cross product (``nox -s zoo``, nightly) and the CI slice (a covering set).

A case is an architecture trained under one plugin spec, through one door (``trainer`` or ``fabric``), with the
plugin's default strategy or the user's own, with or without the whole lifecycle (see ``_zoo_run.py``). Each case
runs in one 2-process launch; its record is written to ``<results>/<case id>.json``, and
``python tests-integration/zoo/zoo_cases.py merge <results> docs/zoo.json`` gathers them for the docs table
(the cog block in docs/zoo.md, filled by tools/docgen/zoo.py).

Precisions: every precision the backend lists (``precision-plugins list``) that runs on a CPU here: FSDP2 32-true,
bf16-true, bf16-mixed, 16-mixed, 16-true; DeepSpeed 32-true, bf16-true, bf16-mixed and 16-mixed / 16-true, whose
CPU refusal (where DeepSpeed's CPU accelerator has no fp16) is recorded as "refused" with its message.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ARCHS = ("llama", "mixtral", "bert", "t5", "resnet", "vit", "litgpt")
SPECS = {
    "fsdp": ("32-true", "bf16-true", "bf16-mixed", "16-mixed", "16-true"),
    "deepspeed": ("32-true", "bf16-true", "bf16-mixed", "16-mixed", "16-true"),
}
USER_STRATEGY_PRECISION = "bf16-mixed"  # the user's own strategy: once per architecture and backend


@dataclass(frozen=True)
class Case:
    arch: str
    spec: str
    strategy: str = "default"  # or "user"
    door: str = "trainer"  # or "fabric"
    lifecycle: bool = True

    @property
    def id(self) -> str:
        return f"{self.arch}-{self.spec.replace(':', '_')}-{self.strategy}-{self.door}"

    def args(self, root: str) -> dict[str, object]:
        return {**asdict(self), "root": root}


def full() -> list[Case]:
    """Every architecture x every spec (default strategy, whole lifecycle); the user's own strategy once per
    architecture and backend; litgpt through the Fabric door at every spec. Ordered so that a run cut short has
    whole columns: the mixed precisions first, the user's strategies and the Fabric door next, then the rest."""

    def default(precision: str) -> list[Case]:
        return [Case(a, f"{b}:{precision}") for b in SPECS for a in ARCHS if precision in SPECS[b]]

    cases = default("bf16-mixed")
    cases += [Case(a, f"{b}:{USER_STRATEGY_PRECISION}", strategy="user") for b in SPECS for a in ARCHS]
    cases += [Case("litgpt", f"{b}:{p}", door="fabric") for b, ps in SPECS.items() for p in ps]
    for precision in ("16-mixed", "32-true", "bf16-true", "16-true"):
        cases += default(precision)
    return cases + [c for c in CI_SLICE if c not in cases]  # the CI slice is part of the nightly zoo


CI_SLICE = [
    # every architecture, every precision of each backend, both backends, both doors, both strategies, at least once
    Case("llama", "fsdp:bf16-mixed"),
    Case("mixtral", "fsdp:16-true"),
    Case("bert", "fsdp:32-true", strategy="user"),
    Case("t5", "deepspeed:32-true", strategy="user"),
    Case("resnet", "fsdp:16-mixed"),
    Case("resnet", "deepspeed:bf16-true"),
    Case("vit", "fsdp:bf16-true"),
    Case("litgpt", "deepspeed:bf16-mixed"),
    Case("litgpt", "deepspeed:bf16-true", door="fabric"),
]
"""The CI slice: only cases that pass today (the full zoo keeps the others, failing, until they are fixed)."""


def selected(name: str) -> list[Case]:
    """``"ci"``: :data:`CI_SLICE`; ``"full"``: :func:`full`."""
    if name == "ci":
        return list(CI_SLICE)
    if name == "full":
        return full()
    raise ValueError(f"ZOO={name!r}: expected 'ci' or 'full'")


def merge(results: Path, out: Path) -> None:
    """Every ``<case id>.json`` under ``results`` into ``out`` (one JSON file), over the cases ``out`` already holds
    (a partial run keeps the other committed cases), with the date and the versions that ran."""
    import datetime
    from importlib import metadata

    old = json.loads(out.read_text())["cases"] if out.is_file() else []
    cases = {Case(**{k: v for k, v in c["case"].items() if k != "root"}).id: c for c in old}
    fresh = [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]
    cases.update({Case(**{k: v for k, v in c["case"].items() if k != "root"}).id: c for c in fresh})
    names = ("torch", "lightning", "deepspeed", "transformers", "litgpt")
    meta = {
        "date": datetime.date.today().isoformat(),
        "versions": ", ".join(f"{n} {metadata.version(n)}" for n in names),
        "command": "nox -s zoo -- --update-docs",
    }
    out.write_text(json.dumps({"meta": meta, "cases": [cases[k] for k in sorted(cases)]}, indent=1) + "\n")
    print(f"{len(fresh)} cases run, {len(cases)} in {out}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "merge":
        sys.exit("usage: zoo_cases.py merge RESULTS_DIR OUT.json")
    merge(Path(sys.argv[2]), Path(sys.argv[3]))
