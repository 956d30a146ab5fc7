"""Loss scaling for ``16-mixed``: which scaler, made from which options, checked against the FSDP version.

* FSDP2 (``fully_shard``) gradients are DTensors; ``torch.amp.GradScaler`` unscales them, and DTensor's dispatch
  all-reduces the found-inf flag across the mesh, so every rank skips the same steps.
* FSDP1 (``FullyShardedDataParallel``) gradients are plain local shards; only ``ShardedGradScaler`` all-reduces
  the found-inf flag, so it is the one FSDP1 needs.

The scaler state (``scale``, ``growth_factor``, ``backoff_factor``, ``growth_interval``, ``_growth_tracker``) has
the same keys for both kinds, and for Lightning's built-in plugin, so checkpoints move between all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import torch
from torch.amp import GradScaler

from precision_fsdp._compat import scaler_device, sharded_grad_scaler_class
from precision_fsdp.sharding.units import FSDPVersion

SCALER_OPTIONS: tuple[str, ...] = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")
"""Names of the scaler settings the plugin accepts as keyword options (``resolve("fsdp:16-mixed", init_scale=...)``)."""


def no_scaler_message(precision: str, scaler: Any, remedy: str) -> str:
    """Lightning's message for a scaler on a precision that does not scale the loss, verbatim, then ours."""
    return (
        f"`precision={precision!r}` does not use a scaler, found {scaler}. Only '16-mixed' scales the loss; "
        f"{remedy}, or use precision='16-mixed'."
    )


def check_scaler_options(precision: str, scaler: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a user scaler and scaler options for ``precision``; return the options to build a scaler with.

    Raises:
        ValueError: a scaler or scaler options were given for a precision that does not scale the loss, both a
            scaler and options were given, or an option value is out of range.
        TypeError: ``scaler`` is not a ``torch.amp.GradScaler``.
    """
    given = {k: v for k, v in options.items() if v is not None}
    if precision != "16-mixed":
        if scaler is not None:
            raise ValueError(no_scaler_message(precision, scaler, "remove scaler="))
        if given:
            raise ValueError(
                f"scaler options {sorted(given)} only apply to precision='16-mixed', not {precision!r}; remove them."
            )
        return {}
    if scaler is not None:
        check_scaler(precision, scaler)
        if given:
            raise ValueError(
                f"pass either scaler= or the scaler options {sorted(given)}, not both: configure the scaler you pass"
            )
        return {}
    if "init_scale" in given and not float(given["init_scale"]) > 0:
        raise ValueError(f"init_scale must be > 0, got {given['init_scale']!r}")
    if "growth_factor" in given and not float(given["growth_factor"]) > 1:
        raise ValueError(f"growth_factor must be > 1, got {given['growth_factor']!r}")
    if "backoff_factor" in given and not 0 < float(given["backoff_factor"]) < 1:
        raise ValueError(f"backoff_factor must be in (0, 1), got {given['backoff_factor']!r}")
    if "growth_interval" in given and not (isinstance(given["growth_interval"], int) and given["growth_interval"] > 0):
        raise ValueError(f"growth_interval must be a positive int, got {given['growth_interval']!r}")
    return given


SCALER_METHODS: tuple[str, ...] = ("scale", "unscale_", "step", "update")
"""What Lightning's FSDP plugins call on a scaler (``scale`` in backward, ``unscale_`` before clipping, ``step`` and
``update`` at the optimizer step): a user's scaler needs these and nothing more."""


def check_scaler(precision: str, scaler: Any) -> None:
    """Refuse a user's scaler (given to ``__init__`` or assigned to ``plugin.scaler``) that cannot work: one for a
    precision that does not scale the loss, or one without the methods Lightning calls
    ([`SCALER_METHODS`][precision_fsdp.scaler.SCALER_METHODS]). ``None`` is always accepted.

    Raises:
        ValueError: ``precision`` is not ``16-mixed`` (Lightning's message first, verbatim).
        TypeError: ``scaler`` lacks one of [`SCALER_METHODS`][precision_fsdp.scaler.SCALER_METHODS].
    """
    if scaler is None:
        return
    if precision != "16-mixed":
        raise ValueError(no_scaler_message(precision, scaler, "remove the scaler"))
    missing = [name for name in SCALER_METHODS if not callable(getattr(scaler, name, None))]
    if missing:
        raise TypeError(
            "scaler must be a torch.amp.GradScaler (or torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler), "
            f"or an object with the methods Lightning calls ({', '.join(SCALER_METHODS)}); "
            f"{type(scaler).__name__} has no {', '.join(missing)}"
        )


