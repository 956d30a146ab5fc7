"""The FSDP plugin's side of precision schedules ([`precision_base.PrecisionSchedule`][]): changing an FSDP2 run's
precision between optimizer steps.

The plugin's two hooks the schedule calls are
[`FSDPPrecisionImpl`][precision_fsdp.implementation.FSDPPrecisionImpl]'s; this module holds the plain functions they
call, which take the plugin's dtype plan, precision and scaler as arguments. The schedule asks
[`precision_switch_problem`][precision_fsdp.implementation.FSDPPrecisionImpl.precision_switch_problem]
([`problem`][precision_fsdp.schedule.problem]) first (at ``setup``, before any step), so a switch that cannot work
fails before training starts;
[`switch_precision`][precision_fsdp.implementation.FSDPPrecisionImpl.switch_precision] then sets the plugin's own
state (dtype plan from [`next_plan`][precision_fsdp.schedule.next_plan], feature, scaler from
[`switched_scaler`][precision_fsdp.schedule.switched_scaler], step watch) and calls
[`update_policies`][precision_fsdp.schedule.update_policies]. What a switch changes, and what it keeps:

* kept: the sharded parameters (float32 DTensors under ``32-true``, ``*-mixed`` and ``fp8-*``: the master weights),
  the optimizer and its state, the model's FSDP2 units and every ``keep_fp32`` unit (already float32);
* changed: the plugin's precision, its ``dtypes()`` table and every dtype it hands out (autocast, inputs, init
  contexts), the ``MixedPrecisionPolicy`` (``param_dtype`` / ``reduce_dtype``) of every other FSDP2 unit, through
  ``_compat.set_fsdp2_policy``, and the loss scaler: created for ``16-mixed`` (fresh, at its ``init_scale``),
  dropped for the others;

Refused ([`problem`][precision_fsdp.schedule.problem] says why): FSDP1 (its ``MixedPrecision`` is fixed when
``FullyShardedDataParallel`` wraps
the model), a change of the parameter storage dtype (``*-true`` on one side: the sharded parameters and the
optimizer state would have to be cast and the float32 master copy of a mixed precision would be lost), switching
*to* an fp8 precision mid-run (torchao converts Linear layers before sharding), and ``16-mixed`` with
``check_finite_grads=True``. Switching *away* from fp8 (``fp8-*`` / ``mxfp8-*`` -> ``bf16-mixed``, ``16-mixed`` or
``32-true``) also makes torchao's converted layers plain again, in place ([`precision_fsdp.float8.switch`][]).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional, Protocol

import torch

from precision_base.kit.keep_fp32 import is_kept
from precision_fsdp import _compat
from precision_fsdp.float8 import switch as float8_switch
from precision_fsdp.float8.config import is_fp8
from precision_fsdp.float8.recipes import EXTRA_PRECISIONS
from precision_fsdp.policy import DtypePlan, dtype_name
from precision_fsdp.scaler import make_scaler
from precision_fsdp.sharding.units import FSDPVersion, is_nested_unit


class SwitchingPlugin(Protocol):
    """What [`problem`][precision_fsdp.schedule.problem] reads of the plugin (``FSDPPrecisionImpl`` has it; this module
    never imports the implementation, which imports it)."""

    @property
    def precision(self) -> Any:
        """The plugin's canonical precision now."""

    @property
    def fsdp_version(self) -> Optional[int]:
        """1 or 2 once the plugin has seen the model, else ``None``."""

    @property
    def lightning(self) -> Any:
        """The Lightning namespace's root module (``plugin.lightning.strategies.FSDPStrategy``)."""


def _base(precision: str) -> str:
    return dict(EXTRA_PRECISIONS).get(precision, precision)


