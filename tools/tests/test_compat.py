"""tools/compat.py: the compatibility table keeps failing cells and shows installed versions."""

from __future__ import annotations

import json
from pathlib import Path

from tools.compat import (
    README_END,
    README_START,
    first_failures,
    junit_counts,
    row_order,
    skip_reasons,
    update_readme,
    write,
)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="3" tests="6">
<testcase classname="tests.test_a" name="test_ok"/>
<testcase classname="tests.test_a" name="test_bad">
<failure message="AssertionError: bf16 expected">trace</failure></testcase>
<testcase classname="tests.test_a" name="test_gpu"><skipped type="pytest.skip" message="needs a GPU">x</skipped>
</testcase>
<testcase classname="tests.test_a" name="test_defect"><skipped type="pytest.xfail" message="known">x</skipped>
</testcase>
<testcase classname="test_cell_fit" name="test_loss_falls[fsdp-32-true]"/>
<testcase classname="test_cell_fit" name="test_loss_falls[fsdp-bf16-mixed]">
<skipped type="pytest.skip" message="FSDP2 on CPU needs torch &gt;= 2.7">x</skipped></testcase>
</testsuite></testsuites>
"""


def test_junit_counts_and_failures(tmp_path: Path) -> None:
    path = tmp_path / "j.xml"
    path.write_text(JUNIT)
    counts = junit_counts(path)
    assert {k: counts[k] for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": 6,
        "failures": 1,
        "errors": 0,
        "skipped": 3,
    }
    assert counts["unit"] == {"passed": 1, "failed": 1, "skipped": 1, "xfailed": 1, "skip_reasons": ["needs a GPU"]}
    assert counts["fit"] == {
        "passed": 1,
        "failed": 0,
        "skipped": 1,
        "xfailed": 0,
        "skip_reasons": ["FSDP2 on CPU needs torch >= 2.7"],
    }
    assert first_failures(path) == ["tests.test_a::test_bad: AssertionError: bf16 expected"]


VERSIONS = {"torch": "2.13.0+cpu", "lightning": "2.6.6", "deepspeed": None, "precision-base": "0.1.0"}


def _cells() -> list[dict[str, object]]:
    versions = VERSIONS
    return [
        {
            "session": "tests-precision_fsdp(torch='2.13', lightning='2.6')",
            "package": "precision-fsdp",
            "requested": {"torch": "2.13", "lightning": "2.6"},
            "status": "passed",
            "installed": {
                "python": "3.11.7",
                "versions": versions,
                "torch_build": "2.13.0+cpu",
                "cpu_flags": {"avx512_fp16": False, "amx_fp16": False},
            },
            "tests": {
                "unit": {"passed": 9, "failed": 0, "skipped": 1, "xfailed": 2, "skip_reasons": ["needs a GPU"]},
                "fit": {"passed": 8, "failed": 0, "skipped": 0, "xfailed": 0, "skip_reasons": []},
            },
        },
        {
            "session": "lowest-precision_fsdp",
            "package": "precision-fsdp",
            "requested": {"variant": "lowest"},
            "status": "failed",
            "reason": "test_x: boom",
            "installed": None,
            "tests": None,
        },
    ]


def test_table_shows_failing_cells_with_reason(tmp_path: Path) -> None:
    cells = _cells()
    md, js = tmp_path / "c.md", tmp_path / "c.json"
    write(cells, {"date": "2025-01-01", "duration_min": 3.5, "cell_min": 6.0, "excluded": ["a: b"]}, md, js)
    text = md.read_text()
    assert "the run took 3.5 minutes (6.0 minutes of cells one after another). **1 of 2 cells passed**." in text
    row = (
        "| `torch=2.13, lightning=2.6` | passed | 9 passed, 0 failed, 1 skipped, 2 xfailed | trains (8 checks) "
        "| 2.13.0+cpu | 2.6.6 | - | 0.1.0 | 3.11.7 | native fp16: no |"
    )
    assert row in text
    assert "- needs a GPU (1 of 2 cells)" in text
    assert "| `variant=lowest` | **failed** |" in text
    assert "- `lowest-precision_fsdp`: test_x: boom" in text
    assert "- a: b" in text
    assert json.loads(js.read_text())["cells"][1]["status"] == "failed"
    # the grid before the details: a row per torch, a column per Lightning; the failing cell's reason a footnote
    assert "| torch | Lightning 2.6 |\n|---|---|\n| 2.13 | 0 passed |" in text
    assert "installed : **FAILED** [^1]." in text
    assert text.endswith("[^1]: `lowest-precision_fsdp`: test_x: boom\n")


def test_package_readme_gets_its_own_rows_between_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# precision-fsdp\n\nIntro.\n")
    update_readme(readme, _cells(), {"date": "2025-01-01", "machine": "2 cores"})
    first = readme.read_text()
    assert first.startswith("# precision-fsdp\n\nIntro.\n\n## Compatibility\n\n" + README_START)
    assert "1 of 2 cells passed" in first
    assert "| `variant=lowest` | **failed** |" in first
    assert first.rstrip().endswith(README_END)
    # a second run replaces the block instead of appending another one
    readme.write_text(first + "\nAfter.\n")
    update_readme(readme, _cells()[:1], {"date": "2025-02-02", "machine": "2 cores"})
    second = readme.read_text()
    assert second.count(README_START) == 1
    assert "1 of 1 cells passed" in second
    assert "variant=lowest" not in second
    assert second.endswith("\nAfter.\n")


def test_rows_in_numeric_version_order() -> None:
    def cell(**requested: str) -> dict[str, object]:
        return {"requested": requested}

    cells = [cell(variant="lowest"), cell(python="3.11", torch="2.13"), cell(python="3.11", torch="2.4")]
    cells.append(cell(python="3.10", torch="2.15"))
    ordered = [c["requested"] for c in sorted(cells, key=row_order)]
    assert ordered == [
        {"python": "3.10", "torch": "2.15"},
        {"python": "3.11", "torch": "2.4"},
        {"python": "3.11", "torch": "2.13"},
        {"variant": "lowest"},
    ]


def test_the_committed_compatibility_page_is_what_its_data_renders_to() -> None:
    """docs/compatibility.md is this module's rendering of docs/compatibility.json (the site shows it as written)."""
    from tools.compat import render_markdown

    docs = Path(__file__).resolve().parents[2] / "docs"
    data = json.loads((docs / "compatibility.json").read_text(encoding="utf-8"))
    assert (docs / "compatibility.md").read_text(encoding="utf-8") == render_markdown(data["cells"], data["meta"]), (
        "docs/compatibility.md is stale: rewrite it from docs/compatibility.json with tools.compat.render_markdown"
    )


def test_skip_reasons_that_differ_only_by_version_are_one_line_without_repository_paths() -> None:
    def cell(torch: str, reasons: list[str]) -> dict[str, object]:
        unit = {"passed": 1, "failed": 0, "skipped": len(reasons), "xfailed": 0, "skip_reasons": reasons}
        return {"requested": {"torch": torch}, "tests": {"unit": unit}}

    older = "FSDP2 on CPU needs a newer torch: torch {}'s FSDP2 creates CUDA streams"
    inside = "needs precision-fsdp installed: runs in its cells (tools/matrix.toml [tests])"
    group = [
        cell("2.4.1", [older.format("2.4.1+cu121"), inside]),
        cell("2.4.0", [older.format("2.4.0+cu121"), inside]),
        cell("2.13", [inside]),
    ]
    assert skip_reasons(group) == [
        ("FSDP2 on CPU needs a newer torch: torch 2.4.0+cu121 or 2.4.1+cu121's FSDP2 creates CUDA streams", 2),
        ("needs precision-fsdp installed: runs in its cells", 3),
    ]
