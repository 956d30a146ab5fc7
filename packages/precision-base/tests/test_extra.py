"""``precision_base.kit.extra``: an extra precision feature's names as data, and the no-op feature (pure Python)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from precision_base import PluginInfo
from precision_base.kit.extra import (
    NO_FEATURE,
    ExtraPrecisionFeature,
    ExtraPrecisions,
    base_precision,
    declared,
    declared_extras,
)

FP8 = ExtraPrecisions("float8", (("fp8-a", "bf16-mixed"), ("fp8-b", "bf16-mixed")), extra="fp8")
OTHER = ExtraPrecisions("other", (("int4-x", "bf16-true"),))


def test_names_bases_and_extras_are_derived_from_one_declaration() -> None:
    assert FP8.names == ("fp8-a", "fp8-b")
    assert "fp8-a" in FP8
    assert "bf16-mixed" not in FP8
    assert FP8.base_of("fp8-b") == "bf16-mixed"
    assert FP8.base_of("32-true") == "32-true"
    assert FP8.precision_extras == (("fp8-a", "fp8"), ("fp8-b", "fp8"))
    assert OTHER.precision_extras == ()
    assert declared(FP8, OTHER) == (("fp8-a", "bf16-mixed"), ("fp8-b", "bf16-mixed"), ("int4-x", "bf16-true"))
    assert declared_extras(FP8, OTHER) == FP8.precision_extras
    assert base_precision("int4-x", (FP8, OTHER)) == "bf16-true"
    assert base_precision("16-mixed", (FP8, OTHER)) == "16-mixed"
    info = PluginInfo(
        "x", ("bf16-mixed",), "m:C", extra_precisions=declared(FP8), precision_extras=declared_extras(FP8)
    )
    assert info.all_precisions == ("bf16-mixed", "fp8-a", "fp8-b")


def test_a_name_declared_twice_is_refused() -> None:
    with pytest.raises(ValueError, match=r"extra precisions declared twice: \['fp8-a'\]"):
        declared(FP8, ExtraPrecisions("again", (("fp8-a", "32-true"),)))


def test_no_feature_does_nothing_and_is_falsy() -> None:
    assert isinstance(NO_FEATURE, ExtraPrecisionFeature)
    assert not NO_FEATURE
    assert NO_FEATURE.declared is None
    table = object()
    assert NO_FEATURE.table(None, table) is table
    assert NO_FEATURE.describe(None) == {}
    NO_FEATURE.check_sharding(None, 1)
    NO_FEATURE.check_machine(None)
    NO_FEATURE.prepare_model(None, object(), exclude=())
    NO_FEATURE.check_model(None, object())


def test_no_feature_stays_the_one_instance_through_pickle_and_copy() -> None:
    import copy
    import pickle

    assert pickle.loads(pickle.dumps(NO_FEATURE)) is NO_FEATURE
    assert copy.deepcopy(NO_FEATURE) is NO_FEATURE


def test_importing_extra_imports_no_torch() -> None:
    code = "import sys, precision_base.kit.extra; print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
