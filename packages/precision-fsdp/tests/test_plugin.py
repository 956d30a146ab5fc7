"""Unit tests of precision_fsdp.FSDPPrecision beyond the conformance kit: options, errors, configs, strategies."""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import pytest
import torch
from lightning.pytorch.plugins.precision import FSDPPrecision as BuiltinFSDPPrecision
from lightning.pytorch.plugins.precision import MixedPrecision as LightningAMP
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, ModelParallelStrategy
from torch.amp import GradScaler
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

import precision_base
from precision_base import TrainerConfigurationError
from precision_fsdp import FSDP2Strategy, FSDPPrecision
from precision_fsdp._compat import MixedPrecisionPolicy, policy_reduce_dtype
from precision_fsdp.errors import ClipGradNormError
from precision_fsdp.scaler import check_user_scaler
from precision_testsupport.models import mlp

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16

# precision -> (param_dtype, reduce_dtype, buffer_dtype) of FSDP1's MixedPrecision, with the default reduce_dtype
FSDP1_EXPECTED = {
    "32-true": (F32, F32, F32),
    "16-true": (F16, F16, F16),
    "bf16-true": (BF16, BF16, BF16),
    "16-mixed": (F16, F32, F16),
    "bf16-mixed": (BF16, F32, BF16),
}


# -- construction ---------------------------------------------------------------------------------------------
def test_is_lightnings_class_for_strategies_and_checkpoints() -> None:
    plugin = FSDPPrecision("bf16-mixed")
    assert isinstance(plugin, BuiltinFSDPPrecision)
    assert FSDPPrecision.__qualname__ == BuiltinFSDPPrecision.__qualname__, "checkpoints key plugin state on this"


@pytest.mark.parametrize(("alias", "canonical"), [("bf16", "bf16-mixed"), (16, "16-mixed"), ("32", "32-true")])
def test_accepts_lightnings_aliases(alias: Any, canonical: str) -> None:
    assert FSDPPrecision(alias).precision == canonical


def _lightning_error(*args: Any, **kwargs: Any) -> str:
    with pytest.raises(ValueError) as err:
        BuiltinFSDPPrecision(*args, **kwargs)
    return str(err.value)


@pytest.mark.parametrize("bad", ["64-true", "fp8", None, 3.5])
def test_rejects_unknown_precision_with_lightnings_message_first(bad: Any) -> None:
    with pytest.raises(ValueError) as err:
        FSDPPrecision(bad)
    message = str(err.value)
    assert message.startswith(_lightning_error(bad) + " "), "Lightning's text verbatim, then ours"
    assert "FSDPPrecision does not support precision=" in message


@pytest.mark.parametrize("precision", ["32-true", "16-true", "bf16-true", "bf16-mixed"])
def test_scaler_for_a_precision_that_does_not_scale_is_a_clear_error(precision: str) -> None:
    scaler = GradScaler("cpu")
    with pytest.raises(ValueError, match=r"Only '16-mixed' scales the loss") as err:
        FSDPPrecision(precision, scaler=scaler)
    assert str(err.value).startswith(_lightning_error(precision, scaler=scaler) + " ")
    with pytest.raises(ValueError, match="only apply to precision='16-mixed'"):
        FSDPPrecision(precision, init_scale=8.0)


@pytest.mark.parametrize("precision", ["16-true", "bf16-true"])
def test_true_precision_keeps_lightnings_lower_precision_warning(precision: str) -> None:
    first_sentence = f"FSDP with `{precision}` enables computation in lower precision."
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert BuiltinFSDPPrecision(precision).mixed_precision_config is not None
    theirs = [str(w.message) for w in caught if "enables computation in lower precision" in str(w.message)]
    if theirs:  # Lightning's built-in FSDPPrecision warns from Lightning 2.6.0 on; ours must open with its words
        assert theirs[0].split(". ")[0] + "." == first_sentence
    plugin = FSDPPrecision(precision)
    with pytest.warns(UserWarning, match="enables computation in lower precision") as ours:
        assert plugin.mixed_precision_config is not None
    assert str(ours[0].message).startswith(first_sentence + " ")
    assert "keeps no full-precision copy" in str(ours[0].message)


