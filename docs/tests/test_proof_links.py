"""Issue 21: the home page's comparison links every claim to the test that shows exactly that claim.

Each proof link of ``docs/index.md`` points at a file of this repository (``.../blob/main/<path>``) and, in its
title (what a reader sees when hovering), names a test function that file defines. Two rows are pinned to the
2-process tests that show their claim: clip-by-norm across 2 ranks equal to the unsharded model's norm, and float32
in the gradient reduce-scatter a 2-process FSDP2 run issues (seen by the precision audit's collective tap). The tests
themselves run in the integration session; here their presence, names and launch are checked, which needs no torch.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INDEX = ROOT / "docs" / "index.md"
LINK = re.compile(r"\]\(https://github\.com/precision-plugins/precision-plugins/blob/main/(?P<path>[^ )]+)"
                  r'(?: "(?P<title>[^"]+)")?\)')  # fmt: skip


def _rows() -> list[str]:
    return [line for line in INDEX.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]


def _proofs(row: str) -> list[tuple[str, str | None]]:
    proof = row.rstrip(" |").rsplit(" | ", 1)[-1]
    return [(m.group("path"), m.group("title")) for m in LINK.finditer(proof)]


def test_every_linked_test_exists_in_the_linked_file() -> None:
    links = [(m.group("path"), m.group("title")) for row in _rows() for m in LINK.finditer(row)]
    assert links, "the home page links its proofs"
    missing = []
    for path, title in links:
        file = ROOT / path
        if not file.is_file():
            missing.append(f"{path}: no such file")
        elif title and title.startswith("test_") and not re.search(rf"^def {title}\(", file.read_text(), re.M):
            missing.append(f"{path}: no test {title}")
    assert missing == []


def _row(words: str) -> str:
    rows = [row for row in _rows() if row.startswith(f"| {words}")]
    assert len(rows) == 1, f"one comparison row starts with {words!r}: {rows}"
    return rows[0]


def test_the_clip_row_proves_the_global_norm_across_2_ranks() -> None:
    proofs = _proofs(_row("clip gradients by norm"))
    assert proofs == [
        (
            "tests-integration/test_clip_norm_across_ranks.py",
            "test_clip_by_norm_across_2_ranks_uses_the_unsharded_models_global_norm",
        )
    ]
    source = (ROOT / proofs[0][0]).read_text(encoding="utf-8")
    assert "world=2" in source, "the proof launches 2 real processes"
    assert 'run["reference"]["norm"]' in source, "and compares with the unsharded model's norm"


def test_the_reduction_row_proves_fp32_in_the_collective_of_a_2_process_run() -> None:
    proofs = _proofs(_row("gradient reduction"))
    assert proofs == [
        ("tests-integration/test_audit_fits.py", "test_fsdp2_bf16_mixed_reduces_gradients_in_float32_in_the_collective")
    ]
    source = (ROOT / proofs[0][0]).read_text(encoding="utf-8")
    test = source[source.index(f"def {proofs[0][1]}(") :].split("\n\n\n")[0]
    assert "reduce_scatter" in test, "the proof reads the reduce-scatter the run issued, not a config attribute"
    assert '"float32"' in test
    assert "world=2" in source, "in 2 real processes"
