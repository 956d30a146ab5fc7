"""What precision-fsdp declares in its PluginInfo for precision-base's ``recommend`` and precision audit, read back
through them: precision-base names no backend or recipe, so these facts reach it only from here."""

from __future__ import annotations

from precision_base.audit.compare import declares_float8
from precision_base.tune.recommend import read_machine


class _Plugin:
    backend = "fsdp"

    def __init__(self, precision: str) -> None:
        self.precision = precision


def test_recommend_reads_each_recipes_gpu_and_trade_off() -> None:
    facts = read_machine()
    assert next(iter(facts.backends)) == "fsdp", "preference 10: the first choice among the installed backends"
    assert facts.needs_gpu["fsdp:fp8-tensorwise"] == (8, 9)
    assert facts.needs_gpu["fsdp:fp8-rowwise"] == (8, 9)
    assert facts.needs_gpu["fsdp:mxfp8-rceil"] == (10, 0)
    assert facts.notes["fsdp:fp8-tensorwise"].startswith("float8 matmuls for large Linear layers")
    assert facts.about["fsdp"].startswith("precision-fsdp is installed; ")


def test_the_audit_expects_float8_matmuls_for_every_recipe_and_no_other_precision() -> None:
    assert [declares_float8(_Plugin(p)) for p in ("fp8-tensorwise", "fp8-rowwise", "mxfp8-rceil")] == [True] * 3
    assert [declares_float8(_Plugin(p)) for p in ("bf16-mixed", "16-mixed", "32-true")] == [False] * 3
