"""The audit's collective rows where kept (float32) modules are units of their own (issue 18, zoo: T5 under
``fsdp:16-true`` keeps its ``wo`` layers float32, as Hugging Face's ``_keep_in_fp32_modules`` says, and FSDP2 gathers
and reduces those units in float32; the audit expected float16 for every collective).

The recorder is the audit's own :class:`~precision_base.audit.observe.Recorder`; what its hooks would have recorded
is filled in directly, and :func:`~precision_base.audit.compare.build_rows` compares it with a 16-true table.
"""

from __future__ import annotations

import torch

from precision_base.audit.collectives import Collective
from precision_base.audit.compare import build_rows
from precision_base.audit.observe import ModuleSeen, Recorder
from precision_base.contract import DtypeTable

TABLE = DtypeTable(
    parameters="float16", compute="float16", reduction="float16", buffers="float16", inputs="float16",
    init="float16", autocast=None,
)  # fmt: skip


def _rows(kept_params: set[str], collective_dtype: torch.dtype) -> dict[str, tuple[str, str, object]]:
    recorder = Recorder(None, torch.nn.Linear(2, 2), [], watch_float8=False)
    recorder.modules = {
        "net.wi": ModuleSeen("Linear", kept=False, matmul=True, params={"float16"}, outputs={"float16"}),
        "net.wo": ModuleSeen("Linear", kept=True, matmul=True, params=kept_params, outputs={"float32"}),
    }
    recorder.tap.calls = [
        Collective("all_gather_single", torch.float16, 64, 32),
        Collective("all_gather_single", collective_dtype, 128, 32),
        Collective("reduce_scatter_single", collective_dtype, 128, 32),
    ]
    rows = build_rows(recorder, TABLE, None, world_size=2)
    return {
        f"{r.role} {r.observed}": (r.expected, r.observed, r.ok) for r in rows if r.role in ("gathering", "reduction")
    }


def test_a_kept_unit_gathered_in_float32_may_gather_and_reduce_in_float32() -> None:
    rows = _rows({"float32"}, torch.float32)
    assert rows["gathering float32"] == ("float16 or float32", "float32", True)
    assert rows["reduction float32"] == ("float16 or float32", "float32", True)
    assert rows["gathering float16"] == ("float16 or float32", "float16", True)


def test_without_a_float32_kept_unit_a_float32_collective_is_still_a_mismatch() -> None:
    """Kept modules whose parameters were seen in the half dtype (DeepSpeed's native mode stores them so) allow
    nothing more: a float32 collective there is reported."""
    rows = _rows({"float16"}, torch.float32)
    assert rows["gathering float32"] == ("float16", "float32", False)
    assert rows["reduction float32"] == ("float16", "float32", False)
