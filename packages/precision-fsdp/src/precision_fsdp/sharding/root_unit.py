"""A LightningModule that is itself an FSDP2 unit: gathering its own unit's parameters in its step methods.

Lightning never calls the LightningModule (it calls ``training_step`` and the other step methods), so FSDP2 never
gathers the parameters of a unit made by ``fully_shard(self)``;
[`gather_root_in_steps`][precision_fsdp.sharding.root_unit.gather_root_in_steps] (run by the plugin's
``convert_module``) registers the step methods as FSDP2 forward methods where that is needed.
"""

from __future__ import annotations

from typing import Optional

import torch

from precision_fsdp.sharding.units import class_name, defined_by_user, is_lightning_module, root_held_parameters

#: The LightningModule methods Lightning calls instead of ``forward`` (the step methods).
STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")
_STEPS_GATHER_MARK = "_precision_fsdp_steps_gather_root"


def gather_root_in_steps(module: torch.nn.Module) -> Optional[str]:
    """Make a LightningModule that is itself an FSDP2 unit gather its own unit's parameters in its step methods.

    FSDP2 all-gathers a unit's parameters in the pre-forward hook of the unit's module, i.e. when the module is
    called. Lightning never calls the LightningModule (it calls ``training_step``, ``validation_step``, ...), so a
    ``configure_model`` that ends with ``fully_shard(self)`` while parameters are left in that unit (an embedding,
    a head: everything the inner ``fully_shard`` calls did not take) leaves them sharded DTensors, and the first op
    on them fails (``aten.embedding.default got mixed torch.Tensor and DTensor``). When the LightningModule defines
    no ``forward`` (so nothing else could gather them), each step method it defines is registered as an FSDP2 forward
    method (``torch.distributed.fsdp.register_fsdp_forward_method``): FSDP2 runs the unit's pre-forward (all-gather)
    and post-forward (backward hooks, reshard) around it, as it would around ``forward``. Idempotent.

    Returns:
        The line to log (what was done and why), or ``None`` when nothing was needed: ``module`` is not a
        LightningModule that is an FSDP2 unit holding parameters of its own, or it defines ``forward`` (its steps
        then gather them by calling ``self(...)``).
    """
    if not is_lightning_module(module) or getattr(module, _STEPS_GATHER_MARK, False):
        return None
    if defined_by_user(type(module), "forward"):
        return None
    held = root_held_parameters(module)
    if not held:
        return None
    from torch.distributed.fsdp import register_fsdp_forward_method

    steps = [name for name in STEP_METHODS if defined_by_user(type(module), name)]
    for name in steps:
        register_fsdp_forward_method(module, name)
    setattr(module, _STEPS_GATHER_MARK, True)
    shown = ", ".join(held[:3]) + (f", +{len(held) - 3} more" if len(held) > 3 else "")
    return (
        f"{class_name(module)} is itself an FSDP2 unit (fully_shard(self) in configure_model) holding "
        f"{len(held)} parameters no inner unit holds ({shown}), and defines no forward: Lightning calls its "
        f"{', '.join(steps) or 'step methods'} instead, so they now gather that unit's parameters as forward would "
        "(torch.distributed.fsdp.register_fsdp_forward_method). To keep those parameters out of one root unit, "
        "fully_shard the modules that hold them (e.g. fully_shard(self.net) after its blocks) before fully_shard(self)."
    )
