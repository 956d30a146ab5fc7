"""precision_base.kit.cpu_half: what a plugin says once when it finds itself computing float16 on a CPU that emulates
float16, and the precision it names instead (the same answer as ``precision-plugins recommend``)."""

from __future__ import annotations

import pytest

from precision_base.kit.cpu_half import CPU_FP16_EMULATED, cpu_half_warning
from precision_base.tune.recommend import MachineFacts, recommend


@pytest.mark.parametrize(
    ("native", "instead"), [((True, False), "bf16-mixed"), ((False, False), "32-true"), ((True, True), None)]
)
def test_the_warning_names_what_recommend_picks(native: tuple[bool, bool], instead: str | None) -> None:
    for precision in ("16-mixed", "16-true"):
        message = cpu_half_warning(precision, native)
        if instead is None:
            assert message is None
            continue
        assert message is not None
        assert message.startswith(f"{precision} computes in float16, and {CPU_FP16_EMULATED}, so every step runs")
        assert f"Use '{instead}' here" in message
    facts = MachineFacts(
        cpu_bf16=native[0], cpu_fp16=native[1], backends={"fsdp": ("32-true", "16-mixed", "bf16-mixed")}
    )
    if instead is not None:
        assert recommend(facts).spec == f"fsdp:{instead}"


def test_other_precisions_say_nothing() -> None:
    for precision in ("32-true", "bf16-mixed", "bf16-true", "fp8-tensorwise"):
        assert cpu_half_warning(precision, (False, False)) is None
