"""Extra precisions (beyond Lightning's five): the naming rule, PluginInfo.extra_precisions, parse_spec, resolve."""

from __future__ import annotations

import pytest

from precision_base import InvalidPluginInfoError, PluginInfo, UnsupportedPrecisionError, parse_spec
from precision_base.registry import Registry
from precision_base.spec import is_extra_precision_name


@pytest.mark.parametrize("name", ["fp8-tensorwise", "fp8-rowwise", "fp8-rowwise_with_gw_hp", "mxfp8-block32"])
def test_names_following_the_rule(name: str) -> None:
    assert is_extra_precision_name(name)
    assert parse_spec(f"fsdp:{name}").precision == name


@pytest.mark.parametrize("name", ["bf16-mixed", "fp8-true", "fp8-mixed", "bf16-mixd", "FP8-tensorwise", "fp8", "8-x"])
def test_names_breaking_the_rule(name: str) -> None:
    assert not is_extra_precision_name(name)


def test_info_declares_extras_with_a_base() -> None:
    info = PluginInfo(
        backend="lite",
        precisions=("bf16-mixed",),
        plugin_class="x.y:Z",
        extra_precisions=(("fp8-tensorwise", "bf16-mixed"),),
    )
    assert info.all_precisions == ("bf16-mixed", "fp8-tensorwise")
    with pytest.raises(InvalidPluginInfoError, match="breaks the naming rule"):
        PluginInfo(
            backend="lite", precisions=("bf16-mixed",), plugin_class="x.y:Z", extra_precisions=(("fp8", "bf16-mixed"),)
        )
    with pytest.raises(InvalidPluginInfoError, match="the base must be one of"):
        PluginInfo(
            backend="lite", precisions=("bf16-mixed",), plugin_class="x.y:Z", extra_precisions=(("fp8-a", "fp8"),)
        )


def test_a_backend_without_the_extra_refuses_it() -> None:
    registry = Registry()
    registry.register(PluginInfo(backend="lite", precisions=("bf16-mixed",), plugin_class="x.y:Z"))
    with pytest.raises(UnsupportedPrecisionError, match="does not offer 'fp8-tensorwise'; it offers bf16-mixed"):
        registry.resolve("lite:fp8-tensorwise")
