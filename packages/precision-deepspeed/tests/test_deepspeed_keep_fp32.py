"""``keep_fp32=`` on DeepSpeedPrecision in one process: when it is refused, what ``show`` says, and the float32
forward of kept modules under the plugin's autocast (the 2-process ZeRO-2 fit is in tests-integration)."""

from __future__ import annotations

import json
import pickle
from collections import OrderedDict
from typing import ClassVar

import pytest
import torch
from torch import nn

import precision_base
from precision_base.cli import main
from precision_deepspeed import DeepSpeedPrecision
from precision_deepspeed.errors import KeepFP32Error
from precision_deepspeed.implementation import deepspeed_has_torch_autocast

needs_autocast = pytest.mark.skipif(
    not deepspeed_has_torch_autocast(), reason="the installed DeepSpeed has no torch_autocast config section"
)
KEEP = ("lm_head", nn.LayerNorm)


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed", "bf16-true", "16-true", "32-true"])
def test_refused_without_torch_autocast_naming_the_alternative(precision: str) -> None:
    expected = "would change nothing under" if precision == "32-true" else "cannot be honoured under"
    with pytest.raises(KeepFP32Error, match=f"{expected} 'deepspeed:{precision}'") as info:
        DeepSpeedPrecision(precision, keep_fp32=KEEP)
    assert "torch_autocast=True" in str(info.value)
    assert "'lm_head', torch.nn.modules.normalization.LayerNorm" in str(info.value)


def test_empty_keep_fp32_is_no_option() -> None:
    assert not DeepSpeedPrecision("bf16-mixed", keep_fp32=()).keep_fp32


@needs_autocast
def test_bad_entry_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="keep_fp32 entries must be"):
        DeepSpeedPrecision("bf16-mixed", torch_autocast=True, keep_fp32=(3,))  # type: ignore[arg-type]


@needs_autocast
@pytest.mark.parametrize("listed", ["torch.nn.LayerNorm", "torch.nn.modules.normalization.LayerNorm"])
def test_class_also_on_the_lower_precision_safe_list_is_refused(listed: str) -> None:
    with pytest.raises(KeepFP32Error, match=r"both in keep_fp32 .* and in autocast_lower_precision_safe_modules"):
        DeepSpeedPrecision(
            "bf16-mixed", torch_autocast=True, keep_fp32=KEEP, autocast_lower_precision_safe_modules=[listed]
        )


@needs_autocast
def test_by_name_shown_and_picklable() -> None:
    plugin = precision_base.resolve("deepspeed:bf16-mixed", torch_autocast=True, keep_fp32=KEEP)
    facts = plugin.describe()["keep_fp32"]
    assert facts["modules"] == "'lm_head', torch.nn.modules.normalization.LayerNorm"
    assert facts["compute"].startswith("float32")
    assert "bfloat16 for parameters of kept modules whose exact class is on" in facts["reduction"]
    assert any(note.startswith("keep_fp32 (") for note in plugin.dtypes().notes)
    assert pickle.loads(pickle.dumps(plugin)).keep_fp32.describe() == plugin.keep_fp32.describe()


@needs_autocast
def test_reduction_of_kept_classes_follows_deepspeeds_list() -> None:
    default = DeepSpeedPrecision("bf16-mixed", torch_autocast=True, keep_fp32=(nn.Linear, nn.LayerNorm))
    assert default.describe()["keep_fp32"]["reduction"].startswith("bfloat16 for torch.nn.modules.linear.Linear")
    norm_only = DeepSpeedPrecision("bf16-mixed", torch_autocast=True, keep_fp32=(nn.LayerNorm,))
    assert norm_only.describe()["keep_fp32"]["reduction"] == "float32"


@needs_autocast
def test_show_with_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "deepspeed:bf16-mixed", "--json", "--option", "torch_autocast=True",
                 "--option", "keep_fp32=('lm_head',)"]) == 0  # fmt: skip
    shown = json.dumps(json.loads(capsys.readouterr().out))
    assert "keep_fp32" in shown
    assert "'lm_head'" in shown


@needs_autocast
def test_kept_modules_compute_in_fp32_under_the_plugins_autocast() -> None:
    plugin = DeepSpeedPrecision("bf16-mixed", torch_autocast=True, keep_fp32=KEEP)
    model: nn.Module = nn.Sequential(
        OrderedDict(embed=nn.Linear(4, 8), norm=nn.LayerNorm(8), hidden=nn.Linear(8, 8), lm_head=nn.Linear(8, 1))
    )
    model = plugin.convert_module(model)
    outputs: dict[str, torch.dtype] = {}
    for name, module in model.named_children():
        module.register_forward_hook(lambda m, a, out, name=name: outputs.__setitem__(name, out.dtype), prepend=True)
    with plugin.forward_context():
        model(torch.randn(2, 4))
    assert outputs == {
        "embed": torch.bfloat16,
        "norm": torch.float32,
        "hidden": torch.bfloat16,
        "lm_head": torch.float32,
    }
    assert {p.dtype for p in model.parameters()} == {torch.float32}


