"""Issue 23: which torchao training API path each low-precision recipe takes (feature detection in ``_compat``), and
``fsdp:mxfp8-rceil`` on CPU (torchao's emulated MXFP8 recipe). Single process; the 2-process fits are in
``test_float8_api_fits.py``."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import precision_base
from precision_fsdp import FSDPPrecision, _compat
from precision_fsdp._compat import fsdp2_cpu_problem
from precision_fsdp.errors import Float8UnavailableError
from precision_fsdp.float8 import config as float8_config
from precision_fsdp.float8 import recipes
from precision_testsupport.launch import process_group

pytest.importorskip("torchao.float8", reason='torchao is not installed (pip install "precision-fsdp[fp8]")')

needs_weight_wrapper = pytest.mark.skipif(
    _compat.WEIGHT_WRAPPER not in _compat.torchao_training_paths(),
    reason="the installed torchao has no weight-wrapper training API (torchao < 0.17)",
)
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks behaviour on a machine without a GPU")


def test_paths_are_found_by_probing_the_installed_torchao() -> None:
    import torchao.float8

    paths = _compat.torchao_training_paths()
    assert _compat.MODULE_SWAP in paths, "torchao.float8.convert_to_float8_training is our fp8 floor"
    assert hasattr(torchao.float8, "convert_to_float8_training")
    try:
        from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig  # noqa: F401
        from torchao.quantization import quantize_  # noqa: F401
    except ImportError:
        assert _compat.WEIGHT_WRAPPER not in paths
    else:
        assert _compat.WEIGHT_WRAPPER in paths


@pytest.mark.parametrize("precision", ["fp8-tensorwise", "fp8-rowwise"])
def test_fp8_takes_the_weight_wrapper_only_where_it_covers_the_recipe(precision: str) -> None:
    path = float8_config.api_path("fsdp:" + precision, precision)
    covered = _compat.WEIGHT_WRAPPER in _compat.torchao_training_paths() and not _compat.weight_wrapper_float8_gaps(
        recipes.FP8_RECIPES[precision]
    )
    assert path == (_compat.WEIGHT_WRAPPER if covered else _compat.MODULE_SWAP)
    shown = precision_base.resolve("fsdp:" + precision).describe()["float8 (torchao, FSDP2 only)"]
    assert shown["torchao API path"].startswith(path)


@needs_weight_wrapper
def test_finding_weight_wrapper_does_not_cover_dense_fp8_yet() -> None:
    """Pins the finding on torchao 0.18 (prototype/moe_training/config.py: ``Float8TrainingOpConfig`` has no
    ``emulate`` field; tensor.py ``TrainingWeightWrapperBaseTensor.fsdp_pre_all_gather`` casts the weight to
    ``mp_policy.param_dtype``) and 0.17 (no ``emulate`` field, and no dense recipe: ``Float8TrainingOpConfig`` does
    not accept ``float8_linear_recipe``). When this fails, a newer torchao covers a dense fp8 recipe: the fp8
    precisions then move to the weight wrapper by themselves (``float8.config.api_path``); re-check the all-gather bytes
    test (tests-integration/test_fp8_fits.py, at most 0.55x bf16-mixed) and the docs (docs/fp8.md), then update
    this."""
    tensorwise = _compat.weight_wrapper_float8_gaps("tensorwise")
    rowwise = _compat.weight_wrapper_float8_gaps("rowwise")
    not_float8 = [gap for gap in tensorwise if gap == "it all-gathers the weight in bfloat16, not float8"]  # 0.18
    no_recipe = [gap for gap in tensorwise if gap == "it has no tensorwise recipe"]  # 0.17
    assert not_float8 or no_recipe, tensorwise
    assert "its config has no emulate switch, which a CPU run needs" in tensorwise, tensorwise
    assert "its config has no emulate switch, which a CPU run needs" in rowwise, rowwise
    for precision in ("fp8-tensorwise", "fp8-rowwise"):
        assert float8_config.api_path("fsdp:" + precision, precision) == _compat.MODULE_SWAP


def test_without_the_weight_wrapper_fp8_swaps_modules_and_mxfp8_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchao's floor (no weight-wrapper API) cannot be installed next to 0.18 in this environment, so the probe's
    answer is replaced by the floor's: the fp8 recipes take the module swap, and MXFP8 says what it needs."""
    monkeypatch.setattr(_compat, "torchao_training_paths", lambda: (_compat.MODULE_SWAP,))
    assert float8_config.api_path("fsdp:fp8-tensorwise", "fp8-tensorwise") == _compat.MODULE_SWAP
    with pytest.raises(Float8UnavailableError, match=r"fsdp:mxfp8-rceil needs torchao's MXFP8 training"):
        float8_config.api_path("fsdp:mxfp8-rceil", "mxfp8-rceil")
    assert "no weight-wrapper" in float8_config.describe("fp8-rowwise")["torchao API path"]


def test_mxfp8_is_declared_under_the_format_recipe_rule() -> None:
    entry = precision_base.get_entry("fsdp")
    assert entry.info is not None
    assert ("mxfp8-rceil", "bf16-mixed") in entry.info.extra_precisions
    assert ("mxfp8-rceil", "fp8") in entry.info.precision_extras
    plugin = precision_base.resolve("fsdp:mxfp8-rceil")
    assert plugin.dtypes() == precision_base.resolve("fsdp:bf16-mixed").dtypes(), "the rest follows bf16-mixed"
    assert float8_config.needed_capability("mxfp8-rceil") == (10, 0)
    assert float8_config.needed_capability("fp8-rowwise") == (8, 9)


