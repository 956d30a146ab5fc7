"""FSDP2 with your own sharding units: module classes (or a size threshold, or a policy
callable), as in Lightning's ``FSDPStrategy(auto_wrap_policy=...)``. Runs as written on
a CPU-only machine."""

import torch
from quick_fsdp import Model

from precision_base import Trainer
from precision_fsdp import FSDP2Strategy

if __name__ == "__main__":
    # every Linear is one FSDP2 unit
    strategy = FSDP2Strategy(auto_wrap_policy={torch.nn.Linear})
    trainer = Trainer(
        precision_plugin="fsdp:bf16-mixed", strategy=strategy, max_steps=4, logger=False
    )
    trainer.fit(Model())
    print(type(trainer.strategy).__name__, trainer.precision_plugin.spec)
