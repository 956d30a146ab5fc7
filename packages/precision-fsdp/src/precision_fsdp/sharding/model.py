"""How the FSDP plugin shards a model with FSDP2 and keeps modules in float32: plain functions that
[`FSDPPrecisionImpl`][precision_fsdp.implementation.FSDPPrecisionImpl] calls with its dtype plan and ``keep_fp32``
rules.

The plugin's own methods a ``configure_model`` (or [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy]) calls,
[`fully_shard`][precision_fsdp.implementation.FSDPPrecisionImpl.fully_shard] (which ends in
[`shard`][precision_fsdp.sharding.model.shard]),
[`prepare_for_sharding`][precision_fsdp.implementation.FSDPPrecisionImpl.prepare_for_sharding],
[`expect_model`][precision_fsdp.implementation.FSDPPrecisionImpl.expect_model] and
[`mark_keep_fp32`][precision_fsdp.implementation.FSDPPrecisionImpl.mark_keep_fp32], are the plugin's; here are the
sharding itself, the ``keep_fp32`` part of ``convert_module``
([`convert_kept`][precision_fsdp.sharding.model.convert_kept]) and the ``*-true`` warning
([`true_precision_warning`][precision_fsdp.sharding.model.true_precision_warning]). None of them holds state: the
plugin passes what they need and stores what they return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Optional

import torch

from precision_base import PrecisionPluginWarning
from precision_base.kit.keep_fp32 import KeepFP32, install_fp32_forward, is_kept
from precision_fsdp import _compat
from precision_fsdp.errors import KeepFP32Error
from precision_fsdp.keep_fp32 import cast_except_kept_
from precision_fsdp.policy import DtypePlan, dtype_name
from precision_fsdp.sharding.units import NESTED_UNIT_MARK, fsdp_version_of, is_nested_unit, nested_units

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

KEEP_FP32_FSDP1 = (
    "keep_fp32 needs FSDP2 (fully_shard): FSDP1 (FSDPStrategy / strategy='fsdp') applies one MixedPrecision per "
    "wrapped unit and has no public per-module float32 override. Use strategy='auto' (precision_fsdp.FSDP2Strategy) "
    "or Lightning's ModelParallelStrategy, or drop keep_fp32."
)
"""The refusal of ``keep_fp32`` under FSDP1."""

LIGHTNING_TRUE_WARNING = "FSDP with `{precision}` enables computation in lower precision."
"""First sentence of Lightning's ``*-true`` warning, kept verbatim. Lightning's second sentence ("FSDP will always
retain a full-precision copy of the model parameters for sharding") is false here and in Lightning: the module is
cast to fp16/bf16 before FSDP shards it, so the sharded parameters are fp16/bf16. Ours says what is true instead."""


def cast_unsharded_(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """Cast, in place, the floating parameters and buffers of ``module`` that FSDP2 has not sharded yet."""
    for sub in module.modules():
        for param in sub.parameters(recurse=False):
            if not isinstance(param, _compat.DTensor) and param.is_floating_point() and param.dtype != dtype:
                param.data = param.data.to(dtype)
        for name, buf in list(sub.named_buffers(recurse=False)):
            if buf.is_floating_point() and buf.dtype != dtype:
                setattr(sub, name, buf.to(dtype))  # assigning to a buffer's name keeps it a (non-)persistent buffer


def true_precision_warning(plan: DtypePlan, precision: str) -> Optional[str]:
    """``*-true`` (not ``32-true``): Lightning's first sentence, then what is true here; ``None`` otherwise."""
    if plan.mixed or precision == "32-true":
        return None
    low = dtype_name(plan.storage)
    return (
        LIGHTNING_TRUE_WARNING.format(precision=precision)
        + f" The sharded parameters, gradients and optimizer state are {low} as well (precision-fsdp keeps no "
        "full-precision copy); use the matching '-mixed' precision to keep fp32 parameters."
    )


def refuse_mp_policy(kwargs: Mapping[str, Any]) -> None:
    """Refuse an ``mp_policy`` among the keyword arguments of the plugin's ``fully_shard``: the dtypes come from the
    plugin and nowhere else.

    Raises:
        TypeError: ``kwargs`` holds ``mp_policy``.
    """
    if "mp_policy" in kwargs:
        raise TypeError(
            "FSDPPrecision.fully_shard() sets mp_policy from the plugin's precision; do not pass one (choose "
            "the precision and reduce_dtype on the plugin instead)"
        )


def shard(
    module: torch.nn.Module,
    mesh: Optional[DeviceMesh],
    kwargs: Mapping[str, Any],
    plan: DtypePlan,
    keep: KeepFP32,
    device_type: Callable[[], str],
) -> Any:
    """Shard ``module`` with FSDP2 in ``plan``'s dtypes (the end of the plugin's ``fully_shard``, once the model is
    prepared): each ``keep_fp32`` module of ``keep`` inside it not sharded yet first becomes its own float32 unit
    (cast to float32, float32 forward hooks on ``device_type()``); then the parameters and buffers not yet sharded are
    cast to the storage dtype and ``module`` is sharded with ``plan``'s policy, its units inside marked nested
    ([`stop_nested_input_casts`][precision_fsdp.sharding.model.stop_nested_input_casts]). ``kwargs`` go to torch's
    ``fully_shard``. Returns the sharded module (``module`` itself when it is a kept module)."""
    if keep.active:
        for _name, kept, entry in keep.kept(module, skip=lambda m: isinstance(m, _compat.FSDPModule)):
            if isinstance(kept, _compat.FSDPModule):
                continue
            keep_in_fp32(kept, entry, plan, device_type)
            fp32 = _compat.MixedPrecisionPolicy(
                param_dtype=torch.float32, reduce_dtype=torch.float32, cast_forward_inputs=True
            )
            cast_unsharded_(kept, torch.float32)
            _compat.fully_shard(kept, mesh=mesh, mp_policy=fp32, **kwargs)
            if kept is module:
                return module
    cast_unsharded_(module, plan.storage)
    sharded = _compat.fully_shard(module, mesh=mesh, mp_policy=plan.fsdp2_policy(), **kwargs)
    stop_nested_input_casts(module, plan)
    return sharded


def stop_nested_input_casts(unit: torch.nn.Module, plan: DtypePlan) -> None:
    """The plugin's units that now run inside ``unit``'s forward
    ([`nested_units`][precision_fsdp.sharding.units.nested_units]) are marked nested and, under ``*-mixed``, stop
    casting their forward inputs ([`DtypePlan.fsdp2_policy`][precision_fsdp.policy.DtypePlan.fsdp2_policy]).
    Units sharded with another policy than ``plan``'s (``keep_fp32``'s float32 units, a user's own ``fully_shard``)
    are left as they are."""
    ours = plan.fsdp2_policy()
    for inner in nested_units(unit):
        if is_kept(inner) or is_nested_unit(inner) or _compat.fsdp2_policy(inner) != ours:
            continue
        setattr(inner, NESTED_UNIT_MARK, True)
        nested = plan.fsdp2_policy(nested=True)
        if nested != ours:
            _compat.set_fsdp2_policy(inner, nested)


def kept_modules(keep: KeepFP32, root: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The ``keep_fp32`` modules of ``root`` (lazily: walked only when a feature asks; keep_fp32 wins over fp8)."""
    for _name, module, _entry in keep.kept(root):
        yield module


def keep_in_fp32(module: torch.nn.Module, entry: str, plan: DtypePlan, device_type: Callable[[], str]) -> None:
    """Make ``module`` (kept by ``keep_fp32`` ``entry``) compute in float32 on ``device_type()``; under ``*-true``
    its outputs go back to ``plan``'s compute dtype."""
    out = None if plan.mixed else plan.compute
    install_fp32_forward(module, entry, device_type, out)


def convert_kept(
    module: torch.nn.Module,
    plan: DtypePlan,
    keep: KeepFP32,
    device_type: Callable[[], str],
    *,
    spec: str,
    precision: str,
    door: Optional[str],
    warn: Callable[..., Any],
) -> Optional[torch.nn.Module]:
    """``convert_module``'s ``keep_fp32`` part: the converted module, or ``None`` when the rest of
    ``convert_module`` decides (no ``keep_fp32`` entry, or only default rules under ``*-mixed``).

    Args:
        module: the module ``convert_module`` was given.
        plan: the plugin's dtype plan.
        keep: the plugin's ``keep_fp32`` rules.
        device_type: the device the kept modules' float32 forward runs on (asked at each forward).
        spec: the plugin's spec (``"fsdp:bf16-true"``), for the messages.
        precision: the plugin's precision, for the messages.
        door: ``"Fabric"``, ``"Trainer"`` or ``None``: the door the plugin was built for, so the messages name the
            calls a user of that door writes.
        warn: Lightning's ``rank_zero_warn`` of the plugin's namespace.

    Raises:
        KeepFP32Error: the model is FSDP2-sharded but a kept module with parameters was sharded without the plugin's
            float32 policy, or (``*-true``) an FSDP2 unit sharded without the plugin holds a kept module and its own
            parameters in another dtype than the precision's.
    """
    defaults_only = not keep and keep.active and fsdp_version_of(module) == 2  # the default rules are FSDP2's only
    if keep or (defaults_only and not plan.mixed):
        return _convert_with_kept(module, plan, keep, device_type, spec=spec, precision=precision, door=door, warn=warn)
    if defaults_only:
        _check_default_kept(module, keep, spec, door, warn)
    return None


def _convert_with_kept(
    module: torch.nn.Module,
    plan: DtypePlan,
    keep: KeepFP32,
    device_type: Callable[[], str],
    *,
    spec: str,
    precision: str,
    door: Optional[str],
    warn: Callable[..., Any],
) -> torch.nn.Module:
    """``convert_module`` with ``keep_fp32``: hooks on every kept module, the rest cast to the storage dtype.

    Under ``*-true`` and ``32-true``, FSDP2 units sharded without the plugin (torch's own ``fully_shard`` in a
    ``configure_model``) hold sharded parameters in the dtype they had (float32): each unit that holds no kept
    parameter is cast as a whole (``unit.to(dtype=...)``, which re-registers its shards), as ``convert_module``
    casts a model without kept modules. A module that a default rule would keep but that was sharded inside
    another unit (warned about) computes as that unit does, so it is cast with it.

    Raises:
        KeepFP32Error: the model is FSDP2-sharded but a kept module with parameters was sharded inside another
            unit (it was not reached by
            [`fully_shard`][precision_fsdp.implementation.FSDPPrecisionImpl.fully_shard] before its parent), so it
            cannot have its own policy; or (``*-true``) an FSDP2 unit sharded without the plugin holds a kept
            module and its own parameters in another dtype than the precision's: torch's public API casts a unit
            only with everything inside it, the kept module included.
    """
    found = keep.kept(module)
    sharded = fsdp_version_of(module) == 2
    kept_list: list[torch.nn.Module] = []
    for name, kept, entry in found:
        has_params = any(True for _ in kept.parameters())
        if sharded and has_params and not is_kept(kept) and keep.is_default(entry):
            _warn_default_not_kept(name, entry, spec, door, warn)
            continue
        if sharded and has_params and not is_kept(kept):
            plugin, model, where = _sharding_calls(door)
            raise KeepFP32Error(
                f"keep_fp32 entry {entry} matches module {name!r}, but FSDP2 sharded it without the plugin's "
                "float32 policy (inside another unit, or on its own with another policy), so it cannot keep "
                f"float32 parameters. Shard through {plugin}.fully_shard(...) and call "
                f"{plugin}.mark_keep_fp32({model}) first in {where}, or leave sharding to "
                "strategy='auto' (FSDP2Strategy)."
            )
        keep_in_fp32(kept, entry, plan, device_type)
        kept_list.append(kept)
    if sharded and not plan.mixed:
        _cast_units(module, kept_list, plan, spec, precision, door)
    cast_except_kept_(module, plan.storage, kept_list)
    return module


def _cast_units(
    root: torch.nn.Module, kept: list[torch.nn.Module], plan: DtypePlan, spec: str, precision: str, door: Optional[str]
) -> None:
    """Cast the sharded parameters of ``root``'s FSDP2 units to the storage dtype: each outermost unit that holds
    no kept parameter with ``unit.to(dtype=...)`` (FSDP2's ``_apply`` re-registers the shards); inside a unit that
    holds kept parameters, its nested units the same way.

    Raises:
        KeepFP32Error: a unit holding a kept module has its own floating parameters (not a nested unit's, not
            kept) in another dtype.
    """
    target = plan.storage
    kept_params = {id(p) for m in kept for p in m.parameters()}

    def visit(name: str, sub: torch.nn.Module) -> None:
        if isinstance(sub, _compat.FSDPModule):
            params = list(sub.parameters())
            if not any(id(p) in kept_params for p in params):
                if any(p.is_floating_point() and p.dtype != target for p in params):
                    sub.to(dtype=target)
                return
            _check_mixed_unit(name, sub, kept_params, target, spec, precision, door)
        for child_name, child in sub.named_children():
            visit(f"{name}.{child_name}" if name else child_name, child)

    visit("", root)


def _check_mixed_unit(
    name: str,
    unit: torch.nn.Module,
    kept_params: set[int],
    target: torch.dtype,
    spec: str,
    precision: str,
    door: Optional[str],
) -> None:
    """Refuse a unit holding kept parameters whose own parameters are not in the storage dtype ``target`` (see
    `_cast_units`)."""
    nested = {
        id(p) for m in unit.modules() if m is not unit and isinstance(m, _compat.FSDPModule) for p in m.parameters()
    }
    own = [
        param_name
        for param_name, p in unit.named_parameters()
        if id(p) not in nested and id(p) not in kept_params and p.is_floating_point() and p.dtype != target
    ]
    if not own:
        return
    plugin, model, where = _sharding_calls(door)
    low = dtype_name(target)
    dtype = dtype_name(dict(unit.named_parameters())[own[0]].dtype)
    shown = ", ".join(own[:3]) + (f" and {len(own) - 3} more" if len(own) > 3 else "")
    unit_named = f"FSDP2 unit {name!r}" if name else "the FSDP2 unit of the whole model"
    raise KeepFP32Error(
        f"{spec}: {unit_named} was sharded without the plugin, so its "
        f"parameters ({shown}) are still {dtype}, and it holds a module kept in float32: casting the unit to "
        f"{low} would cast the kept module too, so as sharded the run cannot be {precision}. Shard it "
        f"through {plugin}.fully_shard(...) (it casts before sharding and gives each kept module its own float32 "
        f"unit) after {plugin}.mark_keep_fp32({model}) in {where}, or leave sharding to strategy='auto' "
        "(FSDP2Strategy)."
    )


def _check_default_kept(
    module: torch.nn.Module, keep: KeepFP32, spec: str, door: Optional[str], warn: Callable[..., Any]
) -> None:
    """``*-mixed``: warn about each module a default rule keeps that FSDP2 sharded without the plugin."""
    for name, kept, entry in keep.kept(module):
        if not is_kept(kept) and any(True for _ in kept.parameters()):
            _warn_default_not_kept(name, entry, spec, door, warn)


def _warn_default_not_kept(name: str, entry: str, spec: str, door: Optional[str], warn: Callable[..., Any]) -> None:
    plugin, model, _where = _sharding_calls(door)
    warn(
        f"{spec}: module {name!r} ({entry}) would be kept in float32 by default, but FSDP2 sharded it "
        "without the plugin (inside another unit or with another policy), so it computes as that unit does. If "
        "its forward fails with 'expected scalar type BFloat16 but found Float' (or Half), shard through "
        f"{plugin}.fully_shard(...) after {plugin}.mark_keep_fp32({model}), or "
        "leave sharding to strategy='auto' (FSDP2Strategy).",
        category=PrecisionPluginWarning,
    )


def _sharding_calls(door: Optional[str]) -> tuple[str, str, str]:
    """How the messages about sharding name the user's calls at the plugin's ``door``: the plugin as the user's code
    reaches it, the whole model, and where sharding is written (``trainer.precision_plugin``, ``self``,
    ``configure_model`` at a Trainer; ``plugin``, ``model``, the ``parallelize_fn`` at Fabric)."""
    if door == "Fabric":
        return "plugin", "model", "the parallelize_fn"
    return "trainer.precision_plugin", "self", "configure_model"


__all__ = [
    "KEEP_FP32_FSDP1",
    "LIGHTNING_TRUE_WARNING",
    "cast_unsharded_",
    "convert_kept",
    "keep_in_fp32",
    "kept_modules",
    "refuse_mp_policy",
    "shard",
    "stop_nested_input_casts",
    "true_precision_warning",
]
