"""The precision section of a DeepSpeed config: rendered by the plugin, merged into the user's config.

The plugin owns these top-level keys of DeepSpeed's config:

* ``fp16``: enabled under ``16-mixed`` and ``16-true``, with dynamic loss scaling and its knobs
  (``loss_scale``, ``initial_scale_power``, ``loss_scale_window``, ``hysteresis``, ``consecutive_hysteresis``,
  ``min_loss_scale``); disabled otherwise;
* ``bf16``: enabled under ``bf16-mixed`` and ``bf16-true``; disabled otherwise;
* ``torch_autocast``: only when the plugin is built with ``torch_autocast=True`` (``16-mixed`` or ``bf16-mixed``):
  the engine runs its forward under ``torch.autocast`` and keeps fp32 parameters; ``fp16`` and ``bf16`` are then
  disabled.

[`merge_precision_section`][precision_deepspeed.config.merge_precision_section] adds the section to a user's config. A
user value that agrees with the plugin is
kept, a key the plugin does not mention is kept, and a value that contradicts the plugin raises
[`DeepSpeedConfigConflictError`][precision_deepspeed.errors.DeepSpeedConfigConflictError] naming both sides. Nothing is
silently overridden.
[`write_into_config`][precision_deepspeed.config.write_into_config] is the one place that writes the section and the
Trainer's clip value into a strategy's
config; [`precision_deepspeed.strategy`][] calls it once per strategy.

This module imports neither torch nor DeepSpeed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional

from precision_base.kit.plugin_support import PRECISION_DTYPE_NAMES
from precision_deepspeed.errors import DeepSpeedConfigConflictError

#: Precisions that run DeepSpeed's fp16 mode, its bf16 mode, and those that may use torch autocast instead
#: (derived from precision-base's one precision -> dtype map).
HALF_PRECISIONS = tuple(p for p, dtype in PRECISION_DTYPE_NAMES.items() if dtype == "float16")
BF16_PRECISIONS = tuple(p for p, dtype in PRECISION_DTYPE_NAMES.items() if dtype == "bfloat16")
AUTOCAST_PRECISIONS = tuple(p for p in PRECISION_DTYPE_NAMES if p.endswith("-mixed"))

#: Top-level DeepSpeed keys that each switch on one way of running in reduced precision, and the key of the
#: rendered section each one is compared against (DeepSpeed still reads the old spelling ``bfloat16``).
PRECISION_MODE_KEYS: dict[str, str] = {
    "fp16": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "torch_autocast": "torch_autocast",
    "amp": "amp",
}


@dataclass(frozen=True)
class LossScaling:
    """DeepSpeed's fp16 loss scaling knobs (the ``fp16`` section), with DeepSpeed's defaults.

    Attributes:
        loss_scale: ``0`` for dynamic loss scaling, or a fixed (static) scale.
        initial_scale_power: dynamic scaling starts at ``2 ** initial_scale_power``.
        loss_scale_window: steps without overflow before the scale is raised.
        hysteresis: overflows tolerated before the scale is lowered.
        consecutive_hysteresis: refill the hysteresis budget after every step without overflow.
        min_loss_scale: the scale never drops below this.
    """

    loss_scale: float = 0.0
    initial_scale_power: int = 16
    loss_scale_window: int = 1000
    hysteresis: int = 2
    consecutive_hysteresis: bool = False
    min_loss_scale: int = 1

    def __post_init__(self) -> None:
        problems = []
        if isinstance(self.loss_scale, bool) or not isinstance(self.loss_scale, (int, float)):
            problems.append(f"loss_scale must be a number, got {self.loss_scale!r}")
        elif not math.isfinite(self.loss_scale) or self.loss_scale < 0:
            problems.append(f"loss_scale must be 0 (dynamic) or a positive finite number, got {self.loss_scale!r}")
        for name, low in (
            ("initial_scale_power", 0),
            ("loss_scale_window", 1),
            ("hysteresis", 1),
            ("min_loss_scale", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                problems.append(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.consecutive_hysteresis, bool):
            problems.append(f"consecutive_hysteresis must be True or False, got {self.consecutive_hysteresis!r}")
        if problems:
            raise ValueError("invalid fp16 loss scaling: " + "; ".join(problems))

    def as_config(self) -> dict[str, Any]:
        """The knobs as DeepSpeed's ``fp16`` section spells them."""
        return asdict(self)


