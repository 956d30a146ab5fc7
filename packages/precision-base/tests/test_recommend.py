"""``precision-plugins recommend``: the suggestion for machines described by injected facts, and the command here.

The facts carry what the two plugins of this repository declare (their ``PluginInfo``: preference, each extra
precision's GPU and trade-off), as [`read_machine`][precision_base.tune.recommend.read_machine] reads it; the last tests
register a fake fourth backend with a recipe of its own and get it judged with no change to precision-base."""

from __future__ import annotations

import json
from typing import Any

import pytest

from precision_base import PluginInfo
from precision_base.cli import main
from precision_base.registry import registered
from precision_base.spec import PRECISIONS
from precision_base.tune.recommend import MachineFacts, Recommendation, read_machine, recommend

FSDP_EXTRAS = ("fp8-tensorwise", "fp8-rowwise", "mxfp8-rceil")
FSDP = (*PRECISIONS, *FSDP_EXTRAS)
BOTH = {"fsdp": FSDP, "deepspeed": PRECISIONS}
FP8_NOTE = "float8 matmuls for large Linear layers (thousands wide), the rest bf16-mixed"
MX_NOTE = "MXFP8 matmuls (float8 with a scale per 32 values) for large bias-free Linear layers, the rest bf16-mixed"
DECLARED: dict[str, Any] = {  # what the plugins declare, keyed as read_machine keys it
    "about": {
        "fsdp": "precision-fsdp is installed; FSDP1 MixedPrecision and FSDP2 MixedPrecisionPolicy",
        "deepspeed": "precision-deepspeed is installed; DeepSpeed engine precision",
    },
    "needs_gpu": {"fsdp:fp8-tensorwise": (8, 9), "fsdp:fp8-rowwise": (8, 9), "fsdp:mxfp8-rceil": (10, 0)},
    "notes": {"fsdp:fp8-tensorwise": FP8_NOTE, "fsdp:fp8-rowwise": FP8_NOTE, "fsdp:mxfp8-rceil": MX_NOTE},
}
NO_EXTRA = 'unavailable: it needs the optional extra: pip install "precision-fsdp[fp8]"'


def facts(*, extra: bool = True, backends: dict[str, tuple[str, ...]] = BOTH, **machine: Any) -> MachineFacts:
    """Facts as read_machine gives them; ``extra=False``: the fp8 extra is not installed (its names unavailable)."""
    if extra or "fsdp" not in backends:
        return MachineFacts(backends=backends, **DECLARED, **machine)
    offered = {**backends, "fsdp": tuple(p for p in backends["fsdp"] if p not in FSDP_EXTRAS)}
    return MachineFacts(backends=offered, unusable={f"fsdp:{p}": NO_EXTRA for p in FSDP_EXTRAS}, **DECLARED, **machine)


def _ruled_out(result: Recommendation) -> dict[str, str]:
    return {c.spec: c.reason for c in result.ruled_out}


def _alternatives(result: Recommendation) -> dict[str, str]:
    return {c.spec: c.reason for c in result.alternatives}


H100 = {"cuda_capability": (9, 0), "gpu_name": "NVIDIA H100", "gpu_count": 1}
B200 = {"cuda_capability": (10, 0), "gpu_name": "NVIDIA B200", "gpu_count": 1}


def test_cpu_without_native_bf16_trains_in_float32() -> None:
    result = recommend(facts())
    assert result.spec == "fsdp:32-true"
    assert result.reasons[0] == "device: the CPU (torch sees no CUDA GPU)"
    assert result.reasons[1].startswith("precision 32-true: this CPU has no native bfloat16")
    ruled = _ruled_out(result)
    assert (
        ruled["fsdp:bf16-mixed"] == "runs, but this CPU emulates bfloat16 (no AVX512-BF16 or AMX): slower than 32-true"
    )
    assert ruled["deepspeed:16-mixed"].startswith("this CPU has no native float16 (AMX-FP16)")
    assert ruled["fsdp:fp8-tensorwise"] == (
        "needs a CUDA GPU of compute capability 8.9+ for its matmuls; on a CPU it is only emulated (tests)"
    )
    assert _alternatives(result) == {"deepspeed:32-true": "the same precision through deepspeed instead of fsdp"}


