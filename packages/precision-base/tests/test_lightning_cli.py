"""precision_base.Trainer under LightningCLI: the plugin name on the command line and in a YAML config."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("jsonargparse")
from lightning.pytorch.cli import LightningCLI

from precision_base import Trainer
from precision_base.testing.models import TinyRegressor

COMMON = [
    "--trainer.accelerator=cpu",
    "--trainer.devices=1",
    "--trainer.max_steps=3",
    "--trainer.logger=false",
    "--trainer.enable_checkpointing=false",
    "--trainer.enable_progress_bar=false",
]


def run_cli(args: list[str]) -> LightningCLI:
    return LightningCLI(TinyRegressor, trainer_class=Trainer, args=args, save_config_callback=None)


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
