"""The benchmarks summary leads with its charts: each committed benchmark's chart, with what its run found
(:func:`tools.docgen.benchmark_pages.findings`, from the result file's numbers), ahead of the tables.

docs/benchmarks/index.md is written by ``benchmarks/run.py --update-docs``; the site's copy gets this section
after its title (``on_site`` runs in the mkdocs-gen-files script, tools/docgen/site.py). That section also says,
at the time the site is built, which results are stale (:mod:`tools.bench_freshness`): a stale result stays on the page,
marked "stale since <commit>"."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from tools import bench_freshness as freshness  # standard library and git only
from tools.docgen import ROOT, benchmark_pages, md_escape

BENCHMARKS = {
    "overhead-fsdp": "Step time, FSDP2: ours against Lightning's built-in and a hand-written loop",
    "overhead-deepspeed": "Step time, DeepSpeed: ours against Lightning's built-in and a hand-written loop",
    "memory": "Memory per rank",
    "numerics": "Loss against 32-true",
    "discovery": "Discovery cost",
}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)  # JSON writes NaN as null


def _diverged(result: Path) -> list[str]:
    """A sentence per run of the numerics benchmark whose loss became non-finite (it has no line in the chart)."""
    out = []
    for run in json.loads(result.read_text(encoding="utf-8")).get("results", []):
        losses = run.get("losses") or []
        bad = next((i for i, loss in enumerate(losses) if not _finite(loss)), None)
        if bad is not None or not _finite(run.get("eval_loss", 0.0)):
            step = f" from step {bad + 1}" if bad is not None else ""
            out.append(f"{run['name']} diverged (loss NaN{step}), so its legend entry has no line.")
    return out


def _overhead_verdict(findings: list[str]) -> str:
    """One sentence from an overhead benchmark's findings: where ours differs from Lightning's built-in (each finding
    without the table or chart it names on its own page)."""
    against_builtin = [re.sub(r" \([^()]*\)$", "", f) for f in findings if " ours/builtin " in f]
    if not against_builtin:
        return "Ours / Lightning's built-in: no ratio is faster or slower at any precision."
    return "Ours / Lightning's built-in: faster or slower at " + "; ".join(md_escape(f) for f in against_builtin) + "."


def _stale(problem: freshness.Problem) -> str:
    """``**Stale since <commit>**`` and what to run; a reader gets the commit, not the commit messages (those are
    in the warning a contributor sees)."""
    if problem.since:
        what = "the code it measures changed after it ran"
        return f"**Stale since {problem.since}**: {what}; refresh: `{freshness.refresh_command(problem.benchmark)}`"
    return f"**Stale**: {md_escape(str(problem))}"


def staleness(problems: list[freshness.Problem]) -> list[str]:
    """One line per stale result (each stays on the pages, marked), or one line saying all are current."""
    if not problems:
        return ["Every result is current: measured at a commit that contains the last change to the code it measures."]
    return [
        f"{len(problems)} result(s) measured before the last change to the code they measure; each is still shown, "
        "marked:\n",
        *(f"- `{p.benchmark}`: {_stale(p)}" for p in problems),
    ]


def glance(folder: Path = ROOT / "docs" / "benchmarks", root: Path = ROOT) -> str:
    problems = freshness.check_folder(folder, root)
    stale = {p.benchmark: p for p in problems}
    out = ["## At a glance\n", *staleness(problems), ""]
    for name, title in BENCHMARKS.items():
        result = folder / f"{name}.json"
        if not result.is_file():
            continue
        data = json.loads(result.read_text(encoding="utf-8"))
        # from the numbers, in the current wording; a result file without them has only what it stored
        findings = benchmark_pages.findings(data) if "results" in data else data.get("findings") or []
        out.append(f"### [{title}]({name}.md)\n")
        if name in stale:
            out.append(f"- {_stale(stale[name])}")
        if (folder / f"{name}.png").is_file():
            out.append(f"![{title}]({name}.png)\n")
        if name.startswith("overhead"):
            out.append(f"- {_overhead_verdict(findings)}")
        else:
            out += [f"- {md_escape(f)}" for f in findings[:2]]
            if name == "numerics":
                out += [f"- {md_escape(line)}" for line in _diverged(result)]
        out.append(f"- Details: [{name}]({name}.md)")
        out.append("")
    return "\n".join(out)


def on_site(markdown: str) -> str:
    """The summary page as the site shows it: the title, then :func:`glance`, then the page's own text."""
    title, _sep, body = markdown.partition("\n")
    return f"{title}\n\n{glance()}\n{body}"
