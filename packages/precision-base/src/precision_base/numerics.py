"""Setup-time numerics checks: optimizer hyperparameters that round to zero in the parameters' dtype.

Under ``16-true`` the parameters (and so the optimizer's arithmetic) are float16, whose smallest positive value is
about 6e-8 and smallest normal value 6.1e-5. Adam's default ``eps=1e-8`` is 0 there: the update divides by
``sqrt(v) + 0`` and goes inf/NaN as soon as a second moment is 0. The same holds for any small float
hyperparameter (a tiny ``lr`` or ``weight_decay``). bfloat16 has float32's range, so these values survive there.

[`underflowing_hyperparameters`][precision_base.numerics.underflowing_hyperparameters] finds such values;
[`underflow_message`][precision_base.numerics.underflow_message] says which group, which value
and what works instead. Plugins call them when the strategy connects the optimizers (precision-fsdp does).
Imports torch on first use only.
"""

from __future__ import annotations

import math
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
    import torch

    found: list[Underflow] = []
    for optimizer in optimizers:
        for index, group in enumerate(getattr(optimizer, "param_groups", ())):
            dtype = _group_dtype(group)
            if dtype is None:
                continue
            tiny = torch.finfo(dtype).tiny
            suggestion = 10.0 ** math.ceil(math.log10(tiny))
            for name, value in group.items():
                if name == "params" or isinstance(value, bool) or not isinstance(value, float) or value == 0.0:
                    continue
                if not math.isfinite(value) or torch.tensor(value, dtype=dtype).item() != 0.0:
                    continue
                found.append(
                    Underflow(type(optimizer).__name__, index, name, value, str(dtype).split(".")[-1], suggestion)
                )
    return found


def underflow_message(spec: str, underflow: Underflow) -> str:
    """The warning for one [`Underflow`][precision_base.numerics.Underflow] under the plugin named ``spec``."""
    u = underflow
    return (
        f"{spec}: {u.optimizer} parameter group {u.group} has {u.name}={u.value:g}, which is 0 in {u.dtype} (the "
        f"dtype of that group's parameters), so the optimizer computes with {u.name}=0"
        + (" and its update divides by zero once a second moment is 0 (inf/NaN weights)" if u.name == "eps" else "")
        + f". Use {u.name}={u.suggestion:.0e} or larger (the smallest normal {u.dtype} is "
        f"{_tiny(u.dtype):.2g}), or a precision that keeps float32 parameters (e.g. '16-mixed') or bf16."
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


__all__ = ["Underflow", "underflow_message", "underflowing_hyperparameters", "warn_underflowing_hyperparameters"]
