"""``precision-plugins recommend``: the suggestion for machines described by injected facts, and the command here."""

from __future__ import annotations

import json

import pytest

from precision_base.cli import main
from precision_base.recommend import MachineFacts, Recommendation, read_machine, recommend
from precision_base.spec import PRECISIONS

FSDP = (*PRECISIONS, "fp8-tensorwise", "fp8-rowwise", "mxfp8-rceil")
BOTH = {"fsdp": FSDP, "deepspeed": PRECISIONS}


def _ruled_out(result: Recommendation) -> dict[str, str]:
    return {c.spec: c.reason for c in result.ruled_out}


def _alternatives(result: Recommendation) -> dict[str, str]:
    return {c.spec: c.reason for c in result.alternatives}


def test_cpu_without_native_bf16_trains_in_float32() -> None:
    result = recommend(MachineFacts(backends=BOTH, torchao="0.18.0"))
    assert result.spec == "fsdp:32-true"
    assert result.reasons[0] == "device: the CPU (torch sees no CUDA GPU)"
    assert result.reasons[1].startswith("precision 32-true: this CPU has no native bfloat16")
    ruled = _ruled_out(result)
    assert (
        ruled["fsdp:bf16-mixed"] == "runs, but this CPU emulates bfloat16 (no AVX512-BF16 or AMX): slower than 32-true"
    )
    assert ruled["deepspeed:16-mixed"].startswith("this CPU has no native float16 (AMX-FP16)")
    assert ruled["fsdp:fp8-tensorwise"].startswith("needs a CUDA GPU with FP8 (compute capability 8.9+)")
    assert _alternatives(result) == {"deepspeed:32-true": "the same precision through deepspeed instead of fsdp"}


def test_cpu_with_native_bf16_trains_bf16_mixed() -> None:
    result = recommend(MachineFacts(cpu_bf16=True, backends=BOTH))
    assert result.spec == "fsdp:bf16-mixed"
    assert "computes bfloat16 natively" in result.reasons[1]
    assert result.reasons[2].endswith("(preferred over deepspeed)")
    assert {"fsdp:32-true", "fsdp:bf16-true", "deepspeed:bf16-mixed"} <= set(_alternatives(result))
    ruled = _ruled_out(result)
    assert ruled["fsdp:fp8-rowwise"] == 'needs torchao (pip install "precision-fsdp[fp8]")'
    assert "fsdp:16-mixed" in ruled


def test_cpu_with_native_fp16_allows_16_mixed() -> None:
    result = recommend(MachineFacts(cpu_bf16=True, cpu_fp16=True, backends={"fsdp": PRECISIONS}))
    assert result.spec == "fsdp:bf16-mixed"
    assert (
        _ruled_out(result)["fsdp:16-mixed"]
        == "runs, but needs a loss scaler that bf16-mixed does without, for the same speed"
    )
    assert "fsdp:16-true" in _alternatives(result)


def test_a100_trains_bf16_mixed_and_rules_out_fp8() -> None:
    facts = MachineFacts(
        cuda_capability=(8, 0), gpu_name="NVIDIA A100-SXM4-80GB", gpu_count=8, backends=BOTH, torchao="0.18.0"
    )
    result = recommend(facts)
    assert result.spec == "fsdp:bf16-mixed"
    assert result.reasons[0] == "device: CUDA GPU 8 x NVIDIA A100-SXM4-80GB (compute capability 8.0)"
    assert result.reasons[1].startswith("precision bf16-mixed: compute capability 8.0 has bfloat16 tensor cores")
    assert _ruled_out(result)["fsdp:fp8-tensorwise"] == (
        "needs compute capability 8.9+ for FP8 matmuls (L4, H100, ...), this GPU has 8.0"
    )


def test_h100_with_torchao_offers_fp8_as_an_alternative() -> None:
    facts = MachineFacts(cuda_capability=(9, 0), gpu_name="NVIDIA H100", gpu_count=1, backends=BOTH, torchao="0.18.0")
    result = recommend(facts)
    assert result.spec == "fsdp:bf16-mixed"
    alternatives = _alternatives(result)
    assert alternatives["fsdp:fp8-tensorwise"].startswith("float8 matmuls for large Linear layers")
    assert "fsdp:fp8-rowwise" in alternatives
    assert not [spec for spec in _ruled_out(result) if spec.startswith("fsdp:fp8-")]
    assert _ruled_out(result)["fsdp:mxfp8-rceil"].startswith("needs compute capability 10.0+ for MXFP8")


