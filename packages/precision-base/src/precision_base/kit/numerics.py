"""Setup-time numerics checks: optimizer hyperparameters that round to zero in the parameters' dtype.

Under ``16-true`` the parameters (and so the optimizer's arithmetic) are float16, whose smallest positive value is
about 6e-8 and smallest normal value 6.1e-5. Adam's default ``eps=1e-8`` is 0 there: the update divides by
``sqrt(v) + 0`` and goes inf/NaN as soon as a second moment is 0. The same holds for any small float
hyperparameter (a tiny ``lr`` or ``weight_decay``). bfloat16 has float32's range, so these values survive there.

[`underflowing_hyperparameters`][precision_base.kit.numerics.underflowing_hyperparameters] finds such values;
[`underflow_message`][precision_base.kit.numerics.underflow_message] says which group, which value
and what works instead. [`UnderflowCheck`][precision_base.kit.numerics.UnderflowCheck] gives that warning once per
parameter group of each optimizer, wherever a plugin calls it: when the strategy connects the optimizers, and before
each optimizer step (the one call every strategy and both doors make), so no strategy is left out and no run warns
twice.
Imports torch on first use only.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Underflow:
    """One optimizer hyperparameter that is 0 in its parameters' dtype.

    Attributes:
        optimizer: the optimizer's class name, e.g. ``"AdamW"``.
        group: index of the parameter group in ``optimizer.param_groups``.
        name: the hyperparameter's key in the group, e.g. ``"eps"``.
        value: its value (a Python float).
        dtype: name of the parameters' dtype, e.g. ``"float16"``.
        suggestion: the smallest power of ten that is a normal number of that dtype (``1e-04`` for float16).
    """

    optimizer: str
    group: int
    name: str
    value: float
    dtype: str
    suggestion: float


def _group_dtype(group: dict[str, Any]) -> Optional[Any]:
    for param in group.get("params", ()):
        if getattr(param, "is_floating_point", lambda: False)():
            return param.dtype
    return None


def underflowing_hyperparameters(optimizers: Iterable[Any]) -> list[Underflow]:
    """Every non-zero float hyperparameter of every parameter group that is 0 in the dtype of the group's params.

    The dtype of a group is that of its first floating-point parameter (a DTensor's dtype under FSDP2). Booleans,
    ints, zero values and groups without floating parameters are skipped.
    """
    found: list[Underflow] = []
    for optimizer in optimizers:
        for index, group in enumerate(getattr(optimizer, "param_groups", ())):
            found.extend(_group_underflows(optimizer, index, group))
    return found


def _group_underflows(optimizer: Any, index: int, group: dict[str, Any]) -> list[Underflow]:
    import torch

    dtype = _group_dtype(group)
    if dtype is None:
        return []
    tiny = torch.finfo(dtype).tiny
    suggestion = 10.0 ** math.ceil(math.log10(tiny))
    found: list[Underflow] = []
    for name, value in group.items():
        if name == "params" or isinstance(value, bool) or not isinstance(value, float) or value == 0.0:
            continue
        if not math.isfinite(value) or torch.tensor(value, dtype=dtype).item() != 0.0:
            continue
        found.append(Underflow(type(optimizer).__name__, index, name, value, str(dtype).split(".")[-1], suggestion))
    return found


def underflow_message(spec: str, underflow: Underflow) -> str:
    """The warning for one [`Underflow`][precision_base.kit.numerics.Underflow] under the plugin named ``spec``."""
    u = underflow
    return (
        f"{spec}: {u.optimizer} parameter group {u.group} has {u.name}={u.value:g}, which is 0 in {u.dtype} (the "
        f"dtype of that group's parameters), so the optimizer computes with {u.name}=0"
        + (" and its update divides by zero once a second moment is 0 (inf/NaN weights)" if u.name == "eps" else "")
        + f". Use {u.name}={u.suggestion:.0e} or larger (the smallest normal {u.dtype} is "
        f"{_tiny(u.dtype):.2g})"
        + (", or a precision that keeps float32 parameters (e.g. '16-mixed') or bf16." if u.dtype == "float16" else ".")
    )


def _tiny(dtype_name: str) -> float:
    import torch

    return float(torch.finfo(getattr(torch, dtype_name)).tiny)


def warn_underflowing_hyperparameters(optimizers: Iterable[Any], spec: str, warn: Any) -> list[Underflow]:
    """Call ``warn(message, category=PrecisionPluginWarning)`` once per underflowing hyperparameter; return them.

    ``warn`` is e.g. Lightning's ``rank_zero_warn`` (one warning per run, not per rank).
    """
    from precision_base.errors import PrecisionPluginWarning

    found = underflowing_hyperparameters(optimizers)
    for underflow in found:
        warn(underflow_message(spec, underflow), category=PrecisionPluginWarning)
    return found


class UnderflowCheck:
    """[`warn_underflowing_hyperparameters`][precision_base.kit.numerics.warn_underflowing_hyperparameters], once per
    parameter group of each optimizer: a plugin calls it wherever it sees the optimizers (``connect``, and before
    every optimizer step, which every strategy and both doors go through). A group is checked the first time it holds
    floating parameters, then never again, so a run warns once; the next run's optimizer (a new object) is checked
    anew.

    ``in_step=True`` is for an optimizer that holds its parameters only while it steps (DeepSpeed's ZeRO-3 fills its
    torch optimizer's groups one sub-group at a time inside the step): the groups still empty are then checked from a
    step pre-hook of the optimizer (``register_step_pre_hook``), removed once every group has been checked.

    Optimizers are remembered by weak reference (one that is not weak-referenceable, by ``id``), so the check keeps
    none alive; a pickled or copied check remembers none.
    """

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._done: weakref.WeakSet[Any] = weakref.WeakSet()
        self._checked: weakref.WeakKeyDictionary[Any, set[int]] = weakref.WeakKeyDictionary()
        self._hooks: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._by_id: dict[int, set[int]] = {}  # optimizers that are not weak-referenceable
        self._done_ids: set[int] = set()
        self._stale: list[Any] = []  # handles of hooks no longer needed, removed outside any step

    def __call__(self, optimizers: Iterable[Any], spec: str, warn: Any, *, in_step: bool = False) -> list[Underflow]:
        """Warn (through ``warn``, e.g. Lightning's ``rank_zero_warn``) about each group of ``optimizers`` that holds
        floating parameters and was not checked before; return what was found in those."""
        while self._stale:  # not from inside the hook: torch is iterating over the hooks then
            self._stale.pop().remove()
        return self._check(optimizers, spec, warn, in_step)

    def _check(self, optimizers: Iterable[Any], spec: str, warn: Any, in_step: bool) -> list[Underflow]:
        found: list[Underflow] = []
        for optimizer in optimizers:
            if self.complete(optimizer):
                continue
            groups = _param_groups(optimizer)
            checked = self._checked_groups(optimizer)
            for index, group in enumerate(groups):
                if index not in checked and _group_dtype(group) is not None:
                    checked.add(index)
                    found.extend(_group_underflows(optimizer, index, group))
            if len(checked) >= len(groups):
                self._set_complete(optimizer)
            elif in_step:
                self._check_in_step(optimizer, spec, warn)
        for underflow in found:
            warn(underflow_message(spec, underflow), category=_warning_category())
        return found

    def complete(self, optimizer: Any) -> bool:
        """Whether every parameter group of ``optimizer`` has been checked."""
        try:
            return optimizer in self._done
        except TypeError:
            return id(optimizer) in self._done_ids

    def _checked_groups(self, optimizer: Any) -> set[int]:
        try:
            return self._checked.setdefault(optimizer, set())
        except TypeError:
            return self._by_id.setdefault(id(optimizer), set())

    def _set_complete(self, optimizer: Any) -> None:
        try:
            self._done.add(optimizer)
            self._checked.pop(optimizer, None)
            handle = self._hooks.pop(optimizer, None)
        except TypeError:
            self._done_ids.add(id(optimizer))
            self._by_id.pop(id(optimizer), None)
            return
        if handle is not None:
            self._stale.append(handle)

    def _check_in_step(self, optimizer: Any, spec: str, warn: Any) -> None:
        register = getattr(optimizer, "register_step_pre_hook", None)
        try:
            if register is None or optimizer in self._hooks:
                return
        except TypeError:  # not weak-referenceable: checked outside its step only
            return
        check = weakref.ref(self)

        def before_step(stepping: Any, args: Any, kwargs: Any) -> None:
            alive = check()
            if alive is not None:
                alive._check((stepping,), spec, warn, in_step=False)

        self._hooks[optimizer] = register(before_step)

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._clear()


def _param_groups(optimizer: Any) -> list[dict[str, Any]]:
    """``optimizer.param_groups`` as a list of dicts; an object without them (a test double) has none."""
    try:
        return [group if isinstance(group, dict) else {} for group in getattr(optimizer, "param_groups", ())]
    except TypeError:
        return []


def _warning_category() -> type[Warning]:
    from precision_base.errors import PrecisionPluginWarning

    return PrecisionPluginWarning


__all__ = [
    "Underflow",
    "UnderflowCheck",
    "underflow_message",
    "underflowing_hyperparameters",
    "warn_underflowing_hyperparameters",
]
