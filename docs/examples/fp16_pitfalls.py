"""Why ``16-true`` and ``bf16-true`` need care: what fp16 and bf16 cannot hold."""

import torch

# 16-true keeps the optimizer's state in fp16. Adam's default eps (1e-8) is below fp16's
# smallest subnormal (6e-8): it rounds to 0, a tiny second moment divides by zero, and
# the loss is NaN from step 2.
print("Adam eps in fp16:", torch.tensor(1e-8, dtype=torch.float16).item())  # 0.0
print("eps=1e-4 in fp16:", torch.tensor(1e-4, dtype=torch.float16).item())  # kept

# bf16-true has no fp32 master copy: an update smaller than bf16's resolution near the
# weight is lost.
weight = torch.tensor(1.0, dtype=torch.bfloat16)
print("1.0 + 1e-3 in bf16:", (weight + 1e-3).item())  # 1.0: the step vanished
print("1.0 + 1e-3 in fp32:", (weight.float() + 1e-3).item())  # what a master copy keeps