@no_gpu
@needs_weight_wrapper
def test_mxfp8_without_emulation_is_refused_on_cpu_with_the_reason() -> None:
    with pytest.raises(Float8UnavailableError) as caught:
        FSDPPrecision("mxfp8-rceil").configure_strategy("auto", accelerator="cpu", devices=2)
    message = str(caught.value)
    assert message.startswith(
        "fsdp:mxfp8-rceil needs a GPU with MXFP8 (CUDA compute capability 10.0 or newer, Blackwell): no CUDA GPU is "
        "available."
    )
    assert '"AssertionError: needs triton"' in message
    assert "fp8_emulate=True runs torchao's emulated MXFP8 recipe" in message
    FSDPPrecision("mxfp8-rceil", fp8_emulate=True).configure_strategy("auto", accelerator="cpu", devices=2)


@no_gpu
@needs_weight_wrapper
def test_finding_torchao_mxfp8_kernels_fail_on_cpu_as_the_refusal_says() -> None:
    """Pins the reason quoted in the refusal: torchao's non-emulated MXFP8 recipe on a CPU tensor fails with
    'needs triton' (torchao 0.18; 0.17 says 'needs torch version 2.8+ and triton'). When this fails, torchao runs
    MXFP8 without CUDA: revisit the refusal."""
    from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe
    from torchao.quantization import quantize_

    layer = nn.Linear(64, 64, bias=False)
    quantize_(layer, MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL), filter_fn=lambda m, f: True)
    x = torch.randn(32, 64, requires_grad=True)
    with pytest.raises(AssertionError, match=r"needs (torch version \S+ and )?triton"):
        layer(x).sum().backward()


@needs_weight_wrapper
@pytest.mark.skipif(fsdp2_cpu_problem() is not None, reason=f"FSDP2 on CPU needs a newer torch: {fsdp2_cpu_problem()}")
def test_emulated_mxfp8_wraps_the_chosen_weights_and_trains_close_to_bf16() -> None:
    """One-rank FSDP2 (gloo); measured relative gradient difference 0.120 (e4m3 inputs and output gradients). The
    weight wrapper needs FSDP2's bfloat16 param dtype: outside FSDP2 a float32 weight meets a bfloat16 autocast input
    and torchao's emulated matmul refuses the mixed dtypes."""

    def model() -> nn.Sequential:
        torch.manual_seed(0)
        layers = [nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64, bias=False), nn.GELU(), nn.Linear(64, 48)]
        layers.append(nn.Linear(48, 8))
        return nn.Sequential(*layers)

    with process_group():
        mx, plain = model(), model()
        plugin = FSDPPrecision("mxfp8-rceil", fp8_emulate=True)
        plugin.fully_shard(mx)
        FSDPPrecision("bf16-mixed").fully_shard(plain)
        assert plugin.fp8_converted == ["2"], "'0' and '5' are first/last, '4' has 48 outputs (not a multiple of 32)"
        assert type(mx[2].weight.to_local()).__name__ == "MXFP8TrainingWeightWrapperTensor"
        assert type(mx[4].weight.to_local()) is torch.Tensor
        assert float8_config.is_converted(mx)
        assert not float8_config.is_converted(plain)
        x = torch.randn(32, 32)
        grads = []
        for net in (mx, plain):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = net(x)
            out.float().pow(2).mean().backward()
            grads.append(net[2].weight.grad.full_tensor().float())
    assert mx[2].weight.grad.dtype == torch.float32, "float32 gradients for the float32 master weights"
    rel = float((grads[0] - grads[1]).norm() / grads[1].norm())
    assert 0.01 < rel < 0.25, f"MXFP8 vs bf16 gradient of the converted layer differs by {rel:.4f} (relative)"


@needs_weight_wrapper
def test_mxfp8_nothing_chosen_names_the_32_rule() -> None:
    model = nn.Sequential(nn.Linear(32, 48), nn.Linear(48, 48, bias=False), nn.Linear(48, 64), nn.Linear(64, 8))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        float8_config.convert(model, "fsdp:mxfp8-rceil", "mxfp8-rceil", True, None)
    messages = [str(w.message) for w in seen if issubclass(w.category, precision_base.PrecisionPluginWarning)]
    assert any("1 (48x48 not multiples of 32)" in m for m in messages), messages
    assert any("2 (has a bias, which torchao's MXFP8 weight wrapper drops)" in m for m in messages), messages


@needs_weight_wrapper
def test_finding_torchao_mxfp8_drops_the_linear_bias_so_biased_layers_stay() -> None:
    """Pins torchao 0.18's MXFP8 weight wrapper dropping ``F.linear``'s bias (prototype/moe_training/tensor.py, the
    linear override of MXFP8TrainingWeightWrapperTensor never reads args[2]). When this fails, biased layers can be
    converted: drop the bias rule in ``float8.config.convert``."""
    from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe
    from torchao.quantization import quantize_

    layer = nn.Linear(64, 64).bfloat16()
    with torch.no_grad():
        layer.bias.fill_(100.0)
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    config = MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_EMULATED_RCEIL)
    quantize_(layer, config, filter_fn=lambda m, f: True)
    out = layer(x)
    assert abs(float(out.float().mean())) < 1, "the bias of 100 is missing from the output"
    out.float().sum().backward()
    assert layer.bias.grad is None

    model = nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 64, bias=False), nn.Linear(64, 8))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        names = float8_config.convert(model, "fsdp:mxfp8-rceil", "mxfp8-rceil", True, ("1", "2"))
    assert names == ["2"]
    assert any("Linear layers with a bias are not converted to MXFP8 (1)" in str(w.message) for w in seen)
    assert type(model[1].weight.data) is torch.Tensor