# -- the default float32 rule: running-statistics layers, Hugging Face's declared float32 modules ---------------------
class ConvNet(nn.Module):
    """conv -> BatchNorm2d -> ReLU -> pool -> head; ``_keep_in_fp32_modules_strict`` as a transformers model has it."""

    _keep_in_fp32_modules: ClassVar[list[str]] = []
    _keep_in_fp32_modules_strict: ClassVar[list[str]] = ["head"]

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)
        self.pool = nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.norm(self.conv(x))))


def _as_deepspeed_casts(model: nn.Module, dtype: torch.dtype) -> None:
    """What ``deepspeed.initialize`` does in its native bf16/fp16 mode: parameters cast, buffers left as they are."""
    for param in model.parameters():
        param.data = param.data.to(dtype)


def test_native_bf16_keeps_batchnorm_and_declared_modules_computing_in_fp32() -> None:
    plugin = DeepSpeedPrecision("bf16-mixed")
    model = plugin.convert_module(ConvNet())
    _as_deepspeed_casts(model, torch.bfloat16)
    seen: dict[str, tuple[torch.dtype, torch.dtype]] = {}
    for name in ("conv", "norm", "head"):
        getattr(model, name).register_forward_hook(
            lambda m, a, out, name=name: seen.__setitem__(name, (a[0].dtype, out.dtype)), prepend=True
        )
    before = model.norm.running_mean.clone()
    out = model(plugin.convert_input(torch.randn(2, 3, 6, 6)))
    out.float().sum().backward()
    assert seen == {
        "conv": (torch.bfloat16, torch.bfloat16),
        "norm": (torch.float32, torch.float32),  # computed in float32 (outputs cast back after this hook)
        "head": (torch.float32, torch.float32),  # _keep_in_fp32_modules_strict = ["head"]
    }
    assert out.dtype == torch.bfloat16  # cast back for what follows
    assert model.norm.weight.dtype == torch.bfloat16
    assert model.norm.weight.grad is not None
    assert model.norm.weight.grad.dtype == torch.bfloat16
    assert model.norm.running_mean.dtype == torch.float32
    assert not torch.equal(before, model.norm.running_mean)
    notes = plugin.dtypes().notes
    assert any(n.startswith("default: layers whose running statistics are float buffers") for n in notes)


def test_native_bf16_without_the_default_rule_fails_as_reported() -> None:
    plugin = DeepSpeedPrecision("bf16-mixed", keep_fp32_defaults=False)
    model = plugin.convert_module(ConvNet())
    _as_deepspeed_casts(model, torch.bfloat16)
    with pytest.raises(RuntimeError, match="expected scalar type BFloat16 but found Float"):
        model(plugin.convert_input(torch.randn(2, 3, 6, 6)))
    assert not any(n.startswith("default:") for n in plugin.dtypes().notes)


def test_no_default_rule_under_32_true_and_no_running_stats_rule_under_true() -> None:
    assert not any(n.startswith("default:") for n in DeepSpeedPrecision("32-true").dtypes().notes)
    true_notes = [n for n in DeepSpeedPrecision("bf16-true").dtypes().notes if n.startswith("default:")]
    # -true casts the buffers too (BatchNorm runs in bf16 throughout); Hugging Face's declared modules stay kept
    assert [n.split(";")[0] for n in true_notes] == [
        "default: Hugging Face models' _keep_in_fp32_modules_strict (transformers applies _keep_in_fp32_modules for "
        "float16 only) are kept float32, names relative to the model that declares them"
    ]


@needs_autocast
def test_torch_autocast_keeps_batchnorm_with_autocast_off() -> None:
    plugin = DeepSpeedPrecision("bf16-mixed", torch_autocast=True)
    model = plugin.convert_module(ConvNet())
    seen: dict[str, torch.dtype] = {}
    model.norm.register_forward_hook(lambda m, a, out: seen.__setitem__("norm", out.dtype), prepend=True)
    model.conv.register_forward_hook(lambda m, a, out: seen.__setitem__("conv", out.dtype), prepend=True)
    with plugin.forward_context():
        model(torch.randn(2, 3, 6, 6))
    assert seen == {"conv": torch.bfloat16, "norm": torch.float32}
