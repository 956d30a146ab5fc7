"""DeepSpeed 16-mixed / 16-true set to compute on a CPU that emulates float16: one warning, at either door, when
the plugin learns its device (``connect`` calls ``bind_device``; Fabric's first inputs too)."""

from __future__ import annotations

import warnings

import pytest

import precision_base
from precision_base._compat import cpu_native_half
from precision_base.kit.cpu_half import CPU_FP16_EMULATED


@pytest.mark.skipif(cpu_native_half()[1], reason="this CPU computes float16 natively (AMX-FP16): nothing to say")
@pytest.mark.parametrize("door", ["Trainer", "Fabric"])
@pytest.mark.parametrize("precision", ["16-mixed", "16-true", "bf16-mixed"])
def test_one_warning_when_the_device_is_a_cpu(door: str, precision: str) -> None:
    spec = f"deepspeed:{precision}"
    plugin = precision_base.resolve(spec) if door == "Trainer" else precision_base.resolve_fabric(spec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            plugin.bind_device("cpu")
    said = [str(w.message) for w in caught if CPU_FP16_EMULATED in str(w.message)]
    assert len(said) == (precision.startswith("16-")), said
    if said:
        assert said[0].startswith(f"{spec}: {precision} computes in float16")
