"""Save, resume, and resume under another precision (the plugin says what changed)."""

import warnings

from quick_fsdp import Model

from precision_base import Trainer

if __name__ == "__main__":
    first = Trainer(
        precision_plugin="fsdp:16-mixed",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
    )
    first.fit(Model())
    first.save_checkpoint("run.ckpt")  # FSDP2 writes a folder: one shard per process

    resumed = Trainer(
        precision_plugin="fsdp:16-mixed",
        max_steps=4,
        logger=False,
        enable_checkpointing=False,
    )
    resumed.fit(Model(), ckpt_path="run.ckpt")
    print("resumed from step 2, stopped at step", resumed.global_step)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        other = Trainer(
            precision_plugin="fsdp:bf16-mixed",
            max_steps=4,
            logger=False,
            enable_checkpointing=False,
        )
        other.fit(Model(), ckpt_path="run.ckpt")
    for warning in caught:
        if "written under precision" in str(warning.message):
            print("warning:", warning.message)
