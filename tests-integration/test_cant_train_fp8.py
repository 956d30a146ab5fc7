"""An fp8 precision whose filter chose no Linear layer warns, naming each Linear and why it was skipped.

First torchao's own conversion (what a user of Lightning's classes calls): a filter that matches nothing converts
nothing and says nothing, and the model would train in bfloat16 under an fp8 name. Then the plugin's conversion
(``prepare_for_sharding``, which ``fully_shard`` and ``FSDP2Strategy`` call). Runs torchao's emulation on CPU; no
process group is needed (conversion happens before sharding).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from precision_base import PrecisionPluginWarning

pytest.importorskip("torchao.float8")

from precision_fsdp import FSDPPrecision


def _float8_layers(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if "Float8Linear" in type(m).__name__]


def test_torchao_converts_nothing_silently() -> None:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    model = nn.Sequential(nn.Linear(24, 24), nn.ReLU(), nn.Linear(24, 24), nn.Linear(24, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        convert_to_float8_training(
            model, module_filter_fn=lambda m, fqn: m.in_features % 16 == 0, config=Float8LinearConfig(emulate=True)
        )
    assert _float8_layers(model) == []
    assert [str(w.message) for w in caught if "float8" in str(w.message).lower()] == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="emulation on a machine without FP8")
def test_default_filter_choosing_nothing_warns_with_each_linear_and_why() -> None:
    model = nn.Sequential(nn.Linear(24, 24), nn.ReLU(), nn.Linear(24, 24), nn.Linear(24, 8))
    plugin = FSDPPrecision("fp8-tensorwise", fp8_emulate=True)
    with pytest.warns(PrecisionPluginWarning) as caught:
        plugin.prepare_for_sharding(model)
    assert plugin.fp8_converted == []
    assert _float8_layers(model) == []
    message = str(caught[0].message)
    assert message.startswith("fsdp:fp8-tensorwise: no Linear layer was chosen for float8")
    assert "Linear layers: 0 (first or last Linear), 2 (24x24 not multiples of 16), 3 (first or last Linear)." in (
        message
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="emulation on a machine without FP8")
def test_user_filter_and_keep_fp32_choosing_nothing_warn() -> None:
    model = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32))
    plugin = FSDPPrecision("fp8-rowwise", fp8_emulate=True, fp8_filter=("nothing.*",), keep_fp32=("1",))
    with pytest.warns(PrecisionPluginWarning, match=r"0 \(fp8_filter did not choose it\), 1 \(keep_fp32\)"):
        plugin.prepare_for_sharding(model)
    assert _float8_layers(model) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="emulation on a machine without FP8")
def test_a_model_with_convertible_layers_does_not_warn() -> None:
    model = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32))
    plugin = FSDPPrecision("fp8-tensorwise", fp8_emulate=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionPluginWarning)
        plugin.prepare_for_sharding(model)
    assert _float8_layers(model) == ["1"]
