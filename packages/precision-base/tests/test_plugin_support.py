"""precision_base.kit.plugin_support and the helpers the PrecisionPlugin mixin gives every plugin."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import pytest

L = pytest.importorskip("lightning.pytorch")
PL = pytest.importorskip("pytorch_lightning")
import lightning.fabric  # noqa: E402
import torch  # noqa: E402

from precision_base import PRECISIONS, PrecisionPlugin, TrainerConfigurationError  # noqa: E402
from precision_base.errors import UnsupportedPrecisionError  # noqa: E402
from precision_base.kit.casting import default_dtype  # noqa: E402
from precision_base.kit.plugin_support import (  # noqa: E402
    PRECISION_DTYPE_NAMES,
    precision_dtype,
    registered_strategy_class,
    uses_cpu,
    uses_cuda,
    wrong_strategy_error,
)


class _Impl(PrecisionPlugin):
    backend = "support"
    precisions = ("32-true", "bf16-true", "bf16-mixed")

    def __init__(self, precision: object) -> None:
        self.precision = self.canonical_precision(precision)


class SupportPrecision(_Impl, L.plugins.precision.Precision):
    """Concrete test plugin."""


class LightningWordedPrecision(SupportPrecision):
    lightning_precision_error = (
        "`precision={precision!r})` is not supported in FSDP. `precision` must be one of: {supported}."
    )


def test_dtype_map_covers_every_precision() -> None:
    assert set(PRECISION_DTYPE_NAMES) == set(PRECISIONS)
    assert [precision_dtype(p) for p in PRECISIONS] == [
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float16,
        torch.bfloat16,
    ]
    with pytest.raises(KeyError):
        precision_dtype("bf16")


def test_accelerator_names() -> None:
    assert uses_cpu("cpu")
    assert uses_cpu("CPU")
    assert not uses_cuda("cpu")
    assert uses_cuda("gpu")
    assert uses_cuda("cuda")
    assert not uses_cpu("cuda")
    assert not uses_cpu("mps")
    assert not uses_cuda("mps")


def test_auto_means_what_lightning_picks_here() -> None:
    picked = L.Trainer(accelerator="auto", devices=1, logger=False).accelerator
    assert uses_cpu("auto") is isinstance(picked, L.accelerators.CPUAccelerator)
    assert uses_cuda("auto") is isinstance(picked, L.accelerators.CUDAAccelerator)


@pytest.mark.parametrize("namespace", [L, PL, lightning.fabric])
def test_accelerator_instances_of_every_namespace(namespace: Any) -> None:
    assert uses_cpu(namespace.accelerators.CPUAccelerator())
    assert not uses_cuda(namespace.accelerators.CPUAccelerator())
    assert uses_cuda(namespace.accelerators.CUDAAccelerator())
    assert not uses_cpu(namespace.accelerators.CUDAAccelerator())
    assert not uses_cpu(object())


def test_registered_strategy_class_in_both_namespaces() -> None:
    assert registered_strategy_class("fsdp") is L.strategies.FSDPStrategy
    assert registered_strategy_class("fsdp", "pytorch_lightning") is PL.strategies.FSDPStrategy
    assert registered_strategy_class("deepspeed_stage_2") is L.strategies.DeepSpeedStrategy
    assert registered_strategy_class("ddp_spawn", "pytorch_lightning") is PL.strategies.DDPStrategy
    assert registered_strategy_class("no_such_strategy") is None


def test_wrong_strategy_error_wording() -> None:
    error = wrong_strategy_error("fsdp:bf16-mixed", "ddp", "Pass strategy='auto'.")
    assert isinstance(error, TrainerConfigurationError)
    assert str(error) == "precision plugin 'fsdp:bf16-mixed' cannot work with strategy='ddp'. Pass strategy='auto'."
    assert (error.spec, error.strategy) == ("fsdp:bf16-mixed", "ddp")  # type: ignore[attr-defined]
    strategy = L.strategies.DDPStrategy()
    shown = str(wrong_strategy_error("fsdp:32-true", strategy, "Use FSDP."))
    assert shown == "precision plugin 'fsdp:32-true' cannot work with strategy=DDPStrategy(...). Use FSDP."


@pytest.mark.parametrize(
    ("given", "canonical"),
    [("bf16", "bf16-mixed"), ("32", "32-true"), (32, "32-true"), (" bf16-true ", "bf16-true")],
)
def test_canonical_precision_accepts_lightnings_aliases(given: object, canonical: str) -> None:
    plugin = SupportPrecision(given)
    assert plugin.precision == canonical
    assert plugin.spec == f"support:{canonical}"


@pytest.mark.parametrize("given", ["16", 16, "16-mixed", "fp8", 3.5, None, True])
def test_canonical_precision_refuses_what_the_class_does_not_offer(given: object) -> None:
    with pytest.raises(ValueError, match=r"SupportPrecision does not support precision=") as info:
        SupportPrecision(given)
    assert isinstance(info.value, UnsupportedPrecisionError)
    assert "it supports 32-true, bf16-true, bf16-mixed" in str(info.value)
    if given in ("16", 16):
        assert "(that is '16-mixed')" in str(info.value)


def test_canonical_precision_puts_lightnings_own_text_first() -> None:
    with pytest.raises(ValueError) as info:
        LightningWordedPrecision("16-true")
    assert str(info.value).startswith(
        "`precision='16-true')` is not supported in FSDP. `precision` must be one of: "
        "('32-true', 'bf16-true', 'bf16-mixed'). LightningWordedPrecision does not support"
    )


def test_convert_output_casts_floating_tensors_to_the_default_dtype() -> None:
    plugin = SupportPrecision("bf16-mixed")
    pair = namedtuple("pair", "a b")
    data = {"x": torch.ones(2, dtype=torch.bfloat16), "n": [torch.arange(3), pair(torch.ones(1, dtype=torch.half), 7)]}
    out = plugin.convert_output(data)
    assert out["x"].dtype is torch.float32
    assert out["n"][0].dtype is torch.int64
    assert type(out["n"][1]) is pair
    assert out["n"][1].a.dtype is torch.float32
    assert out["n"][1].b == 7
    with default_dtype(torch.float64):
        assert plugin.convert_output(torch.ones(1, dtype=torch.bfloat16)).dtype is torch.float64


def test_lightning_root_is_the_namespace_module() -> None:
    assert SupportPrecision.lightning is L
    assert SupportPrecision("32").lightning is L
    with pytest.raises(AttributeError, match="_Impl has no Lightning base class"):
        _ = _Impl.lightning


def test_repr_names_the_class_and_precision() -> None:
    assert repr(SupportPrecision("bf16")) == "SupportPrecision('bf16-mixed')"
