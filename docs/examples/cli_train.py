"""LightningCLI with the plugin named on the command line:

python cli_train.py fit --trainer.precision_plugin fsdp:bf16-mixed
"""

from lightning.pytorch.cli import LightningCLI
from quick_fsdp import Model

import precision_base

if __name__ == "__main__":
    cli = LightningCLI(
        Model, trainer_class=precision_base.Trainer, save_config_callback=None
    )
    print(cli.trainer.precision_plugin.spec)