def test_h100_without_torchao_rules_fp8_out() -> None:
    result = recommend(MachineFacts(cuda_capability=(9, 0), gpu_name="NVIDIA H100", gpu_count=1, backends=BOTH))
    assert _ruled_out(result)["fsdp:fp8-tensorwise"] == 'needs torchao (pip install "precision-fsdp[fp8]")'


def test_v100_trains_16_mixed() -> None:
    result = recommend(MachineFacts(cuda_capability=(7, 0), gpu_name="Tesla V100", gpu_count=1, backends=BOTH))
    assert result.spec == "fsdp:16-mixed"
    assert "a loss scaler" in result.reasons[1]
    assert _ruled_out(result)["deepspeed:bf16-mixed"] == "needs bfloat16, which compute capability 7.0 lacks (8.0+)"


def test_only_deepspeed_installed() -> None:
    result = recommend(MachineFacts(cpu_bf16=True, backends={"deepspeed": PRECISIONS}))
    assert result.spec == "deepspeed:bf16-mixed"
    assert result.reasons[2].startswith("backend deepspeed: precision-deepspeed is installed (precision-fsdp is not)")


def test_no_backends_installed_suggests_nothing() -> None:
    result = recommend(MachineFacts(cpu_bf16=True, unusable={"fsdp:*": "broken: ImportError: no module named torch"}))
    assert result.spec is None
    assert (
        result.reasons[-1]
        == "backend: none installed that can be used; pip install precision-fsdp (or precision-deepspeed)"
    )
    assert _ruled_out(result) == {"fsdp:*": "broken: ImportError: no module named torch"}
    assert result.render().startswith("suggested: none (no precision plugin can train here)")
    assert json.loads(json.dumps(result.as_dict()))["spec"] is None


def test_render_lists_every_section() -> None:
    text = recommend(MachineFacts(backends=BOTH)).render()
    lines = text.splitlines()
    assert lines[0] == "suggested: fsdp:32-true"
    assert lines[1].startswith("  - device: ")
    assert "also possible:" in lines
    assert "ruled out:" in lines


def test_read_machine_reads_this_machine() -> None:
    import torch

    from precision_base import list_plugins
    from precision_base._compat import cpu_native_half

    facts = read_machine()
    assert (facts.cpu_bf16, facts.cpu_fp16) == cpu_native_half()
    assert (facts.cuda_capability is None) == (not torch.cuda.is_available())
    assert set(facts.backends) == {e.backend for e in list_plugins() if e.status == "ok"}


def test_command_prints_the_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["recommend", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["spec"] == recommend(read_machine()).spec
    assert code == (0 if data["spec"] else 1)
    assert set(data) == {"spec", "reasons", "alternatives", "ruled_out", "facts"}
    main(["recommend"])
    assert capsys.readouterr().out.startswith(f"suggested: {data['spec'] or 'none'}")  # none: no backend installed


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        (
            MachineFacts(cpu_bf16=True, backends=BOTH, torchao="0.18.0"),
            "needs a CUDA GPU with MXFP8 (compute capability",
        ),
        (
            MachineFacts(cuda_capability=(9, 0), gpu_name="NVIDIA H100", gpu_count=1, backends=BOTH, torchao="0.18.0"),
            "needs compute capability 10.0+ for MXFP8 matmuls (B200, ...), this GPU has 9.0",
        ),
        (
            MachineFacts(cuda_capability=(10, 0), gpu_name="NVIDIA B200", gpu_count=1, backends=BOTH),
            'needs torchao (pip install "precision-fsdp[fp8]")',
        ),
    ],
)
def test_mxfp8_is_ruled_out_below_blackwell_or_without_torchao(facts: MachineFacts, why: str) -> None:
    assert _ruled_out(recommend(facts))["fsdp:mxfp8-rceil"].startswith(why)


def test_blackwell_with_torchao_offers_mxfp8_and_fp8_as_alternatives() -> None:
    facts = MachineFacts(cuda_capability=(10, 0), gpu_name="NVIDIA B200", gpu_count=1, backends=BOTH, torchao="0.18.0")
    result = recommend(facts)
    assert result.spec == "fsdp:bf16-mixed"
    alternatives = _alternatives(result)
    assert alternatives["fsdp:mxfp8-rceil"].startswith("MXFP8 matmuls (float8 with a scale per 32 values)")
    assert "fsdp:fp8-tensorwise" in alternatives
