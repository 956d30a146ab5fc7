"""The FSDP plugin's side of precision schedules ([`precision_base.PrecisionSchedule`][]):
[`SwitchMixin`][precision_fsdp.switching.SwitchMixin].

What a switch may change and what it keeps is [`precision_fsdp.switch`][]'s; this mixin asks it and sets the
plugin's own state (dtype plan, feature, scaler, step watch). A base of
[`FSDPPrecisionImpl`][precision_fsdp.implementation.FSDPPrecisionImpl], which sets the state declared here in its
``__init__``; it
overrides no Lightning method.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from precision_base import PrecisionPlugin
from precision_base.extra import ExtraPrecisionFeature
from precision_fsdp import _compat, switch
from precision_fsdp.float8 import Fp8Filter
from precision_fsdp.float8_feature import feature_for
from precision_fsdp.policy import DtypePlan
from precision_fsdp.scaler import make_scaler
from precision_fsdp.sharding import FSDPVersion
from precision_fsdp.steps import StepWatch


class SwitchMixin(PrecisionPlugin):
    """``precision_switch_problem`` and ``switch_precision``, the hooks [`precision_base.PrecisionSchedule`][]
    calls."""

    _plan: DtypePlan
    _feature: ExtraPrecisionFeature
    _fp8_options: tuple[bool, Fp8Filter]
    _steps: StepWatch
    _fsdp_version: Optional[FSDPVersion]
    _scaler_options: dict[str, Any]
    _user_scaler: bool
    scaler: Any
    device_type: str

    def _set_scaler(self, scaler: Any, *, user: bool) -> None: ...  # FSDPPrecisionImpl's

    fsdp_version: Any

    def precision_switch_problem(
        self, precision: str, strategy: Any = None, current: Optional[str] = None
    ) -> Optional[str]:
        """Why this plugin cannot switch from ``current`` (default: its precision now) to ``precision`` (canonical)
        during a run, or ``None`` when it can (FSDP2, the same parameter storage dtype, no fp8 as the target). See
        [`precision_fsdp.switch`][]."""
        return switch.problem(self, precision, strategy, current, self._steps.check_finite)

    def switch_precision(self, precision: str, model: Optional[torch.nn.Module] = None) -> None:
        """Run ``precision`` (canonical) from the next step on: the plugin's dtypes, its table and scaler, and the
        ``MixedPrecisionPolicy`` of every FSDP2 unit of ``model``; parameters and optimizer state are kept. Call it
        between optimizer steps ([`precision_base.PrecisionSchedule`][] does). See [`precision_fsdp.switch`][].

        Raises:
            ValueError: [`precision_switch_problem`][precision_fsdp.switching.SwitchMixin.precision_switch_problem]
                names a reason.
        """
        reason = switch.problem(self, precision, check_finite_grads=self._steps.check_finite)
        if reason is not None:
            raise ValueError(f"{self.spec} -> {self.backend}:{precision}: {reason}")
        if precision == self.precision:
            return
        self._plan = switch.next_plan(self._plan, str(self.precision), precision)
        self.precision = precision
        self._feature = feature_for(precision, *self._fp8_options)
        _compat.set_lightning_input_dtype(self, self._plan.inputs)
        if precision != "16-mixed":
            self._set_scaler(None, user=False)
        elif self.scaler is None:  # fresh, at its init_scale (resume.changes says the same for a resume)
            self._set_scaler(make_scaler(self._fsdp_version or 2, self.device_type, self._scaler_options), user=False)
        self._steps.follow(precision)
        if model is not None:
            switch.update_policies(model, self._plan)


__all__ = ["SwitchMixin"]