def test_cpu_with_native_bf16_trains_bf16_mixed() -> None:
    result = recommend(facts(extra=False, cpu_bf16=True))
    assert result.spec == "fsdp:bf16-mixed"
    assert "computes bfloat16 natively" in result.reasons[1]
    assert result.reasons[2] == (
        "backend fsdp: precision-fsdp is installed; FSDP1 MixedPrecision and FSDP2 MixedPrecisionPolicy (preferred "
        "over deepspeed)"
    )
    assert {"fsdp:32-true", "fsdp:bf16-true", "deepspeed:bf16-mixed"} <= set(_alternatives(result))
    ruled = _ruled_out(result)
    assert ruled["fsdp:fp8-rowwise"] == NO_EXTRA
    assert "fsdp:16-mixed" in ruled


def test_cpu_with_native_fp16_allows_16_mixed() -> None:
    result = recommend(facts(cpu_bf16=True, cpu_fp16=True, backends={"fsdp": PRECISIONS}))
    assert result.spec == "fsdp:bf16-mixed"
    assert (
        _ruled_out(result)["fsdp:16-mixed"]
        == "runs, but needs a loss scaler that bf16-mixed does without, for the same speed"
    )
    assert "fsdp:16-true" in _alternatives(result)


def test_a100_trains_bf16_mixed_and_rules_out_fp8() -> None:
    result = recommend(facts(cuda_capability=(8, 0), gpu_name="NVIDIA A100-SXM4-80GB", gpu_count=8))
    assert result.spec == "fsdp:bf16-mixed"
    assert result.reasons[0] == "device: CUDA GPU 8 x NVIDIA A100-SXM4-80GB (compute capability 8.0)"
    assert result.reasons[1].startswith("precision bf16-mixed: compute capability 8.0 has bfloat16 tensor cores")
    assert (
        _ruled_out(result)["fsdp:fp8-tensorwise"] == "needs compute capability 8.9+ for its matmuls, this GPU has 8.0"
    )


def test_h100_with_the_extra_offers_fp8_as_an_alternative() -> None:
    result = recommend(facts(**H100))
    assert result.spec == "fsdp:bf16-mixed"
    alternatives = _alternatives(result)
    assert alternatives["fsdp:fp8-tensorwise"] == FP8_NOTE
    assert "fsdp:fp8-rowwise" in alternatives
    assert not [spec for spec in _ruled_out(result) if spec.startswith("fsdp:fp8-")]
    assert _ruled_out(result)["fsdp:mxfp8-rceil"] == "needs compute capability 10.0+ for its matmuls, this GPU has 9.0"


def test_h100_without_the_extra_rules_fp8_out_with_the_install_line() -> None:
    assert _ruled_out(recommend(facts(extra=False, **H100)))["fsdp:fp8-tensorwise"] == NO_EXTRA


def test_v100_trains_16_mixed() -> None:
    result = recommend(facts(cuda_capability=(7, 0), gpu_name="Tesla V100", gpu_count=1))
    assert result.spec == "fsdp:16-mixed"
    assert "a loss scaler" in result.reasons[1]
    assert _ruled_out(result)["deepspeed:bf16-mixed"] == "needs bfloat16, which compute capability 7.0 lacks (8.0+)"


def test_only_deepspeed_installed() -> None:
    result = recommend(facts(cpu_bf16=True, backends={"deepspeed": PRECISIONS}))
    assert result.spec == "deepspeed:bf16-mixed"
    assert result.reasons[2] == "backend deepspeed: precision-deepspeed is installed; DeepSpeed engine precision"


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
    text = recommend(facts()).render()
    lines = text.splitlines()
    assert lines[0] == "suggested: fsdp:32-true"
    assert lines[1].startswith("  - device: ")
    assert "also possible:" in lines
    assert "ruled out:" in lines
    assert lines[-1].startswith("measure on your model: on a CPU the fastest precision depends on the model")
    assert lines[-1].endswith("recommend --measure module:factory trains it under each name and picks")


