"""precision_base.Trainer and a user's own Trainer subclass under LightningCLI: the plugin name on the command line
and in a YAML config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as L
import pytest
import torch

pytest.importorskip("jsonargparse")
from lightning.pytorch.cli import LightningCLI

from precision_base import PrecisionPluginTrainerMixin, Trainer
from precision_testsupport.models import TinyRegressor

COMMON = [
    "--trainer.accelerator=cpu",
    "--trainer.devices=1",
    "--trainer.max_steps=3",
    "--trainer.logger=false",
    "--trainer.enable_checkpointing=false",
    "--trainer.enable_progress_bar=false",
]


class MyTrainer(PrecisionPluginTrainerMixin, L.Trainer):
    """A user's Trainer subclass with an argument of its own; the mixin adds precision_plugin=."""

    def __init__(self, *, run_name: str = "unnamed", **kwargs: Any) -> None:
        self.run_name = run_name
        super().__init__(**kwargs)


def run_cli(args: list[str], trainer_class: type = Trainer) -> LightningCLI:
    return LightningCLI(TinyRegressor, trainer_class=trainer_class, args=args, save_config_callback=None)


def test_cli_flag_reaches_the_front_door(dummy_registered: type) -> None:
    cli = run_cli(["fit", "--trainer.precision_plugin", "dummy:bf16-mixed", *COMMON])
    assert isinstance(cli.trainer.precision_plugin, dummy_registered)
    assert cli.trainer.precision_plugin.precision == "bf16-mixed"
    assert cli.trainer.global_step == 3


def test_yaml_config_reaches_the_front_door(dummy_registered: type, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("trainer:\n  precision_plugin: dummy:bf16-true\n  max_steps: 2\n")
    cli = run_cli(["fit", "--config", str(config), *COMMON[:2], *COMMON[3:]])
    assert cli.trainer.precision_plugin.precision == "bf16-true"
    assert cli.trainer.global_step == 2


def test_cli_help_documents_the_argument(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_cli(["fit", "--help"])
    assert "--trainer.precision_plugin" in capsys.readouterr().out


def test_cli_with_a_user_trainer_subclass(dummy_registered: type) -> None:
    cli = run_cli(
        ["fit", "--trainer.precision_plugin", "dummy:bf16-true", "--trainer.run_name", "r1", *COMMON], MyTrainer
    )
    assert type(cli.trainer) is MyTrainer
    assert cli.trainer.run_name == "r1"
    assert isinstance(cli.trainer.precision_plugin, dummy_registered)
    assert cli.trainer.precision_plugin.precision == "bf16-true"
    assert cli.trainer.global_step == 3


_IN_FSDP_CELLS = "needs precision-fsdp installed: runs in its cells (tools/matrix.toml [tests])"


def test_cli_with_a_user_trainer_subclass_and_the_fsdp_plugin() -> None:
    pytest.importorskip("precision_fsdp", reason=_IN_FSDP_CELLS)
    from precision_fsdp._compat import fsdp2_cpu_problem

    if (problem := fsdp2_cpu_problem()) is not None:
        pytest.skip(f"FSDP2 on CPU needs a newer torch: {problem}")
    try:
        cli = run_cli(["fit", "--trainer.precision_plugin", "fsdp:bf16-mixed", *COMMON], MyTrainer)
    finally:  # Lightning's teardown leaves the one-rank process group of the FSDP2 strategy: later tests need none
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    plugin = cli.trainer.precision_plugin
    assert type(plugin).__module__ == "precision_fsdp.plugin"
    assert plugin.spec == "fsdp:bf16-mixed"
    assert cli.trainer.global_step == 3
    assert set(cli.model.compute_dtypes) == {torch.bfloat16}


def test_cli_help_of_a_user_subclass_lists_its_own_lightnings_and_ours(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_cli(["fit", "--help"], MyTrainer)
    out = capsys.readouterr().out
    for flag in ("--trainer.precision_plugin", "--trainer.run_name", "--trainer.max_epochs"):
        assert flag in out