def problem(
    plugin: SwitchingPlugin,
    precision: str,
    strategy: Any = None,
    current: Optional[str] = None,
    check_finite_grads: bool = False,
) -> Optional[str]:
    """Why ``plugin`` cannot switch from ``current`` to ``precision`` during a run; ``None`` when it can.

    Args:
        plugin: the plugin in use.
        precision: the canonical target precision (one the plugin class offers).
        strategy: the Lightning strategy running the plugin, when known (FSDP1 is refused).
        current: the precision switched from (default: the plugin's precision now).
        check_finite_grads: the plugin's ``check_finite_grads`` option.
    """
    now = str(plugin.precision) if current is None else current
    fsdp1 = plugin.fsdp_version == 1 or isinstance(strategy, plugin.lightning.strategies.FSDPStrategy)
    if fsdp1:
        return (
            "FSDP1 (FSDPStrategy) fixes its MixedPrecision when FullyShardedDataParallel wraps the model; precision "
            "schedules need FSDP2: strategy='auto' (precision_fsdp.FSDP2Strategy) or Lightning's ModelParallelStrategy"
        )
    before, after = DtypePlan.for_precision(_base(now)), DtypePlan.for_precision(_base(precision))
    if before.storage != after.storage:
        same = [
            p for p in ("32-true", "16-mixed", "bf16-mixed") if DtypePlan.for_precision(p).storage == before.storage
        ]
        return (
            f"{now!r} stores the sharded parameters and the optimizer state in {dtype_name(before.storage)}, "
            f"{precision!r} in {dtype_name(after.storage)}: a switch would recast the parameters and the optimizer "
            "state (and lose the float32 master weights of a mixed precision). Schedule precisions that store "
            f"{dtype_name(before.storage)} parameters: " + ", ".join(same or [now])
        )
    if is_fp8(now) and precision != now:
        away = float8_switch.problem(now, precision)
        if away is not None:
            return away
    if is_fp8(precision) and precision != now:
        return (
            f"switching to {precision!r} during a run is not supported: torchao converts the Linear layers to float8 "
            "before FSDP2 shards them; train a run under it from the start instead"
        )
    if precision == "16-mixed" and check_finite_grads:
        return (
            "check_finite_grads=True is for precisions without loss scaling, and '16-mixed' has a loss scaler that "
            "skips steps with inf/NaN gradients; drop check_finite_grads or leave 16-mixed out of the schedule"
        )
    return None


def next_plan(plan: DtypePlan, current: str, precision: str) -> DtypePlan:
    """The [`DtypePlan`][precision_fsdp.policy.DtypePlan] of ``precision``, keeping a ``reduce_dtype`` the user chose
    (one that differs from ``current``'s default)."""
    chosen = plan.reduce if plan.reduce != DtypePlan.for_precision(_base(current)).reduce else None
    return DtypePlan.for_precision(_base(precision), chosen)


def update_policies(model: torch.nn.Module, plan: DtypePlan) -> int:
    """Give every FSDP2 unit of ``model`` except the ``keep_fp32`` ones (float32 policies of their own) ``plan``'s
    policy (the nested one to the units the plugin marked nested, see
    [`DtypePlan.fsdp2_policy`][precision_fsdp.policy.DtypePlan.fsdp2_policy]); return how many units changed.
    Call it between optimizer steps. A model that torchao converted to float8 is first made plain again
    ([`precision_fsdp.float8.switch.restore_linears`][]; the target is never fp8: switches to fp8 are refused)."""
    float8_switch.restore_linears(model)
    changed = 0
    for module in model.modules():
        if isinstance(module, _compat.FSDPModule) and not is_kept(module):
            _compat.set_fsdp2_policy(module, plan.fsdp2_policy(nested=is_nested_unit(module)))
            changed += 1
    return changed


def switched_scaler(
    precision: str, scaler: Any, version: Optional[FSDPVersion], device_type: str, options: Mapping[str, Any]
) -> tuple[Any, bool]:
    """The loss scaler after a switch to ``precision``, and whether the plugin sets it (as its own, not the
    user's): ``None`` for a precision other than ``16-mixed``; under ``16-mixed``, ``scaler`` when there is one (kept
    as it is), else a fresh one at its ``init_scale`` for FSDP ``version`` (default 2) on ``device_type``, built from
    ``options`` (``resume.changes`` says the same for a resume)."""
    if precision != "16-mixed":
        return None, True
    if scaler is None:
        return make_scaler(version or 2, device_type, options), True
    return scaler, False


__all__ = ["SwitchingPlugin", "next_plan", "problem", "switched_scaler", "update_policies"]
