"""The model zoo's results (``docs/zoo.json``, merged from a zoo run by tests-integration/zoo/zoo_cases.py) for
docs/zoo.md: a row per architecture, spec, strategy and door; a column per lifecycle step; what failed or was
refused, verbatim, in footnotes."""

from __future__ import annotations

import json
from typing import Any

from tools.docgen import ROOT, md_escape

GROUPS = {
    "fit": ("fit",),
    "same Trainer": ("validate", "test", "predict"),
    "fresh Trainer": ("fresh_validate", "fresh_test", "fresh_predict"),
    "from ckpt_path": ("ckpt_validate", "ckpt_test", "ckpt_predict"),
    "resume": ("resume",),
    "export": ("export",),
    "evaluate": ("evaluate",),
}


def _cell(steps: dict[str, Any], names: tuple[str, ...], notes: dict[str, int]) -> str:
    """``passed``, or each step that did not pass with its status and a footnote (one per distinct error)."""
    ran = [n for n in names if n in steps]
    if not ran:
        return "-"
    words = []
    for n in ran:
        if steps[n]["status"] != "passed":
            error = " ".join(steps[n].get("error", "").split())[:600]  # one line: logs carry \r and \n
            note = notes.setdefault(md_escape(error), len(notes) + 1)
            words.append(f"{steps[n]['status']} ({n.split('_')[-1]}) [^{note}]")
    return ", ".join(words) or "passed"


def zoo() -> str:
    data = json.loads((ROOT / "docs" / "zoo.json").read_text(encoding="utf-8"))
    cases, meta = data["cases"], data.get("meta", {})
    passed = sum(all(s["status"] == "passed" for s in c["steps"].values()) for c in cases)
    out = [
        f"**{passed} of {len(cases)} cases passed every step** on {meta.get('date', '?')} "
        f"({md_escape(meta.get('versions', ''))}).\n"
    ]
    notes: dict[str, int] = {}
    for door in ("trainer", "fabric"):
        mine = [c for c in cases if c["case"]["door"] == door]
        if not mine:
            continue
        groups = [g for g in GROUPS if any(n in c["steps"] for c in mine for n in GROUPS[g])]
        out.append(f"## {'Trainer' if door == 'trainer' else 'Fabric'}\n")
        lines = ["| architecture | spec | strategy | " + " | ".join(groups) + " |", "|" + "---|" * (len(groups) + 3)]
        for c in sorted(mine, key=lambda c: (c["case"]["arch"], c["case"]["spec"], c["case"]["strategy"])):
            cells = [_cell(c["steps"], GROUPS[g], notes) for g in groups]
            case = c["case"]
            lines.append(f"| {case['arch']} | `{case['spec']}` | {case['strategy']} | " + " | ".join(cells) + " |")
        out.append("\n".join(lines) + "\n")
    out.append(f"Reproduce:\n\n```console\n$ {meta.get('command', 'nox -s zoo -- --update-docs')}\n```\n")
    out += [f"[^{i}]: {note}" for note, i in notes.items()]
    return "\n".join(out)
