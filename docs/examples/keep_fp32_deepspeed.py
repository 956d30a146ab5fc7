"""keep_fp32 under DeepSpeed (torch_autocast=True): the head and every LayerNorm compute
in float32 while the rest runs under bf16 autocast; runs on a CPU. ``Model`` is the one
of keep_fp32.py."""

import torch
from keep_fp32 import Model

from precision_base import Trainer, resolve

if __name__ == "__main__":
    plugin = resolve(
        "deepspeed:bf16-mixed",
        torch_autocast=True,
        keep_fp32=("lm_head", torch.nn.LayerNorm),
    )
    trainer = Trainer(precision_plugin=plugin, max_steps=2)
    model = Model()
    trainer.fit(model)
    for name, dtype in model.seen.items():
        print(name, dtype)
