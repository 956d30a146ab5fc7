"""``keep_fp32=`` on DeepSpeedPrecision in one process: when it is refused, what ``show`` says, and the float32
forward of kept modules under the plugin's autocast (the 2-process ZeRO-2 fit is in tests-integration)."""

from __future__ import annotations

import json
import pickle
from collections import OrderedDict

import pytest
import torch
from torch import nn

import precision_base
from precision_base.cli import main
from precision_deepspeed import DeepSpeedPrecision
from precision_deepspeed.keep_fp32 import KeepFP32Error
from precision_deepspeed.plugin import deepspeed_has_torch_autocast

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