def render_precision_section(
    precision: str,
    *,
    loss_scaling: Optional[LossScaling] = None,
    torch_autocast: bool = False,
    autocast_lower_precision_safe_modules: Optional[Sequence[str]] = None,
) -> dict[str, Any]:
    """Return the precision section of a DeepSpeed config for ``precision``.

    Args:
        precision: one of the five canonical precisions.
        loss_scaling: fp16 loss scaling knobs; used under ``16-mixed``/``16-true`` (defaults to DeepSpeed's).
        torch_autocast: run the engine's forward under ``torch.autocast`` instead of casting the model (mixed
            precisions only; needs a DeepSpeed release with the ``torch_autocast`` section).
        autocast_lower_precision_safe_modules: with ``torch_autocast``, the ``"package.Class"`` names of modules whose
            parameters are communicated in the autocast dtype (DeepSpeed's default: Linear and Conv layers).
    """
    if torch_autocast:
        if precision not in AUTOCAST_PRECISIONS:
            raise ValueError(
                f"torch_autocast=True needs a mixed precision ({', '.join(AUTOCAST_PRECISIONS)}), got {precision!r}"
            )
        autocast: dict[str, Any] = {"enabled": True, "dtype": "float16" if precision == "16-mixed" else "bfloat16"}
        if autocast_lower_precision_safe_modules is not None:
            autocast["lower_precision_safe_modules"] = list(autocast_lower_precision_safe_modules)
        return {"fp16": {"enabled": False}, "bf16": {"enabled": False}, "torch_autocast": autocast}
    if precision in HALF_PRECISIONS:
        scaling = loss_scaling if loss_scaling is not None else LossScaling()
        return {"fp16": {"enabled": True, **scaling.as_config()}, "bf16": {"enabled": False}}
    if precision in BF16_PRECISIONS:
        return {"fp16": {"enabled": False}, "bf16": {"enabled": True}}
    if precision == "32-true":
        return {"fp16": {"enabled": False}, "bf16": {"enabled": False}}
    raise ValueError(f"unknown precision {precision!r}")


def check_precision_options(
    precision: str, scaling: LossScaling, torch_autocast: bool, safe_modules: Optional[Sequence[str]]
) -> None:
    """Check the plugin's DeepSpeed options against its (canonical) ``precision``.

    Raises:
        ValueError: fp16 loss scaling options under a non-fp16 mode, ``torch_autocast`` under a ``*-true``
            precision, under ``16-mixed`` or with a DeepSpeed that has no ``torch_autocast`` section, or
            ``autocast_lower_precision_safe_modules`` without ``torch_autocast``.
    """
    from precision_deepspeed import _compat
    from precision_deepspeed.errors import autocast_fp16_refusal

    if scaling != LossScaling() and (precision not in HALF_PRECISIONS or torch_autocast):
        raise ValueError(
            f"fp16 loss scaling options apply to DeepSpeed's fp16 mode ({', '.join(HALF_PRECISIONS)}) only; "
            f"precision={precision!r}{' with torch_autocast=True' if torch_autocast else ''} does not use them"
        )
    if torch_autocast:
        if precision not in AUTOCAST_PRECISIONS:
            raise ValueError(
                f"torch_autocast=True needs a mixed precision ({', '.join(AUTOCAST_PRECISIONS)}), got {precision!r}"
            )
        if not _compat.deepspeed_has_torch_autocast():
            raise ValueError(
                "torch_autocast=True needs a DeepSpeed release that reads the 'torch_autocast' config section; "
                "the installed DeepSpeed does not. Upgrade DeepSpeed or use torch_autocast=False."
            )
        if precision in HALF_PRECISIONS:
            raise ValueError(autocast_fp16_refusal(f"deepspeed:{precision}"))
    elif safe_modules is not None:
        raise ValueError("autocast_lower_precision_safe_modules is only used with torch_autocast=True")