def test_scaler_and_options_together_is_an_error() -> None:
    with pytest.raises(ValueError, match="not both"):
        FSDPPrecision("16-mixed", scaler=GradScaler("cpu"), init_scale=8.0)


@pytest.mark.parametrize(
    ("option", "value"), [("init_scale", 0.0), ("growth_factor", 1.0), ("backoff_factor", 1.5), ("growth_interval", 0)]
)
def test_bad_scaler_options(option: str, value: Any) -> None:
    with pytest.raises(ValueError, match=option):
        FSDPPrecision("16-mixed", **{option: value})


def test_non_scaler_object_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="GradScaler"):
        FSDPPrecision("16-mixed", scaler=object())  # type: ignore[arg-type]


def test_scaler_options_through_resolve() -> None:
    plugin = precision_base.resolve("fsdp:16-mixed", init_scale=512.0, growth_interval=3, backoff_factor=0.125)
    assert isinstance(plugin, FSDPPrecision)
    assert plugin.scaler is not None
    assert plugin.scaler.get_scale() == 512.0
    assert plugin.scaler.get_growth_interval() == 3
    assert plugin.scaler.get_backoff_factor() == 0.125


@pytest.mark.parametrize(("value", "dtype"), [("fp32", F32), ("bfloat16", BF16), (torch.float16, F16), ("BF16", BF16)])
def test_reduce_dtype_by_dtype_or_name(value: Any, dtype: torch.dtype) -> None:
    plugin = FSDPPrecision("bf16-mixed", reduce_dtype=value)
    assert plugin.reduce_dtype == dtype
    assert plugin.mixed_precision_config.reduce_dtype == dtype
    assert policy_reduce_dtype(plugin.mixed_precision_policy) == dtype
    assert plugin.dtypes().reduction == str(dtype).removeprefix("torch.")


@pytest.mark.parametrize("value", ["float64", torch.int8, "int", "fp8"])
def test_bad_reduce_dtype(value: Any) -> None:
    with pytest.raises(ValueError, match="reduce_dtype"):
        FSDPPrecision("bf16-mixed", reduce_dtype=value)


# -- FSDP1 and FSDP2 configs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", list(FSDP1_EXPECTED))
def test_fsdp1_mixed_precision_config(precision: str) -> None:
    from torch.distributed.fsdp import MixedPrecision

    mp = FSDPPrecision(precision).mixed_precision_config
    assert isinstance(mp, MixedPrecision)
    assert (mp.param_dtype, mp.reduce_dtype, mp.buffer_dtype) == FSDP1_EXPECTED[precision]
    assert mp.cast_root_forward_inputs, "root inputs are cast to param_dtype"


@pytest.mark.parametrize("precision", list(FSDP1_EXPECTED))
def test_fsdp2_policy_and_tables_agree(precision: str) -> None:
    plugin = FSDPPrecision(precision)
    policy = plugin.mixed_precision_policy
    assert isinstance(policy, MixedPrecisionPolicy)
    param, reduce, buffer = FSDP1_EXPECTED[precision]
    assert (policy.param_dtype, policy_reduce_dtype(policy)) == (param, reduce)
    one, two = plugin.dtypes(1), plugin.dtypes(2)
    for table in (one, two):
        assert table.compute == str(param).removeprefix("torch.")
        assert table.reduction == str(reduce).removeprefix("torch.")
    assert one.buffers == str(buffer).removeprefix("torch."), "FSDP1 casts buffers to buffer_dtype"
    assert two.buffers == two.parameters, "FSDP2 never casts buffers"
    assert one.parameters == two.parameters == ("float32" if precision.endswith("mixed") else one.compute)


def test_strategy_type_check_accepts_ours_and_uses_its_config() -> None:
    plugin = FSDPPrecision("bf16-mixed")
    strategy = FSDPStrategy(precision_plugin=plugin)
    assert strategy.precision_plugin is plugin
    assert strategy.mixed_precision_config == plugin.mixed_precision_config
    with pytest.raises(TypeError, match="FSDPPrecision"):
        FSDPStrategy(precision_plugin=LightningAMP("bf16-mixed", "cpu"))  # the check is real


