"""Checks for runs that cannot train: they would run to the end with a flat loss and say nothing.

* [`ReplacedParameters`][precision_base.doors.cant_train.ReplacedParameters] (an optimizer holding parameters that
  sharding replaced): a snapshot of a model's parameters before a strategy sets it up;
  [`ReplacedParameters.check`][precision_base.doors.cant_train.ReplacedParameters.check] raises
  [`StaleOptimizerError`][precision_base.errors.StaleOptimizerError] for an optimizer that still holds one of them once
  the model holds another. This is what ``fabric.setup(model, optimizer)`` does under FSDP2 (``fully_shard`` replaces
  every parameter), and a LightningModule whose optimizer was created before ``configure_model`` sharded it. The doors
  run it: Fabric's ``setup``/``setup_module``/``setup_optimizers`` ([`precision_base.doors.fabric`][]) and the Trainer
  after ``configure_optimizers`` ([`precision_base.doors.trainer`][]).
* [`no_gradient_message`][precision_base.doors.cant_train.no_gradient_message]: after a backward, not one trainable
  parameter of the optimizers has a gradient (a loss cut off from the model); the doors warn with the module names on
  the first [`GRAD_CHECK_STEPS`][precision_base.doors.cant_train.GRAD_CHECK_STEPS] optimizer steps only.

Only ``torch.optim.Optimizer`` instances are checked: DeepSpeed's optimizer wrappers hold DeepSpeed's own flat
partitions, and under ZeRO gradients live in DeepSpeed's buffers, not in ``param.grad``.

Importing this module imports no torch or Lightning module.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Final

from precision_base.errors import StaleOptimizerError

GRAD_CHECK_STEPS: Final[int] = 3
"""How many optimizer steps are checked for gradients that are all ``None`` (the check is cheap, not free)."""

_SHOWN: Final[int] = 6
"""How many names a message lists before "and N more"."""

FABRIC_FIX: Final[str] = (
    "Set up the model first, then create the optimizer from the set-up model's parameters and set it up: "
    "model = fabric.setup_module(model); optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), "
    "...)) (Lightning's Fabric.setup docs: 'For certain strategies like FSDP, you may need to set up the model first "
    "using setup_module, then create the optimizer, and finally set up the optimizer using setup_optimizers')."
)

TRAINER_FIX: Final[str] = (
    "Create the optimizer inside configure_optimizers from self.parameters() (which then holds the sharded "
    "parameters), never in __init__ or before configure_model shards the model."
)


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def module_names(param_names: Iterable[str]) -> list[str]:
    """The modules owning ``param_names`` (``"0.weight"`` -> ``"0"``; a parameter of the root -> ``"<root>"``),
    in first-seen order."""
    owners: dict[str, None] = {}
    for name in param_names:
        owner, _, _ = name.rpartition(".")
        owners[owner or "<root>"] = None
    return list(owners)


def optimizer_params(optimizer: Any) -> list[Any]:
    """The parameters of ``optimizer``'s groups, or ``[]`` when it is not a ``torch.optim.Optimizer``."""
    import torch

    if not isinstance(optimizer, torch.optim.Optimizer):
        return []
    return [p for group in optimizer.param_groups for p in group["params"]]


class ReplacedParameters:
    """The parameters ``module`` holds now, by weak reference, to recognise them later in an optimizer after a
    strategy replaced them. Holds no parameter alive (a large model's unsharded weights would stay in memory)."""

    def __init__(self, module: Any) -> None:
        self._before: dict[int, tuple[str, weakref.ref[Any]]] = {
            id(p): (name, weakref.ref(p)) for name, p in module.named_parameters(remove_duplicate=False)
        }

    def __bool__(self) -> bool:
        return bool(self._before)

    def replaced(self, module: Any, optimizers: Iterable[Any]) -> list[str]:
        """Names (in ``module``, before setup) of the parameters an optimizer holds that ``module`` no longer does."""
        current = {id(p) for p in module.parameters()}
        stale: dict[str, None] = {}
        for optimizer in optimizers:
            for p in optimizer_params(optimizer):
                known = self._before.get(id(p))
                if known is not None and known[1]() is p and id(p) not in current:
                    stale[known[0]] = None
        return list(stale)

    def check(self, module: Any, optimizers: Iterable[Any], *, what: str, fix: str) -> None:
        """Raise when an optimizer in ``optimizers`` holds parameters that ``module`` held before and no longer does.

        Args:
            module: the model as the strategy set it up (its current parameters).
            optimizers: the optimizers to check.
            what: what the user did, for the message (e.g. ``"fabric.setup(model, optimizer)"``).
            fix: what to do instead.

        Raises:
            StaleOptimizerError: the message names the parameters, says what replaced them and gives ``fix``.
        """
        optimizers = list(optimizers)
        stale = self.replaced(module, optimizers)
        if not stale:
            return
        total = sum(len(optimizer_params(o)) for o in optimizers)
        raise StaleOptimizerError(
            f"{what}: the optimizer holds {len(stale)} of the model's parameters from before the strategy set the "
            f"model up ({_listed(stale)}); the strategy replaced them (FSDP2's fully_shard registers new, sharded "
            f"parameters), so optimizer.step() would update tensors the model no longer uses and the loss would stay "
            f"flat ({len(stale)} of the optimizer's {total} parameters are stale). {fix}"
        )


def no_gradient_message(
    optimizers: Iterable[Any], named_params: Iterable[tuple[str, Any]], *, where: str
) -> str | None:
    """The warning text when no trainable parameter of ``optimizers`` has a gradient, else ``None``.

    Args:
        optimizers: the optimizers about to step (or that just stepped); others than ``torch.optim.Optimizer`` are
            not checked.
        named_params: the model's ``named_parameters()``, to name its modules that have no gradient.
        where: when the check ran, for the message (e.g. ``"before the first optimizer step"``).
    """
    trainable = [p for optimizer in optimizers for p in optimizer_params(optimizer) if p.requires_grad]
    if not trainable or any(p.grad is not None for p in trainable):
        return None
    # the model's own parameters without a gradient: FSDP2 registers the unsharded parameters during forward and
    # the sharded ones (the optimizer's) again only after a backward that reached the model
    modules = module_names(name for name, p in named_params if p.requires_grad and p.grad is None)
    listed = _listed(modules) if modules else "none known (the optimizer's parameters are not a set-up model's)"
    return (
        f"{where}, none of the optimizer's {len(trainable)} trainable parameters has a gradient (every .grad is "
        f"None), so the step changes nothing and the loss will stay flat. The model's modules without gradients: "
        f"{listed}. The loss is not connected to the model's parameters: was it rebuilt from a value "
        f"(torch.tensor(loss.item(), requires_grad=True)), detached, or computed under torch.no_grad()?"
    )


__all__ = [
    "FABRIC_FIX",
    "GRAD_CHECK_STEPS",
    "TRAINER_FIX",
    "ReplacedParameters",
    "module_names",
    "no_gradient_message",
    "optimizer_params",
]
