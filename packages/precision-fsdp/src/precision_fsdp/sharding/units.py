"""Which modules of a model are sharded: telling FSDP1 from FSDP2 on a model, and the FSDP2 wrap policies.

The policy has the meaning of Lightning's ``FSDPStrategy(auto_wrap_policy=...)``: each module it selects becomes one
FSDP2 unit (``fully_shard``), whose parameters are gathered together for its forward and backward; the root module
is always sharded last and holds every parameter no selected module holds.

* ``None`` (the default): **blocks** ([`default_units`][precision_fsdp.sharding.units.default_units]):

  1. the model's declared no-split classes: every instance of a class named in ``_no_split_modules`` (the class
     attribute of Hugging Face ``PreTrainedModel``, e.g. ``LlamaDecoderLayer``), found on any submodule (a
     Hugging Face model held as ``self.net`` included) and applied inside that submodule;
  2. elsewhere (outside any module that declares ``_no_split_modules``): the repeated same-class children of
     ``nn.ModuleList`` and ``nn.Sequential`` containers, at any depth (children with parameters whose class at
     least one sibling shares: ``self.blocks = nn.ModuleList([Block() ...])``), the outermost such containers
     only (a block is not split further);
  3. a container without its own ``forward`` (``nn.ModuleList``, ``nn.ModuleDict``) is never a unit;
  4. tied parameters (one parameter held by several modules, e.g. an embedding tied to the output head) end up in
     one unit: a block that holds some but not all of a tied parameter's holders is not a unit;
  5. what is left goes to the root.

* a set (or list/tuple) of module classes: every module that is an instance of one of them (like torch's
  ``ModuleWrapPolicy``; the usual choice is a transformer's block class).
* an ``int``: a size threshold; a module becomes a unit when the parameters it holds outside units already chosen
  below it number at least this many (like torch's ``size_based_auto_wrap_policy(min_num_params=...)``).
* a callable with FSDP1's policy signature ``policy(module=, recurse=, nonwrapped_numel=) -> bool``, such as
  ``functools.partial(size_based_auto_wrap_policy, min_num_params=...)`` or a ``ModuleWrapPolicy``: asked with
  ``recurse=True`` whether to look inside a module, and with ``recurse=False`` whether to shard it.

Under every policy a container without ``forward`` is never made a unit (``fully_shard`` refuses it): a set of
classes that names one is refused, a size threshold or callable passes over it.

Under Fabric the model's forward runs, so the units are exactly the policy's plus the model (the root). Under a
Lightning Trainer, which never calls the LightningModule's own ``forward``,
[`units_for_lightning`][precision_fsdp.sharding.units.units_for_lightning] says when direct children of the
LightningModule become units too (the default policy: the children holding the blocks and those holding parameters
outside them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from typing import Any, Literal, Optional, Union

import torch

from precision_fsdp._compat import FSDPModule, FullyShardedDataParallel
from precision_fsdp.errors import TiedAcrossUnitsError

FSDPVersion = Literal[1, 2]

WrapPolicy = Union[None, int, Collection[type[torch.nn.Module]], Callable[..., bool]]
"""What [`units_to_shard`][precision_fsdp.sharding.units.units_to_shard] accepts (see the module docstring)."""


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


def is_container_without_forward(module: torch.nn.Module) -> bool:
    """Whether ``module`` is an ``nn.ModuleList`` / ``nn.ModuleDict`` without a ``forward`` of its own, which
    ``fully_shard`` refuses ("does not support containers that do not implement forward")."""
    return (
        isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict))
        and type(module).forward is torch.nn.Module.forward
    )


def _has_params(module: torch.nn.Module) -> bool:
    return any(True for _ in module.parameters())


def _as_callable(policy: WrapPolicy, root: torch.nn.Module) -> Callable[[torch.nn.Module, bool, int], bool]:
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
        containers = [c.__name__ for c in classes if _forwardless_class(c)]
        if containers:
            raise TypeError(
                f"auto_wrap_policy={policy!r} names {', '.join(containers)}, a container without forward, which "
                "fully_shard cannot shard; name the class of the blocks it holds instead (e.g. {MyBlock}), or pass "
                "None for the default block policy"
            )
        return lambda module, recurse, numel: recurse or isinstance(module, classes)
    if callable(policy):
        return lambda module, recurse, numel: bool(policy(module=module, recurse=recurse, nonwrapped_numel=numel))
    raise TypeError(f"auto_wrap_policy={policy!r} is not a policy; {_POLICY_KINDS}")


def _forwardless_class(cls: type[torch.nn.Module]) -> bool:
    return issubclass(cls, (torch.nn.ModuleList, torch.nn.ModuleDict)) and cls.forward is torch.nn.Module.forward


_POLICY_KINDS = (
    "pass None (the default blocks: _no_split_modules classes, else repeated children of ModuleList/Sequential), a "
    "set of module classes, a minimum number of parameters (int), or a callable "
    "policy(module=, recurse=, nonwrapped_numel=) -> bool as FSDPStrategy's auto_wrap_policy takes"
)


def units_to_shard(root: torch.nn.Module, policy: WrapPolicy = None) -> list[torch.nn.Module]:
    """The modules under ``root`` that ``policy`` makes FSDP2 units, innermost first (the order ``fully_shard``
    must be applied in), not including ``root`` itself. ``policy=None``:
    [`default_units`][precision_fsdp.sharding.units.default_units].

    Raises:
        TypeError, ValueError: ``policy`` is none of the accepted kinds (the message lists them).
    """
    if policy is None:
        return default_units(root)
    decide = _as_callable(policy, root)
    chosen: list[torch.nn.Module] = []

    def visit(module: torch.nn.Module) -> int:
        """Choose units at and below ``module``; return how many parameters under it are now inside a unit."""
        numel = sum(p.numel() for p in module.parameters())
        if not decide(module, True, numel):
            return 0
        inside = sum(visit(child) for child in module.children())
        if module is not root and not is_container_without_forward(module) and decide(module, False, numel - inside):
            chosen.append(module)
            return numel
        return inside

    visit(root)
    return chosen


def no_split_classes(module: torch.nn.Module) -> frozenset[str]:
    """The class names ``module`` declares in ``_no_split_modules`` (Hugging Face ``PreTrainedModel``), or none."""
    declared = getattr(module, "_no_split_modules", None)
    if not declared or isinstance(declared, str):
        return frozenset({declared}) if isinstance(declared, str) and declared else frozenset()
    return frozenset(str(name) for name in declared)


def default_units(root: torch.nn.Module) -> list[torch.nn.Module]:
    """The default FSDP2 units under ``root`` (the rule is in the module docstring): declared no-split classes,
    else repeated same-class children of ``ModuleList`` / ``Sequential``; never a container without ``forward``;
    tied parameters kept in one unit. Innermost first, ``root`` not included."""
    chosen: dict[int, torch.nn.Module] = {}

    def visit(module: torch.nn.Module, no_split: frozenset[str]) -> None:
        no_split = no_split | no_split_classes(module)
        children = list(module.children())
        counts = Counter(type(child) for child in children)
        block_container = isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential))
        for child in children:
            unit_ok = _has_params(child) and not is_container_without_forward(child) and child is not root
            if no_split:
                if unit_ok and type(child).__name__ in no_split:
                    chosen[id(child)] = child
                visit(child, no_split)  # no-split classes may nest
            elif unit_ok and block_container and counts[type(child)] > 1:
                chosen[id(child)] = child  # a block: not split further
            else:
                visit(child, no_split)

    visit(root, frozenset())
    _drop_units_splitting_ties(root, chosen)
    return [m for m in _post_order(root) if id(m) in chosen]


def _post_order(root: torch.nn.Module) -> list[torch.nn.Module]:
    order: list[torch.nn.Module] = []
    seen: set[int] = set()

    def visit(module: torch.nn.Module) -> None:
        if id(module) in seen:
            return
        seen.add(id(module))
        for child in module.children():
            visit(child)
        order.append(module)

    visit(root)
    return order


def tied_parameters(root: torch.nn.Module) -> dict[int, list[str]]:
    """``id(parameter) -> qualified names`` of every parameter ``root`` holds under more than one name (tied
    weights: ``lm_head.weight`` is ``embed_tokens.weight``; a module registered twice)."""
    names: dict[int, list[str]] = {}
    for module_name, module in root.named_modules(remove_duplicate=False):
        for param_name, param in module.named_parameters(recurse=False, remove_duplicate=False):
            names.setdefault(id(param), []).append(f"{module_name}.{param_name}" if module_name else param_name)
    return {key: sorted(set(value)) for key, value in names.items() if len(set(value)) > 1}


def _module_paths(root: torch.nn.Module) -> dict[int, list[str]]:
    paths: dict[int, list[str]] = {}
    for name, module in root.named_modules(remove_duplicate=False):
        paths.setdefault(id(module), []).append(name)
    return paths


def _inside(name: str, prefix: str) -> bool:
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


def _drop_units_splitting_ties(root: torch.nn.Module, chosen: dict[int, torch.nn.Module]) -> None:
    """Remove from ``chosen`` every unit holding some, not all, names of a tied parameter, until none does."""
    ties = list(tied_parameters(root).values())
    if not ties:
        return
    paths = _module_paths(root)
    changed = True
    while changed:
        changed = False
        for key in list(chosen):
            prefixes = paths.get(key, [])
            for names in ties:
                inside = [any(_inside(n, p) for p in prefixes) for n in names]
                if any(inside) and not all(inside):
                    del chosen[key]
                    changed = True
                    break


def units_for_lightning(root: torch.nn.Module, policy: WrapPolicy = None) -> list[torch.nn.Module]:
    """The units a Lightning Trainer shards ``root`` (the LightningModule) into before ``root`` itself:
    [`units_to_shard`][precision_fsdp.sharding.units.units_to_shard], plus, where needed, direct children of ``root``.

    FSDP2 gathers a unit's parameters in the pre-forward hook of the unit's module. Lightning calls
    ``training_step``, not the LightningModule's ``forward``, so parameters left to the root unit must be gathered
    some other way:

    * an ``auto_wrap_policy`` set, and a LightningModule that defines no ``forward``: nothing is added, so the units
      are exactly the policy's plus the root, as FSDP1's wrap policy makes them; the root unit's parameters are
      gathered by its step methods, made FSDP2 forward methods
      ([`gather_root_in_steps`][precision_fsdp.sharding.root_unit.gather_root_in_steps]);
    * otherwise (a LightningModule with a ``forward`` of its own, whose steps may call its children directly, or
      the default policy): each direct child of ``root`` that holds parameters no chosen unit holds becomes a unit
      of its own (a container without ``forward`` is looked into instead), so that it gathers them when the step
      calls it (a sibling ``head`` next to a policy-chosen ``body`` would otherwise fail with "got mixed
      torch.Tensor and DTensor"); under the default policy (``None``) so does each direct child that contains chosen
      units, so that it is the FSDP2 root of its part (one lazy initialisation, its blocks resharded after their
      forward) -- a Hugging Face model held as ``self.net`` is then the unit of its embeddings, final norm and head.

    Raises:
        TypeError, ValueError: ``policy`` is none of the accepted kinds (the message lists them).
        TiedAcrossUnitsError: two such direct children share a parameter (tied weights held directly by the
            LightningModule); the message names them and what works.
    """
    units = units_to_shard(root, policy)
    if policy is not None and is_lightning_module(root) and not defined_by_user(type(root), "forward"):
        return units
    in_unit = {id(m) for unit in units for m in unit.modules()}
    covered = {id(p) for unit in units for p in unit.parameters()}
    extra: list[torch.nn.Module] = []

    def consider(module: torch.nn.Module) -> None:
        if id(module) in in_unit and module in units:
            return
        loose = any(id(p) not in covered for p in module.parameters())
        holds_units = policy is None and any(id(m) in in_unit for m in module.modules())
        if not (loose or holds_units):
            return
        if is_container_without_forward(module):
            for child in module.children():
                consider(child)
            return
        extra.append(module)

    for child in root.children():
        consider(child)
    _refuse_ties_across(root, extra)
    return units + extra  # after any unit inside them: fully_shard goes innermost first


def separate_roots(units: list[torch.nn.Module]) -> set[int]:
    """``id`` of each unit that is inside no other unit, when there are several such units, else empty.

    Lightning never runs the LightningModule's ``forward``, so each of these units is the first FSDP2 module to run
    forward in its part of the model and becomes an FSDP2 root of its own. FSDP2 does not reshard a root after its
    forward (``reshard_after_forward=None``), so every one of them would stay all-gathered from its forward to its
    backward: all blocks at once. ``FSDP2Strategy`` shards these with ``reshard_after_forward=True``. A single such
    unit (a Hugging Face model held as ``self.net``) is left to FSDP2's default."""
    inside = {id(m) for unit in units for m in unit.modules() if m is not unit}
    outer = {id(unit) for unit in units if id(unit) not in inside}
    return outer if len(outer) > 1 else set()


def _refuse_ties_across(root: torch.nn.Module, tops: list[torch.nn.Module]) -> None:
    paths = _module_paths(root)
    for names in tied_parameters(root).values():
        holders = sorted(
            {paths[id(top)][0] for top in tops for n in names if any(_inside(n, p) for p in paths[id(top)])}
        )
        if len(holders) > 1:
            raise TiedAcrossUnitsError(
                f"FSDP2Strategy cannot shard {', '.join(repr(h) for h in holders)} of {type(root).__name__} as "
                f"separate units: they share a parameter ({' = '.join(names)}, tied weights), and FSDP2 needs a tied "
                "parameter in one unit. The only module holding all of them is the LightningModule itself, whose "
                "forward Lightning does not call (it calls training_step), so FSDP2 would never all-gather it. Hold "
                "the tied modules in one submodule that training_step calls (e.g. self.model = MyTransformer(...)), "
                "or shard in configure_model."
            )


def describe_units(root: torch.nn.Module, units: list[torch.nn.Module], policy: WrapPolicy = None) -> str:
    """One line naming the FSDP2 units chosen: class names with counts, in the order they are sharded, e.g.
    ``"LlamaDecoderLayer x2, LlamaForCausalLM x1, then the root (MyModule)"``."""
    counts = Counter(class_name(unit) for unit in units)
    if policy is None:
        rule = "default policy"
        declared = sorted({name for m in root.modules() for name in no_split_classes(m)})
        if declared:
            rule += f" (_no_split_modules: {', '.join(declared)})"
    else:
        rule = f"auto_wrap_policy={policy!r}"
    listed = ", ".join(f"{name} x{count}" for name, count in counts.items()) or "none"
    return f"{len(units) + 1} FSDP2 units by the {rule}: {listed}, then the root ({class_name(root)})"


def count_units(model: torch.nn.Module) -> int:
    """How many FSDP2 units (``fully_shard`` modules) ``model`` holds, itself included."""
    return sum(1 for m in model.modules() if isinstance(m, FSDPModule))


def defined_by_user(cls: type, name: str) -> bool:
    """Whether ``cls``'s attribute ``name`` comes from a class outside Lightning and torch (the user's own code)."""
    owner = next((c for c in cls.__mro__ if name in vars(c)), None)
    return owner is not None and not owner.__module__.startswith(("lightning.", "pytorch_lightning.", "torch."))


def is_lightning_module(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a Lightning ``LightningModule`` (``lightning`` or ``pytorch_lightning``)."""
    return any(
        c.__name__ == "LightningModule" and c.__module__.startswith(("lightning.", "pytorch_lightning."))
        for c in type(module).__mro__
    )


def root_held_parameters(module: torch.nn.Module) -> list[str]:
    """Names of the parameters of the FSDP2 unit ``module`` that no FSDP2 unit inside it holds (its own unit's
    parameters, gathered only when ``module`` itself is called); empty when ``module`` is not an FSDP2 unit."""
    if not isinstance(module, FSDPModule):
        return []
    inner = {
        id(p) for sub in module.modules() if sub is not module and isinstance(sub, FSDPModule) for p in sub.parameters()
    }
    return [name for name, p in module.named_parameters() if id(p) not in inner]


def nested_units(unit: torch.nn.Module) -> list[torch.nn.Module]:
    """The FSDP2 units under ``unit`` (itself a unit, just sharded) that run inside another unit's forward: every
    unit under it, except the outermost ones when ``unit`` is a LightningModule whose own unit never runs forward
    around them. Lightning never calls the LightningModule (it calls ``training_step``, which calls its children),
    so when it defines no ``forward`` and its unit holds no parameters of its own (its step methods are then not
    made FSDP2 forward methods, see [`precision_fsdp.sharding.root_unit`][]), each outermost unit under it runs as an
    FSDP2 root of its own."""
    found: list[torch.nn.Module] = []
    alone = is_lightning_module(unit) and not defined_by_user(type(unit), "forward") and not root_held_parameters(unit)

    def visit(module: torch.nn.Module, outermost: bool) -> None:
        for child in module.children():
            if isinstance(child, FSDPModule):
                if not (outermost and alone):
                    found.append(child)
                visit(child, False)
            else:
                visit(child, outermost)

    visit(unit, True)
    return found


NESTED_UNIT_MARK = "_precision_fsdp_nested_unit"
"""Set on a unit the plugin found inside another unit (see ``FSDPPrecisionImpl.fully_shard``), so that a precision
switch gives it the nested policy again ([`precision_fsdp.policy.DtypePlan.fsdp2_policy`][])."""


def is_nested_unit(module: torch.nn.Module) -> bool:
    """Whether the plugin marked ``module`` as a unit that runs inside another unit's forward."""
    return bool(getattr(module, NESTED_UNIT_MARK, False))


def class_name(module: torch.nn.Module) -> str:
    """The module's own class name, also once ``fully_shard`` swapped its class for ``FSDP<name>``."""
    cls: type = type(module)
    if isinstance(module, FSDPModule) and cls.__name__.startswith("FSDP"):
        cls = next((c for c in cls.__mro__[1:] if not issubclass(c, FSDPModule)), cls)
    return cls.__name__
