"""The float8 feature (``fsdp:fp8-tensorwise``, ``fp8-rowwise``, ``mxfp8-rceil``) as one object with the plugin's hooks.

[`FSDPPrecisionImpl`][precision_fsdp.implementation.FSDPPrecisionImpl] holds the feature of its precision
([`feature_for`][precision_fsdp.float8.feature.feature_for]:
a [`Float8Feature`][precision_fsdp.float8.feature.Float8Feature], or [`precision_base.kit.extra.NO_FEATURE`][] for
Lightning's five precisions) and calls its
hooks ([`precision_base.kit.extra.ExtraPrecisionFeature`][]) at fixed points instead of branching on the precision:

* ``check_sharding``: FSDP1 is refused (``configure_strategy`` with an ``FSDPStrategy``, ``connect`` with an FSDP1
  model); ``check_machine``: torchao installed and FP8 hardware, or ``fp8_emulate=True``;
* ``prepare_model``: converts the chosen Linear layers of the first whole model seen (not ``keep_fp32`` modules);
* ``check_model``: refuses a model handed to Lightning with no Linear converted;
* ``describe``: the float8 facts of ``precision-plugins show``; ``table``: the dtype table of the base precision,
  as it is (the float8 matmul dtypes are in ``describe``).

The names come from [`precision_fsdp.float8.recipes.FLOAT8`][]; the torchao work is
[`precision_fsdp.float8.config`][]'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Optional

from precision_base.doors.identity import door_of
from precision_base.kit.extra import NO_FEATURE, ExtraPrecisionFeature, ExtraPrecisions
from precision_fsdp import _compat
from precision_fsdp.errors import Float8UnavailableError
from precision_fsdp.float8 import config
from precision_fsdp.float8.recipes import FLOAT8, RECIPES

FP8_FSDP1: Final[str] = (
    "{spec} needs FSDP2 (fully_shard): torchao's float8 training and float8 all-gather are built for FSDP2. Use "
    "strategy='auto' (precision_fsdp.FSDP2Strategy) or Lightning's ModelParallelStrategy."
)
"""The refusal of FSDP1 (``{spec}``: the plugin's name)."""

_TRAINER_CONVERTS: Final[str] = (
    "The plugin converts the first module it shards (with strategy='auto', the whole LightningModule, also when "
    "configure_model shards sub-modules through self.trainer.precision_plugin.fully_shard); when configure_model "
    "calls torch's fully_shard itself, or under another strategy (Lightning's ModelParallelStrategy), call "
    "self.trainer.precision_plugin.prepare_for_sharding(self) before any fully_shard."
)
"""Where the Trainer class converts, in the refusal of a model with no float8 Linear layer."""

_FABRIC_CONVERTS: Final[str] = (
    "The plugin converts the model handed to fabric.setup(model, ...) before the strategy shards it, unless a part "
    "of it is sharded already: when you shard before fabric.setup (torch's fully_shard or plugin.fully_shard), call "
    "plugin.prepare_for_sharding(model) before any fully_shard."
)
"""The same for the Fabric class (Fabric's ``setup`` converts the whole model before any ``parallelize_fn``)."""


class Float8Feature:
    """The float8 state and hooks of one plugin instance.

    Args:
        precision: one of [`precision_fsdp.float8.recipes.RECIPES`][].
        emulate: ``fp8_emulate``: torchao's emulation where the hardware has no FP8.
        chosen: ``fp8_filter``: which Linear layers to convert (``None``: the defaults).
    """

    declared: Optional[ExtraPrecisions] = FLOAT8

    def __init__(self, precision: str, emulate: bool, chosen: config.Fp8Filter) -> None:
        self.precision = precision
        self.emulate = bool(emulate)
        self.chosen = chosen
        self.seen = False
        self.converted: list[str] = []
        """Qualified names of the Linear layers converted to float8, once the model was seen."""

    def __repr__(self) -> str:
        return f"Float8Feature({self.precision!r}, emulate={self.emulate})"

    def check_sharding(self, plugin: Any, sharding: Any) -> None:
        """Raises: precision_fsdp.errors.Float8UnavailableError: ``sharding`` is FSDP1 (``1``)."""
        if sharding == 1:
            raise Float8UnavailableError(FP8_FSDP1.format(spec=plugin.spec))

    def check_machine(self, plugin: Any) -> None:
        """Raises: precision_fsdp.errors.Float8UnavailableError: torchao is missing, or no FP8 hardware and no
        ``fp8_emulate``."""
        config.check_can_run(plugin.spec, self.emulate)

    def prepare_model(self, plugin: Any, root: Any, *, exclude: Iterable[Any] = ()) -> None:
        """Convert ``root``'s chosen Linear layers to float8, once (the first module seen), unless a part of
        ``root`` is sharded already; modules in ``exclude`` (``keep_fp32``) are never converted."""
        if self.seen or any(isinstance(m, _compat.FSDPModule) for m in root.modules()):
            return
        self.seen = True
        config.check_can_run(plugin.spec, self.emulate)
        self.converted = config.convert(root, plugin.spec, self.precision, self.emulate, self.chosen, exclude=exclude)

    def check_model(self, plugin: Any, module: Any) -> None:
        """Raises: precision_fsdp.errors.Float8UnavailableError: no Linear layer of ``module`` was converted (the
        message says where the plugin converts at the plugin's door: a Trainer's ``configure_model`` or
        ``fabric.setup``)."""
        if config.is_converted(module):
            return
        where = _FABRIC_CONVERTS if door_of(plugin) == "Fabric" else _TRAINER_CONVERTS
        raise Float8UnavailableError(
            f"{plugin.spec}: no Linear layer of the model was converted to float8 (converted: "
            f"{self.converted or 'none'}). {where} Check fp8_filter too: the defaults skip the first and last Linear "
            "and dimensions that are not multiples of 16."
        )

    def describe(self, plugin: Any) -> Mapping[str, Any]:
        """``{"float8 (torchao, FSDP2 only)": <the dtype of each role>}``."""
        return {FLOAT8.feature: config.describe(self.precision)}

    def table(self, plugin: Any, table: Any) -> Any:
        """The base precision's table, unchanged."""
        return table


def check_options(precision: str, emulate: bool, chosen: config.Fp8Filter) -> None:
    """The ``fp8_*`` options are for the float8 precisions only, and ``fp8_filter`` is patterns or a callable.

    Raises:
        ValueError: ``fp8_emulate`` or ``fp8_filter`` with another precision.
        TypeError: ``fp8_filter`` is neither patterns nor a callable.
    """
    if precision not in FLOAT8 and (emulate or chosen is not None):
        raise ValueError(
            f"fp8_emulate and fp8_filter apply to the FP8 precisions ({', '.join(RECIPES)}), not "
            f"{precision!r}; remove them."
        )
    config.user_filter(chosen)  # checks its type now


def feature_for(precision: str, emulate: bool = False, chosen: config.Fp8Filter = None) -> ExtraPrecisionFeature:
    """The feature of ``precision``: a new [`Float8Feature`][precision_fsdp.float8.feature.Float8Feature] for a float8
    name, else ``NO_FEATURE``."""
    return Float8Feature(precision, emulate, chosen) if precision in FLOAT8 else NO_FEATURE


def converted(feature: ExtraPrecisionFeature) -> list[str]:
    """The Linear layers ``feature`` converted to float8 (``[]`` for any other feature)."""
    return list(feature.converted) if isinstance(feature, Float8Feature) else []


__all__ = ["FP8_FSDP1", "Float8Feature", "check_options", "converted", "feature_for"]
