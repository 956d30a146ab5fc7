"""The audit's collective tap on a real one-rank gloo group, its report format, and the docs page's real report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from precision_base.audit import AuditReport, AuditRow
from precision_base.audit.collectives import CollectiveTap
from precision_testsupport.launch import process_group

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def group() -> Iterator[None]:
    with process_group():
        yield


def test_the_tap_records_dtype_and_bytes_of_each_call_then_restores(group: None) -> None:
    originals = {name: getattr(dist, name) for name in ("all_reduce", "all_gather_into_tensor", "broadcast")}
    tap = CollectiveTap()
    tap.install()
    assert dist.all_reduce is not originals["all_reduce"]
    dist.all_reduce(torch.ones(8, dtype=torch.bfloat16))
    out = torch.empty(4, dtype=torch.float32)
    dist.all_gather_into_tensor(out, torch.ones(4, dtype=torch.float32))
    dist.broadcast(torch.zeros(3, dtype=torch.int64), src=0)
    tap.remove()
    dist.all_reduce(torch.ones(2))  # after remove: not recorded
    assert [(c.name, str(c.dtype), c.nbytes, c.numel, c.kind) for c in tap.calls] == [
        ("all_reduce", "torch.bfloat16", 16, 8, "reduction"),
        ("all_gather_into_tensor", "torch.float32", 16, 4, "gathering"),
        ("broadcast", "torch.int64", 24, 3, "gathering"),
    ]
    assert {name: getattr(dist, name) for name in originals} == originals


def test_a_reference_an_engine_keeps_elsewhere_is_recorded_as_its_plugin_names_it(group: None) -> None:
    """What a plugin's ``audit_collectives`` returns: an engine object holding its own reference to a collective
    (as DeepSpeed's comm layer does), called past ``torch.distributed``'s module attribute."""

    class Engine:
        def __init__(self) -> None:
            self.gather = dist.all_gather_into_tensor

    engine = Engine()
    original = engine.gather
    tap = CollectiveTap()
    tap.install([(engine, "gather", "all_gather_into_tensor")])
    engine.gather(torch.empty(4, dtype=torch.bfloat16), torch.ones(4, dtype=torch.bfloat16))
    tap.remove()
    assert [(c.name, str(c.dtype), c.nbytes) for c in tap.calls] == [("all_gather_into_tensor", "torch.bfloat16", 8)]
    assert engine.gather is original
    refused = CollectiveTap()
    with pytest.raises(ValueError, match="audit_collectives names 'send', which is not one of"):
        refused.install([(engine, "gather", "send")])
    assert refused._saved == [], "nothing is wrapped when a name is refused"


def test_a_wrapped_call_inside_another_is_recorded_once(group: None) -> None:
    import torch.distributed.distributed_c10d as c10d

    tap = CollectiveTap()
    tap.install()
    try:
        dist.all_reduce(torch.ones(4))  # torch.distributed.all_reduce is c10d.all_reduce: both wrapped, one record
        c10d.all_reduce(torch.ones(4))
    finally:
        tap.remove()
    assert [c.name for c in tap.calls] == ["all_reduce", "all_reduce"]


def test_report_format_and_round_trip() -> None:
    rows = (
        AuditRow("compute", "Linear x2: net.*", "bfloat16", "float32", False),
        AuditRow("reduction", "all_reduce x1, 4 B (scalar: not compared)", "-", "float32", None),
    )
    report = AuditReport("x:bf16-mixed", 1, 0, rows)
    assert report.format().splitlines() == [
        "precision audit of x:bf16-mixed, rank 0, 1 optimizer step(s): 1 mismatch(es)",
        "ROLE       MODULE / COLLECTIVE                        EXPECTED  OBSERVED  OK",
        "compute    Linear x2: net.*                           bfloat16  float32   MISMATCH",
        "reduction  all_reduce x1, 4 B (scalar: not compared)  -         float32   -",
    ]
    assert AuditReport.from_dict(json.loads(json.dumps(report.as_dict()))) == report
    assert not report.ok
    assert report.mismatches == rows[:1]


def test_the_docs_report_is_what_this_code_prints() -> None:
    """docs/audit.json holds real runs (``python tests-integration/_audit_runs.py``); its text must be what the
    current report format renders from its rows (else the docs show another format than users get)."""
    data = json.loads((ROOT / "docs" / "audit.json").read_text())
    assert set(data["reports"]) == {"fsdp:bf16-mixed", "deepspeed:bf16-mixed", "mismatch"}
    for label, run in data["reports"].items():
        report = AuditReport.from_dict(run["report"])
        assert report.format() == run["text"], f"{label}: regenerate docs/audit.json"
        assert report.ok is (label != "mismatch"), label
    mismatch = data["reports"]["mismatch"]
    assert mismatch["error"] == AuditReport.from_dict(mismatch["report"]).mismatch_message()