def loss_scale(scaler: Any) -> Optional[float]:
    """The scaler's current scale, or ``None`` when it is unknown (no scaler, or a user's scaler without a
    ``get_scale()`` returning a number): the checks that read it then leave that step out."""
    get_scale = getattr(scaler, "get_scale", None)
    if not callable(get_scale):
        return None
    value = get_scale()
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def is_sharded_scaler(scaler: GradScaler) -> bool:
    """Whether ``scaler`` is FSDP1's ``ShardedGradScaler``."""
    return isinstance(scaler, sharded_grad_scaler_class())


def make_scaler(version: FSDPVersion, device_type: str, options: Mapping[str, Any]) -> GradScaler:
    """A new scaler of the kind FSDP ``version`` needs, for ``device_type``, built from ``options``."""
    if version == 1:
        return sharded_grad_scaler_class()(device=device_type, **options)
    return GradScaler(device_type, **options)


def provisional_device() -> str:
    """Device for the scaler made at construction, before the plugin knows where it will run."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_user_scaler(scaler: Any, version: FSDPVersion, device_type: str) -> None:
    """Refuse a user's ``GradScaler`` that cannot work where the plugin was connected (a scaler of another class is
    used as given: only [`SCALER_METHODS`][precision_fsdp.scaler.SCALER_METHODS] are called on it).

    Raises:
        ValueError: the scaler was made for another device type, or a plain ``GradScaler`` is used under FSDP1
            (it would not agree across ranks on which steps to skip).
    """
    if not isinstance(scaler, GradScaler):
        return  # a user's own scaler class: its device and kind are its own business, used as given
    if scaler_device(scaler) != device_type:
        raise ValueError(
            f"the scaler passed to FSDPPrecision was made for device {scaler_device(scaler)!r}, but the model runs "
            f"on {device_type!r}; create it with torch.amp.GradScaler({device_type!r}) (FSDP2) or "
            f"ShardedGradScaler(device={device_type!r}) (FSDP1)"
        )
    if version == 1 and not is_sharded_scaler(scaler):
        raise ValueError(
            "FSDP1 (FullyShardedDataParallel) needs torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler: a "
            "plain torch.amp.GradScaler does not agree across ranks on which steps to skip. Pass "
            f"scaler=ShardedGradScaler(device={device_type!r}) or leave scaler=None for the right default."
        )


def move_state(old: GradScaler, new: GradScaler) -> GradScaler:
    """Carry ``old``'s state (scale, factors, growth tracker) into ``new`` and return ``new``."""
    state = old.state_dict()
    if state:
        new.load_state_dict(state)
    return new


def ready_scaler(
    scaler: Optional[GradScaler], user: bool, version: FSDPVersion, device_type: str, options: Mapping[str, Any]
) -> Optional[GradScaler]:
    """The scaler to train with once the FSDP version and the device are known: a user's scaler, checked; the
    plugin's own, rebuilt with its state when it is of the wrong kind (``ShardedGradScaler`` for FSDP1) or device.

    Raises:
        ValueError: (a user's scaler) see [`check_user_scaler`][precision_fsdp.scaler.check_user_scaler].
    """
    if scaler is None:
        return None
    if user:
        check_user_scaler(scaler, version, device_type)
        return scaler
    right_kind = is_sharded_scaler(scaler) == (version == 1)
    if not right_kind or scaler_device(scaler) != device_type:
        return move_state(scaler, make_scaler(version, device_type, options))
    return scaler
