"""``PrecisionSchedule`` against the Trainer and the FSDP plugin: real single-process FSDP2 fits on CPU that fail at
``setup``, before any step, with messages naming what was wrong and what would be right; and one that switches.

The 2-process fits (continuity, audit, resume) are in tests-integration/test_precision_schedule.py.
"""

from __future__ import annotations

from typing import Any

import pytest

import precision_base
from precision_base import PrecisionSchedule, PrecisionScheduleError
from precision_fsdp._compat import fsdp2_cpu_problem
from precision_testsupport.models import QUIET, TinyRegressor

pytestmark = pytest.mark.skipif(
    fsdp2_cpu_problem() is not None, reason=f"FSDP2 on CPU needs a newer torch: {fsdp2_cpu_problem()}"
)

CASES: dict[str, tuple[dict[Any, str], int, str]] = {
    "first entry": (
        {0: "fsdp:32-true", 2: "fsdp:bf16-mixed"}, 4,
        "the precision schedule starts with 'fsdp:32-true', but the Trainer's precision plugin is 'fsdp:bf16-mixed': "
        "pass precision_plugin='fsdp:32-true' to the Trainer, or start the schedule with 0: 'fsdp:bf16-mixed'",
    ),
    "another backend": (
        {0: "deepspeed:bf16-mixed", 2: "deepspeed:32-true"}, 4,
        "the precision schedule names backend 'deepspeed', but the Trainer's precision plugin is 'fsdp:bf16-mixed': "
        "write the schedule for 'fsdp' or pass precision_plugin='deepspeed:bf16-mixed'",
    ),
    "fraction without max_steps": (
        {0: "fsdp:bf16-mixed", 0.5: "fsdp:32-true"}, -1,
        "precision schedule key 0.5 is a fraction of max_steps, but the Trainer has max_steps=-1: pass "
        "Trainer(max_steps=N), or write the key as an optimizer step (an int)",
    ),
    "keys out of order": (
        {0: "fsdp:bf16-mixed", 4: "fsdp:32-true", 0.25: "fsdp:bf16-mixed"}, 8,
        "precision schedule keys must increase: 0.25 (step 2) comes after 4 (step 4); order the entries by step, "
        "each at a later step than the one before",
    ),
    "storage dtype changes": (
        {0: "fsdp:bf16-mixed", 2: "fsdp:bf16-true"}, 4,
        "precision schedule entry 2 (step 2): cannot switch 'fsdp:bf16-mixed' -> 'fsdp:bf16-true' during a run: "
        "'bf16-mixed' stores the sharded parameters and the optimizer state in float32, 'bf16-true' in bfloat16: a "
        "switch would recast the parameters and the optimizer state (and lose the float32 master weights of a mixed "
        "precision). Schedule precisions that store float32 parameters: 32-true, 16-mixed, bf16-mixed",
    ),
    "to fp8": (
        {0: "fsdp:bf16-mixed", 2: "fsdp:fp8-tensorwise"}, 4,
        "precision schedule entry 2 (step 2): cannot switch 'fsdp:bf16-mixed' -> 'fsdp:fp8-tensorwise' during a run: "
        "switching to 'fp8-tensorwise' during a run is not supported: torchao converts the Linear layers to float8 "
        "before FSDP2 shards them; train a run under it from the start instead",
    ),
    "unknown precision": (
        {0: "fsdp:bf16-mixed", 2: "fsdp:fp4-blockwise"}, 4,
        "precision schedule entry 2: `precision='fp4-blockwise')` is not supported in FSDP. `precision` must be one "
        "of: ('32-true', '16-true', 'bf16-true', '16-mixed', 'bf16-mixed'). FSDPPrecision does not support "
        "precision='fp4-blockwise'; it supports 32-true, 16-true, bf16-true, 16-mixed, bf16-mixed (Lightning's "
        'aliases "32", "16", "bf16", 32 and 16 are accepted for these).',
    ),
}  # fmt: skip


def _trainer(schedule: PrecisionSchedule, max_steps: int, spec: str = "fsdp:bf16-mixed") -> Any:
    limits = {"max_steps": max_steps} if max_steps > 0 else {"max_epochs": 1}
    return precision_base.Trainer(
        precision_plugin=spec, accelerator="cpu", devices=1, callbacks=[schedule], **limits, **QUIET
    )


@pytest.mark.parametrize("case", list(CASES))
def test_setup_refuses_before_any_step(case: str) -> None:
    schedule, max_steps, message = CASES[case]
    model = TinyRegressor(hidden=8, samples=64, batch_size=32)
    with pytest.raises(PrecisionScheduleError) as caught:
        _trainer(PrecisionSchedule(schedule), max_steps).fit(model)
    assert str(caught.value) == message
    assert model.losses == [], "no step ran"


def test_switching_from_fp8_to_another_fp8_is_refused_with_the_reason() -> None:
    pytest.importorskip("torchao", reason='torchao is not installed (pip install "precision-fsdp[fp8]")')
    schedule = PrecisionSchedule({0: "fsdp:fp8-tensorwise", 2: "fsdp:fp8-rowwise"})
    plugin = precision_base.resolve("fsdp:fp8-tensorwise", fp8_emulate=True)
    trainer = precision_base.Trainer(
        precision_plugin=plugin, accelerator="cpu", devices=1, max_steps=4, callbacks=[schedule], **QUIET
    )
    with pytest.raises(PrecisionScheduleError) as caught:
        trainer.fit(TinyRegressor(features=32, hidden=32, samples=64, batch_size=32))
    assert str(caught.value) == (
        "precision schedule entry 2 (step 2): cannot switch 'fsdp:fp8-tensorwise' -> 'fsdp:fp8-rowwise' during a run: "
        "switching from 'fp8-tensorwise' to 'fp8-rowwise' during a run is not supported: torchao converts the Linear "
        "layers to float8 before FSDP2 shards them; train a run under it from the start instead"
    )


def test_a_one_process_fit_switches_at_the_step() -> None:
    schedule = PrecisionSchedule({0: "fsdp:32-true", 0.5: "fsdp:bf16-mixed"})
    model = TinyRegressor(features=32, hidden=32, samples=128, batch_size=32)
    trainer = _trainer(schedule, 4, "fsdp:32-true")
    trainer.fit(model)
    assert [str(d).removeprefix("torch.") for d in model.compute_dtypes] == ["float32"] * 2 + ["bfloat16"] * 2
    assert schedule.switched_at == {2: "fsdp:bf16-mixed"}
    assert trainer.precision_plugin.precision == "bf16-mixed"
    assert trainer.precision_plugin.dtypes().autocast == "bfloat16"
