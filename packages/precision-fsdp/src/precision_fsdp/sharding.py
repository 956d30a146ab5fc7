"""Which modules of a model are sharded: telling FSDP1 from FSDP2 on a model, and the default FSDP2 wrap policy.

The policy has the meaning of Lightning's ``FSDPStrategy(auto_wrap_policy=...)``: each module it selects becomes one
FSDP2 unit (``fully_shard``), whose parameters are gathered together for its forward and backward; the root module
is always sharded last and holds every parameter no selected module holds.

* ``None`` (the default): each direct child of the root module that has parameters.
* a set (or list/tuple) of module classes: every module that is an instance of one of them (like torch's
  ``ModuleWrapPolicy``; the usual choice is a transformer's block class).
* an ``int``: a size threshold; a module becomes a unit when the parameters it holds outside units already chosen
  below it number at least this many (like torch's ``size_based_auto_wrap_policy(min_num_params=...)``).
* a callable with FSDP1's policy signature ``policy(module=, recurse=, nonwrapped_numel=) -> bool``, such as
  ``functools.partial(size_based_auto_wrap_policy, min_num_params=...)`` or a ``ModuleWrapPolicy``: asked with
  ``recurse=True`` whether to look inside a module, and with ``recurse=False`` whether to shard it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Literal, Optional, Union

import torch

from precision_fsdp._compat import FSDPModule, FullyShardedDataParallel

FSDPVersion = Literal[1, 2]

WrapPolicy = Union[None, int, Collection[type[torch.nn.Module]], Callable[..., bool]]
"""What :func:`units_to_shard` accepts (see the module docstring)."""


def fsdp_version_of(model: Any) -> Optional[FSDPVersion]:
    """1 if ``model`` holds FSDP1 ``FullyShardedDataParallel`` modules, 2 if it holds ``fully_shard`` modules,
    ``None`` if neither (or ``model`` is not a module)."""
    if not isinstance(model, torch.nn.Module):
        return None
    version: Optional[FSDPVersion] = None
    for module in model.modules():
        if isinstance(module, FullyShardedDataParallel):
            return 1
        if isinstance(module, FSDPModule):
            version = 2
    return version


def fsdp1_root(model: Any) -> Optional[torch.nn.Module]:
    """``model`` itself if it is an FSDP1 root (``FullyShardedDataParallel`` wrapping everything), else ``None``."""
    return model if isinstance(model, FullyShardedDataParallel) else None


def _as_callable(policy: WrapPolicy, root: torch.nn.Module) -> Callable[[torch.nn.Module, bool, int], bool]:
    if policy is None:
        children = {id(child) for child in root.children()}
        return lambda module, recurse, numel: (
            module is root or id(module) in children if recurse else id(module) in children and numel > 0
        )
    if isinstance(policy, bool):
        raise TypeError(f"auto_wrap_policy={policy!r} is not a policy; {_POLICY_KINDS}")
    if isinstance(policy, int):
        if policy < 1:
            raise ValueError(f"auto_wrap_policy={policy!r}: a size threshold must be a positive number of parameters")
        return lambda module, recurse, numel: recurse or numel >= policy
    if isinstance(policy, Collection) and not isinstance(policy, (str, bytes)):
        classes = tuple(policy)
        if not classes or not all(isinstance(c, type) and issubclass(c, torch.nn.Module) for c in classes):
            raise TypeError(f"auto_wrap_policy={policy!r} must hold torch.nn.Module subclasses; {_POLICY_KINDS}")
        return lambda module, recurse, numel: recurse or isinstance(module, classes)
    if callable(policy):
        return lambda module, recurse, numel: bool(policy(module=module, recurse=recurse, nonwrapped_numel=numel))
    raise TypeError(f"auto_wrap_policy={policy!r} is not a policy; {_POLICY_KINDS}")


_POLICY_KINDS = (
    "pass None (each direct child), a set of module classes, a minimum number of parameters (int), or a callable "
    "policy(module=, recurse=, nonwrapped_numel=) -> bool as FSDPStrategy's auto_wrap_policy takes"
)


def units_to_shard(root: torch.nn.Module, policy: WrapPolicy = None) -> list[torch.nn.Module]:
    """The modules under ``root`` that ``policy`` makes FSDP2 units, innermost first (the order ``fully_shard``
    must be applied in), not including ``root`` itself.

    Raises:
        TypeError, ValueError: ``policy`` is none of the accepted kinds (the message lists them).
    """
    decide = _as_callable(policy, root)
    chosen: list[torch.nn.Module] = []

    def visit(module: torch.nn.Module) -> int:
        """Choose units at and below ``module``; return how many parameters under it are now inside a unit."""
        numel = sum(p.numel() for p in module.parameters())
        if not decide(module, True, numel):
            return 0
        inside = sum(visit(child) for child in module.children())
        if module is not root and decide(module, False, numel - inside):
            chosen.append(module)
            return numel
        return inside

    visit(root)
    return chosen


def units_for_lightning(root: torch.nn.Module, policy: WrapPolicy = None) -> list[torch.nn.Module]:
    """:func:`units_to_shard`, plus each direct child of ``root`` that holds parameters no chosen unit holds.

    FSDP2 gathers a unit's parameters in the pre-forward hook of the unit's module. Lightning calls
    ``training_step``, not the LightningModule's ``forward``, so parameters left to the root unit would stay sharded
    (a sibling ``head`` next to a policy-chosen ``body`` fails with "got mixed torch.Tensor and DTensor"). Making such
    children units of their own gathers them when they run.

    Raises:
        TypeError, ValueError: ``policy`` is none of the accepted kinds (the message lists them).
    """
    units = units_to_shard(root, policy)
    covered = {id(p) for unit in units for p in unit.parameters()}
    for child in root.children():
        if child not in units and any(id(p) not in covered for p in child.parameters()):
            units.append(child)  # after any unit inside it: fully_shard goes innermost first
    return units
