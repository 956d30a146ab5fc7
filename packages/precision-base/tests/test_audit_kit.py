"""The conformance kit's audited 2-process fit (``audit_fit = True``): the dummy plugin passes it, a plugin whose
table says float32 buffers while it casts them to bfloat16 fails it with the row."""

from __future__ import annotations

import dataclasses

import pytest

from precision_base import DtypeTable, PluginInfo
from precision_base.testing import PluginConformance
from precision_testsupport.dummy import INFO
from precision_testsupport.dummy_plugin import DummyPrecision


class TestDummyAuditedFit(PluginConformance):
    backend = "dummy"
    plugin_info = INFO
    plugin_class = DummyPrecision
    audit_fit = True


class CastsBuffersKit(DummyPrecision):
    """``bf16-true`` casts the module's buffers to bfloat16; its table says float32."""

    backend = "kit-casts-buffers"
    precisions = ("bf16-true",)

    def dtypes(self) -> DtypeTable:
        return dataclasses.replace(super().dtypes(), buffers="float32")


class _WrongTable(PluginConformance):
    backend = "kit-casts-buffers"
    plugin_info = PluginInfo(
        backend="kit-casts-buffers", precisions=("bf16-true",), plugin_class=f"{__name__}:CastsBuffersKit"
    )
    plugin_class = CastsBuffersKit
    audit_fit = True


@pytest.mark.slow
def test_the_kit_check_fails_a_lying_table() -> None:
    with pytest.raises(AssertionError) as failed:
        _WrongTable().test_strict_audit_of_a_real_two_process_fit()
    message = str(failed.value)
    assert message.startswith("the strict audit failed:\nbf16-true:\nThe precision that ran differs from "), message
    assert "buffers  TinyRegressor x1: <root>  float32   bfloat16  MISMATCH" in message
    assert "rank 1: buffers | TinyRegressor x1: <root> | expected float32 | observed bfloat16" in message