def test_read_machine_reads_this_machine() -> None:
    import torch

    from precision_base import list_plugins
    from precision_base._compat import cpu_native_half

    read = read_machine()
    assert (read.cpu_bf16, read.cpu_fp16) == cpu_native_half()
    assert (read.cuda_capability is None) == (not torch.cuda.is_available())
    assert set(read.backends) == {e.backend for e in list_plugins() if e.status == "ok"}


def test_command_prints_the_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["recommend", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["spec"] == recommend(read_machine()).spec
    assert code == (0 if data["spec"] else 1)
    assert set(data) == {"spec", "reasons", "alternatives", "ruled_out", "facts"}
    main(["recommend"])
    assert capsys.readouterr().out.startswith(f"suggested: {data['spec'] or 'none'}")  # none: no backend installed


@pytest.mark.parametrize(
    ("machine", "extra", "why"),
    [
        ({"cpu_bf16": True}, True, "needs a CUDA GPU of compute capability 10.0+ for its matmuls"),
        (H100, True, "needs compute capability 10.0+ for its matmuls, this GPU has 9.0"),
        (B200, False, NO_EXTRA),
    ],
)
def test_mxfp8_is_ruled_out_below_blackwell_or_without_the_extra(
    machine: dict[str, Any], extra: bool, why: str
) -> None:
    assert _ruled_out(recommend(facts(extra=extra, **machine)))["fsdp:mxfp8-rceil"].startswith(why)


def test_blackwell_with_the_extra_offers_mxfp8_and_fp8_as_alternatives() -> None:
    result = recommend(facts(**B200))
    assert result.spec == "fsdp:bf16-mixed"
    alternatives = _alternatives(result)
    assert alternatives["fsdp:mxfp8-rceil"] == MX_NOTE
    assert "fsdp:fp8-tensorwise" in alternatives


FOURTH = PluginInfo(
    backend="fourth",
    precisions=("32-true", "bf16-mixed"),
    plugin_class="fourth_backend.plugin:FourthPrecision",
    summary="a backend precision-base has never heard of",
    extra_precisions=(("fp4-blocks", "bf16-mixed"),),
    extra_cuda_capability=(("fp4-blocks", (12, 0)),),
    extra_notes=(("fp4-blocks", "four-bit matmuls in blocks of 16, the rest bf16-mixed"),),
    extra_matmuls=(("fp4-blocks", "float4"),),
    preference=1,
)


def test_a_fourth_backend_with_its_own_recipe_is_judged_from_its_declaration_alone() -> None:
    """No change to precision-base: the registry reads the fourth backend's PluginInfo, recommend ranks it by its
    preference and judges its recipe by its declared GPU and trade-off."""
    with registered(FOURTH):
        read = read_machine()
        assert next(iter(read.backends)) == "fourth", "preference 1 ranks it first"
        assert read.needs_gpu["fourth:fp4-blocks"] == (12, 0)
        assert read.about["fourth"].endswith("a backend precision-base has never heard of")
        cpu = recommend(read)
        b300 = recommend(
            MachineFacts(cuda_capability=(12, 0), gpu_name="a GPU of 2027", gpu_count=1, backends=read.backends,
                         about=read.about, needs_gpu=read.needs_gpu, notes=read.notes)
        )  # fmt: skip
    assert str(cpu.spec).startswith("fourth:")
    assert _ruled_out(cpu)["fourth:fp4-blocks"] == (
        "needs a CUDA GPU of compute capability 12.0+ for its matmuls; on a CPU it is only emulated (tests)"
    )
    assert b300.spec == "fourth:bf16-mixed"
    assert _alternatives(b300)["fourth:fp4-blocks"] == "four-bit matmuls in blocks of 16, the rest bf16-mixed"


def test_the_measure_hint_is_given_where_the_machine_reading_can_be_wrong_only() -> None:
    assert "recommend --measure" in recommend(facts()).render()
    on_gpu = recommend(facts(cuda_capability=(9, 0), gpu_name="NVIDIA H100", gpu_count=1)).render()
    assert "--measure" not in on_gpu
    assert "--measure" not in recommend(facts(backends={})).render()  # nothing can train: nothing to measure