def engine_mode(section: Mapping[str, Any]) -> str:
    """DeepSpeed's precision mode for a config (or a rendered section): ``"fp16"``, ``"bf16"``, ``"fp32"`` or
    ``"torch_autocast/<dtype>"``."""

    def enabled(key: str) -> bool:
        value = section.get(key)
        return isinstance(value, Mapping) and bool(value.get("enabled", False))

    if enabled("torch_autocast"):
        return f"torch_autocast/{section['torch_autocast'].get('dtype', 'bfloat16')}"
    if enabled("fp16"):
        return "fp16"
    if enabled("bf16") or enabled("bfloat16"):
        return "bf16"
    return "fp32"


def _enabled(section: Any) -> bool:
    return isinstance(section, Mapping) and bool(section.get("enabled", False))


def _conflicts(user: Mapping[str, Any], ours: Mapping[str, Any], path: str) -> list[str]:
    found: list[str] = []
    for key, wanted in ours.items():
        if key not in user:
            continue
        have = user[key]
        where = f"{path}.{key}" if path else key
        if isinstance(wanted, Mapping) and isinstance(have, Mapping):
            found.extend(_conflicts(have, wanted, where))
        elif have != wanted:
            found.append(f"{where}={have!r} (the plugin needs {wanted!r})")
    return found


def precision_conflicts(user_config: Mapping[str, Any], section: Mapping[str, Any]) -> list[str]:
    """Every place where ``user_config`` contradicts the rendered ``section``, as readable sentences."""
    found: list[str] = []
    for key, ours_key in PRECISION_MODE_KEYS.items():
        if key == ours_key or key not in user_config:
            continue
        if _enabled(user_config[key]) != _enabled(section.get(ours_key)):
            found.append(
                f"{key}.enabled={_enabled(user_config[key])!r} (the plugin needs {ours_key} enabled="
                f"{_enabled(section.get(ours_key))!r})"
            )
    for key in ("torch_autocast", "amp"):
        if key not in section and _enabled(user_config.get(key)):
            found.append(f"{key}.enabled=True (the plugin does not use {key}; it needs it disabled)")
    found.extend(_conflicts(user_config, section, ""))
    return found


def conflict_message(owner: str, problems: Sequence[str]) -> str:
    """The error text for a user's config that contradicts the plugin ``owner`` at each of ``problems``."""
    return (
        f"the DeepSpeed config you passed contradicts the precision plugin {owner}: your config sets "
        + "; ".join(problems)
        + ". Remove these keys from your config (the plugin writes its own precision section; fp16 loss scaling "
        "knobs are arguments of DeepSpeedPrecision, the precision plugin), or choose the precision plugin that "
        "matches your config."
    )


def merge_precision_section(
    user_config: Optional[Mapping[str, Any]], section: Mapping[str, Any], *, owner: str
) -> dict[str, Any]:
    """Return a copy of ``user_config`` with the plugin's ``section`` merged in.

    Args:
        user_config: the DeepSpeed config the user gave (``None`` for none).
        section: the output of [`render_precision_section`][precision_deepspeed.config.render_precision_section].
        owner: how to name the plugin in errors, e.g. ``"deepspeed:bf16-mixed"``.

    Raises:
        DeepSpeedConfigConflictError: the user's config contradicts the section; the message names both.
    """
    merged: dict[str, Any] = copy.deepcopy(dict(user_config or {}))
    problems = precision_conflicts(merged, section)
    if problems:
        raise DeepSpeedConfigConflictError(conflict_message(owner, problems))
    _fill(merged, section)
    return merged