def test_show_prints_the_dtype_table(capsys: pytest.CaptureFixture[str]) -> None:
    from precision_base.cli import main

    assert main(["show", "fsdp:bf16-mixed"]) == 0
    out = capsys.readouterr().out
    assert "precision_fsdp.plugin.FSDPPrecision" in out
    assert "reduction   float32" in out
    assert "compute     bfloat16" in out
    assert "FSDP1 MixedPrecision" in out
    assert "FSDP2 MixedPrecisionPolicy" in out


# -- strategy selection ---------------------------------------------------------------------------------------
def test_ddp_is_refused_naming_what_to_pass() -> None:
    with pytest.raises(TrainerConfigurationError) as err:
        FSDPPrecision("bf16-mixed").configure_strategy("ddp", accelerator="cpu", devices=2)
    assert str(err.value).startswith("precision plugin 'fsdp:bf16-mixed' cannot work with strategy='ddp'. Pass ")
    assert 'strategy="fsdp"' in str(err.value)
    assert "FSDP2Strategy" in str(err.value)
    with pytest.raises(TrainerConfigurationError, match=r"cannot work with strategy=DDPStrategy\(\.\.\.\)"):
        FSDPPrecision("bf16-mixed").configure_strategy(DDPStrategy(), accelerator="cpu", devices=2)


@pytest.mark.parametrize("accelerator", ["cpu", "gpu", "cuda", "auto"])
def test_auto_becomes_fsdp2_strategy_on_every_accelerator(accelerator: str) -> None:
    from precision_base.kit.plugin_support import uses_cpu
    from precision_fsdp._compat import fsdp2_cpu_problem

    problem = fsdp2_cpu_problem() if uses_cpu(accelerator) else None
    if problem is not None:  # torch < 2.7 on a CPU: a clear error before anything starts
        with pytest.raises(TrainerConfigurationError, match="FSDP2 cannot run on a CPU with this torch"):
            FSDPPrecision("bf16-mixed").configure_strategy("auto", accelerator=accelerator, devices=2)
        return
    chosen = FSDPPrecision("bf16-mixed").configure_strategy("auto", accelerator=accelerator, devices=2)
    assert type(chosen) is FSDP2Strategy
    assert chosen.auto_wrap_policy is None


def _lightning_fsdp_on_cpu_message() -> str:
    import lightning.pytorch as pl

    with pytest.raises(ValueError) as err:
        pl.Trainer(strategy="fsdp", accelerator="cpu", devices=2)
    return str(err.value)


@pytest.mark.parametrize("strategy", ["fsdp", "fsdp_cpu_offload", FSDPStrategy()])
def test_fsdp1_on_cpu_is_refused_with_lightnings_message_inside(strategy: Any) -> None:
    with pytest.raises(TrainerConfigurationError, match=r"cannot run on CPU.*FSDP2Strategy") as err:
        FSDPPrecision("bf16-mixed").configure_strategy(strategy, accelerator="cpu", devices=2)
    assert _lightning_fsdp_on_cpu_message() in str(err.value)


def test_fsdp1_is_kept_on_gpus() -> None:
    assert FSDPPrecision("bf16-mixed").configure_strategy("fsdp", accelerator="cuda", devices=2) == "fsdp"
    given = FSDPStrategy()
    assert FSDPPrecision("bf16-mixed").configure_strategy(given, accelerator="gpu", devices=2) is given


def test_fsdp_strategy_with_its_own_mixed_precision_is_refused() -> None:
    from torch.distributed.fsdp import MixedPrecision

    strategy = FSDPStrategy(mixed_precision=MixedPrecision(param_dtype=torch.float16))
    with pytest.raises(TrainerConfigurationError, match=r"mixed_precision=\.\.\.\) would replace the plugin's dtypes"):
        FSDPPrecision("bf16-mixed").configure_strategy(strategy, accelerator="cuda", devices=2)


