"""FP8 precisions: names, options, the install hint, the hardware check and the default Linear choice (single
process; the 2-process fits are in tests-integration/test_fp8_fits.py)."""

from __future__ import annotations

import subprocess
import sys
from collections import OrderedDict

import pytest
import torch
from torch import nn

import precision_base
from precision_fsdp import FSDPPrecision
from precision_fsdp._compat import fsdp2_cpu_problem
from precision_fsdp.errors import Float8UnavailableError
from precision_fsdp.float8 import config as float8_config
from precision_testsupport.launch import process_group


def test_names_are_declared_and_reachable() -> None:
    entry = precision_base.get_entry("fsdp")
    assert entry.info is not None
    assert entry.info.extra_precisions == (
        ("fp8-tensorwise", "bf16-mixed"),
        ("fp8-rowwise", "bf16-mixed"),
        ("mxfp8-rceil", "bf16-mixed"),  # issue 23
    )
    plugin = precision_base.resolve("fsdp:fp8-rowwise")
    assert plugin.precision == "fp8-rowwise"
    assert plugin.dtypes() == precision_base.resolve("fsdp:bf16-mixed").dtypes(), "the rest follows bf16-mixed"
    shown = plugin.describe()["float8 (torchao, FSDP2 only)"]
    assert shown["converted Linear: weights all-gathered by FSDP2"] == "bfloat16"
    assert (
        precision_base.resolve("fsdp:fp8-tensorwise").describe()["float8 (torchao, FSDP2 only)"][
            "converted Linear: weights all-gathered by FSDP2"
        ]
        == "float8_e4m3fn"
    )


def test_fp8_options_only_for_fp8() -> None:
    with pytest.raises(ValueError, match="fp8_emulate and fp8_filter apply to the FP8 precisions"):
        FSDPPrecision("bf16-mixed", fp8_emulate=True)
    with pytest.raises(TypeError, match="fp8_filter must be module name patterns"):
        FSDPPrecision("fp8-tensorwise", fp8_filter="net.2")  # type: ignore[arg-type]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without an FP8 GPU")
def test_no_fp8_hardware_is_an_error_outside_emulation() -> None:
    pytest.importorskip("torchao.float8", reason='torchao is not installed (pip install "precision-fsdp[fp8]")')
    plugin = FSDPPrecision("fp8-tensorwise")
    with pytest.raises(Float8UnavailableError, match=r"needs a GPU with FP8 \(CUDA compute capability 8\.9 or newer\)"):
        plugin.configure_strategy("auto", accelerator="cpu", devices=2)
    FSDPPrecision("fp8-tensorwise", fp8_emulate=True).configure_strategy("auto", accelerator="cpu", devices=2)


def test_without_torchao_it_is_an_install_hint() -> None:
    """torchao missing: neither importable nor in the installed metadata (both hidden in a fresh Python)."""
    code = (
        "import builtins, importlib.metadata as md\n"
        "real_import, real_version = builtins.__import__, md.version\n"
        "def no_torchao(name, *a, **k):\n"
        "    if name.split('.')[0] == 'torchao': raise ModuleNotFoundError(\"No module named 'torchao'\")\n"
        "    return real_import(name, *a, **k)\n"
        "def no_torchao_version(name):\n"
        "    if name == 'torchao': raise md.PackageNotFoundError(name)\n"
        "    return real_version(name)\n"
        "builtins.__import__, md.version = no_torchao, no_torchao_version\n"
        "import precision_base\n"
        "from precision_fsdp.float8.config import torchao_float8\n"
        "checks = (lambda: precision_base.resolve('fsdp:fp8-tensorwise'), lambda: torchao_float8('fsdp:fp8-rowwise'))\n"
        "for check in checks:\n"
        "    try:\n"
        "        check()\n"
        "    except Exception as e:\n"
        "        print(type(e).__name__, e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    from precision_base.registry.statuses import install_command

    line = install_command("precision-fsdp", "fp8")  # for where this copy came from (issue 21): checkout or index
    assert line.startswith("pip install ")
    assert line.endswith('precision-fsdp[fp8]"')
    resolve, setup = done.stdout.strip().splitlines()[-2:]
    assert resolve.startswith("PluginRequirementError fsdp:fp8-tensorwise is unavailable here: it needs torchao>=")
    assert resolve.endswith(f"install it with: {line}")
    assert setup.startswith(f"Float8UnavailableError fsdp:fp8-rowwise needs torchao: {line} (it brings torchao)")


def test_only_an_fp8_plugin_imports_torchao_and_only_to_check_it_works() -> None:
    """Building any other plugin never imports torchao; resolving an fp8 name imports ``torchao.float8`` (the
    training is about to use it) so that an installed torchao that does not import is refused at once."""
    probe = "import sys, precision_base; precision_base.resolve({!r}); print('torchao' in sys.modules)"
    for spec, imported in (("fsdp:bf16-mixed", "False"), ("fsdp:fp8-tensorwise", "True")):
        done = subprocess.run([sys.executable, "-c", probe.format(spec)], capture_output=True, text=True, timeout=120)
        assert done.stdout.strip() == imported, (spec, done.stderr[-2000:])


def test_default_choice_skips_first_last_and_odd_dims() -> None:
    model = nn.Sequential(
        OrderedDict(first=nn.Linear(16, 32), odd=nn.Linear(32, 24), mid=nn.Linear(24 + 8, 32), last=nn.Linear(32, 16))
    )
    model.odd = nn.Linear(32, 20)  # 20 is not a multiple of 16
    decide = float8_config.default_filter(model)
    assert [n for n, m in model.named_children() if decide(m, n)] == ["mid"]
    patterns = float8_config.user_filter(["first", "la*"])
    assert patterns is not None
    assert [n for n, m in model.named_children() if patterns(m, n)] == ["first", "last"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="emulation on a machine without FP8")
def test_keep_fp32_modules_are_never_converted() -> None:
    pytest.importorskip("torchao.float8", reason='torchao is not installed (pip install "precision-fsdp[fp8]")')
    model = nn.Sequential(*(nn.Linear(32, 32) for _ in range(4)))
    plugin = FSDPPrecision("fp8-tensorwise", fp8_emulate=True, keep_fp32=("2",))
    plugin.prepare_for_sharding(model)
    assert plugin.fp8_converted == ["1"], "'0' and '3' are first/last, '2' is kept in float32"
    assert type(model[1]).__name__ == "Float8Linear"
    assert type(model[2]) is nn.Linear


@pytest.mark.skipif(fsdp2_cpu_problem() is not None, reason=f"FSDP2 on CPU needs a newer torch: {fsdp2_cpu_problem()}")
def test_sub_module_sharded_first_converts_nothing_and_is_refused() -> None:
    """Sharding a 2-Linear block before the whole model: the block's first and last Linear stay high precision, so
    nothing is converted; setup refuses instead of training silently without float8."""
    pytest.importorskip("torchao.float8", reason='torchao is not installed (pip install "precision-fsdp[fp8]")')
    with process_group():
        model = nn.Sequential(nn.Linear(32, 32), nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32)), nn.Linear(32, 8))
        plugin = FSDPPrecision("fp8-tensorwise", fp8_emulate=True)
        plugin.fully_shard(model[1])
        plugin.fully_shard(model)
        assert plugin.fp8_converted == []
        with pytest.raises(Float8UnavailableError, match="no Linear layer of the model was converted to float8"):
            plugin.convert_module(model)