def _fill(target: dict[str, Any], source: Mapping[str, Any]) -> None:
    for key, value in source.items():
        if key not in target:
            target[key] = copy.deepcopy(value)
        elif isinstance(value, Mapping) and isinstance(target[key], dict):
            _fill(target[key], value)


def apply_gradient_clipping(config: dict[str, Any], gradient_clip_val: Optional[float], *, owner: str) -> None:
    """Write the Trainer's ``gradient_clip_val`` into ``config["gradient_clipping"]`` (in place).

    ``None`` leaves the config alone. A config that already clips at another value raises
    [`DeepSpeedConfigConflictError`][precision_deepspeed.errors.DeepSpeedConfigConflictError] naming both values.
    """
    if gradient_clip_val is None:
        return
    if "gradient_clipping" in config and float(config["gradient_clipping"]) != float(gradient_clip_val):
        raise DeepSpeedConfigConflictError(
            f"the DeepSpeed config you passed sets gradient_clipping={config['gradient_clipping']!r} but the Trainer "
            f"has gradient_clip_val={gradient_clip_val!r} ({owner} hands clipping to DeepSpeed). Set the value in one "
            "place only: remove gradient_clipping from the config or gradient_clip_val from the Trainer."
        )
    config["gradient_clipping"] = float(gradient_clip_val)


def write_into_config(
    config: dict[str, Any],
    section: Mapping[str, Any],
    *,
    owner: str,
    lightning_keys: Collection[str] = (),
    strategy_loss_scaling: Optional[Mapping[str, Any]] = None,
    gradient_clip_val: Optional[float] = None,
) -> None:
    """Merge the plugin's ``section`` and the Trainer's clip value into a strategy's ``config``, in place.

    Conflicts are looked for only in what the user wrote: ``lightning_keys`` are the top-level keys Lightning added
    as defaults (they give way to the plugin's section), ``strategy_loss_scaling`` the non-default fp16 arguments
    the user gave Lightning's ``DeepSpeedStrategy`` (Lightning copies them into a default ``fp16`` section).

    Args:
        config: the strategy's DeepSpeed config (changed in place).
        section: the output of [`render_precision_section`][precision_deepspeed.config.render_precision_section].
        owner: how to name the plugin in errors, e.g. ``"deepspeed:16-mixed"``.
        lightning_keys: keys of ``config`` that Lightning wrote, not the user.
        strategy_loss_scaling: fp16 knobs given to the strategy's constructor, e.g. ``{"loss_scale_window": 200}``.
        gradient_clip_val: the Trainer's ``gradient_clip_val`` (``None``: not set).

    Raises:
        DeepSpeedConfigConflictError: what the user wrote contradicts the plugin or the Trainer; names both values.
    """
    user = {key: value for key, value in config.items() if key not in lightning_keys}
    fp16 = section.get("fp16")
    if strategy_loss_scaling and "fp16" not in user and isinstance(fp16, Mapping) and fp16.get("enabled"):
        contradicting = {k: v for k, v in strategy_loss_scaling.items() if k in fp16 and fp16[k] != v}
        if contradicting:
            given = ", ".join(f"{k}={v!r}" for k, v in contradicting.items())
            needed = ", ".join(f"{k}={fp16[k]!r}" for k in contradicting)
            raise DeepSpeedConfigConflictError(
                f"DeepSpeedStrategy({given}) contradicts the precision plugin {owner}, which needs {needed}. Give fp16 "
                "loss scaling to the precision plugin only: DeepSpeedPrecision(..., "
                f"{', '.join(f'{k}=...' for k in contradicting)})."
            )
    merged = merge_precision_section(user, section, owner=owner)
    apply_gradient_clipping(merged, gradient_clip_val, owner=owner)
    for key in lightning_keys:
        merged.setdefault(key, config[key])
    config.clear()
    config.update(merged)