def test_model_parallel_strategy_is_accepted_on_cpu(fsdp2_on_cpu: None) -> None:
    strategy = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    assert FSDPPrecision("bf16-mixed").configure_strategy(strategy, accelerator="cpu", devices=2) is strategy


def test_pytorch_lightning_plugin_gets_pytorch_lightning_strategies(fsdp2_on_cpu: None) -> None:
    import pytorch_lightning as ptl

    from precision_base.namespaces import for_namespace

    plugin = precision_base.resolve("fsdp:bf16-mixed", namespace="pytorch_lightning")
    assert type(plugin) is for_namespace(FSDPPrecision, "pytorch_lightning")
    assert isinstance(plugin, ptl.plugins.precision.FSDPPrecision)
    chosen = plugin.configure_strategy("auto", accelerator="cpu", devices=2)
    assert isinstance(chosen, ptl.strategies.ModelParallelStrategy)
    assert type(chosen).__name__ == "FSDP2Strategy"
    with pytest.raises(TrainerConfigurationError, match="cannot work with strategy=ModelParallelStrategy"):
        plugin.configure_strategy(ModelParallelStrategy(), accelerator="cpu", devices=2)  # lightning's, not ptl's


def test_trainer_front_door(fsdp2_on_cpu: None) -> None:
    trainer = precision_base.Trainer(
        precision_plugin="fsdp:bf16-mixed", accelerator="cpu", devices=2, logger=False, enable_progress_bar=False
    )
    assert type(trainer.precision_plugin) is FSDPPrecision
    assert type(trainer.strategy) is FSDP2Strategy
    with pytest.raises(TrainerConfigurationError, match="FSDP2Strategy"):
        precision_base.Trainer(precision_plugin="fsdp:bf16-mixed", strategy="ddp", accelerator="cpu", devices=2)


def test_strategy_passes_our_mixed_precision_to_lightnings_fsdp_strategy() -> None:
    """FSDP1 needs a GPU to run, so this checks the config: the MixedPrecision Lightning's FSDPStrategy would pass
    to FullyShardedDataParallel, for every constructor option."""
    cases = [
        (FSDPPrecision("bf16-mixed"), (BF16, F32, BF16)),
        (FSDPPrecision("bf16-mixed", reduce_dtype="bf16"), (BF16, BF16, BF16)),
        (FSDPPrecision("16-mixed", reduce_dtype=torch.float16, init_scale=8.0, growth_interval=3), (F16, F16, F16)),
        (FSDPPrecision("32-true", reduce_dtype="fp32"), (F32, F32, F32)),
    ]
    for plugin, (param, reduce, buffer) in cases:
        strategy = FSDPStrategy(precision_plugin=plugin)
        mp = strategy.mixed_precision_config
        assert (mp.param_dtype, mp.reduce_dtype, mp.buffer_dtype) == (param, reduce, buffer), plugin
    scaled = FSDPPrecision("16-mixed", init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=3)
    FSDPStrategy(precision_plugin=scaled)
    assert scaled.state_dict() == {
        "scale": 8.0,
        "growth_factor": 4.0,
        "backoff_factor": 0.25,
        "growth_interval": 3,
        "_growth_tracker": 0,
    }
    user = ShardedGradScaler(device="cpu", init_scale=32.0)
    assert FSDPStrategy(precision_plugin=FSDPPrecision("16-mixed", scaler=user)).precision_plugin.scaler is user


# -- FSDP2 in one process -------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["bf16-true", "bf16-mixed", "16-true"])
def test_fully_shard_takes_dtypes_from_the_plugin(precision: str, cpu_mesh: Any) -> None:
    from precision_fsdp._compat import DTensor

    plugin = FSDPPrecision(precision)
    plugin.bind_device("cpu")
    model = mlp()
    plugin.fully_shard(model[0], mesh=cpu_mesh)
    plugin.fully_shard(model, mesh=cpu_mesh)
    table = plugin.dtypes()
    assert plugin.fsdp_version == 2
    assert all(isinstance(p, DTensor) and str(p.dtype) == f"torch.{table.parameters}" for p in model.parameters())
    seen: list[torch.dtype] = []
    model[2].register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    with plugin.forward_context():
        model(plugin.convert_input(torch.randn(4, 8)))
    assert seen == [getattr(torch, table.compute)]
    assert plugin.convert_module(model) is model, "already in the storage dtype: nothing to cast"


def test_fully_shard_refuses_a_second_policy(cpu_mesh: Any) -> None:
    with pytest.raises(TypeError, match="mp_policy"):
        FSDPPrecision("bf16-mixed").fully_shard(mlp(), mesh=cpu_mesh, mp_policy=MixedPrecisionPolicy())


def test_clipping_mixed_dtensor_and_plain_gradients_names_the_alternative(cpu_mesh: Any) -> None:
    model = mlp()
    FSDPPrecision("32-true").fully_shard(model[0], mesh=cpu_mesh)  # model[2] stays plain
    model(torch.randn(4, 8)).sum().backward()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ClipGradNormError, match="gradient_clip_algorithm='value'") as err:
        FSDPPrecision("32-true").clip_grad_by_norm(optimizer, 1.0)
    lightning = "`gradient_clip_algorithm='norm'` is currently not supported for `FSDPPrecision`"
    assert str(err.value).startswith(lightning + " here: "), "Lightning's text verbatim, then why and what to do"
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    assert isinstance(err.value, MisconfigurationException), "the type Lightning's FSDPPrecision raises"
    with pytest.raises(Exception, match="^" + lightning.replace("(", r"\(").replace(")", r"\)") + "$"):
        BuiltinFSDPPrecision("32-true").clip_grad_by_norm(optimizer, 1.0)


def test_clipping_plain_gradients_in_one_process() -> None:
    model = mlp()
    model(torch.randn(4, 8)).pow(2).sum().mul(100).backward()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    FSDPPrecision("32-true").clip_grad_by_norm(optimizer, 0.25)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    torch.testing.assert_close(norm, torch.tensor(0.25), rtol=1e-4, atol=1e-6)


def test_default_scaler_carries_state_when_connected(cpu_mesh: Any) -> None:
    from precision_fsdp._compat import fully_shard

    plugin = FSDPPrecision("16-mixed", init_scale=64.0)
    plugin.load_state_dict({**plugin.state_dict(), "scale": 16.0, "_growth_tracker": 5})
    plugin.connect(fully_shard(mlp(), mesh=cpu_mesh), [], [])
    assert type(plugin.scaler) is GradScaler
    assert plugin.fsdp_version == 2
    assert plugin.state_dict()["scale"] == 16.0
    assert plugin.state_dict()["_growth_tracker"] == 5


def test_user_scaler_checks() -> None:
    check_user_scaler(GradScaler("cpu"), 2, "cpu")
    check_user_scaler(ShardedGradScaler(device="cpu"), 1, "cpu")
    with pytest.raises(ValueError, match="ShardedGradScaler"):
        check_user_scaler(GradScaler("cpu"), 1, "cpu")  # FSDP1 needs the sharded kind
    with pytest.raises(ValueError, match="made for device 'cpu'"):
        check_user_scaler(GradScaler("cpu"), 2, "cuda")


def test_pickles_without_the_connected_model(cpu_mesh: Any) -> None:
    from precision_fsdp._compat import fully_shard

    plugin = FSDPPrecision("bf16-mixed")
    plugin.connect(fully_shard(mlp(), mesh=cpu_mesh), [], [])
    clone = pickle.loads(pickle.dumps(plugin))
    assert clone.precision == "bf16-mixed"
    assert clone.fsdp_version == 2
    assert clone.dtypes() == plugin.dtypes()


def test_pytorch_lightning_instance_pickles() -> None:
    plugin = precision_base.resolve("fsdp:16-mixed", namespace="pytorch_lightning", init_scale=64.0)
    clone = pickle.loads(pickle.dumps(plugin))
    assert type(clone) is type(plugin)
    assert clone.state_dict() == plugin.state_dict()
    assert type(clone).__qualname__ == "FSDPPrecision", "checkpoints key plugin state on this"


def test_importing_the_package_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, precision_fsdp, precision_fsdp._info; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
