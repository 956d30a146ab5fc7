"""What the FSDP plugin writes to and reads from a checkpoint: plain functions that
[`FSDPPrecisionImpl`][precision_fsdp.implementation.FSDPPrecisionImpl]'s checkpoint hooks call with the plugin's
scaler and precision.

The plugin state is the loss scaler's (``16-mixed``, [`scaler_state`][precision_fsdp.checkpoints.scaler_state] and
[`load_scaler_state`][precision_fsdp.checkpoints.load_scaler_state]), with the keys of Lightning's built-in
``FSDPPrecision``, so checkpoints move between both classes; the precision is recorded beside it
([`precision_fsdp.resume.record`][]) and compared on resume
([`resume_warning`][precision_fsdp.checkpoints.resume_warning]; [`precision_fsdp.resume`][] says what a change of
precision keeps, drops or refuses). The hooks override Lightning's and reach Lightning's own through ``super()``.
"""

from __future__ import annotations

from typing import Any, Optional

from precision_fsdp import resume
from precision_fsdp.scaler import loss_scale


def scaler_state(scaler: Any) -> dict[str, Any]:
    """The state of ``scaler`` (``16-mixed``: the keys of Lightning's built-in), else empty (no scaler, or a user's
    scaler class that keeps no state)."""
    state = getattr(scaler, "state_dict", None)  # a user's scaler class may keep no state
    return dict(state()) if callable(state) else {}


def load_scaler_state(scaler: Any, state_dict: dict[str, Any]) -> None:
    """Restore ``state_dict`` into ``scaler`` (written by the plugin or Lightning's built-in); state for a scaler the
    plugin does not have (``scaler`` is ``None``), or empty state, is dropped."""
    load = getattr(scaler, "load_state_dict", None)
    if callable(load) and state_dict:
        load(state_dict)


def resume_warning(checkpoint: dict[str, Any], qualname: str, precision: str, scaler: Any) -> Optional[str]:
    """The warning for resuming ``checkpoint`` (written by the class named ``qualname``) under ``precision`` with
    ``scaler``: what changes ([`precision_fsdp.resume.message`][]), or ``None`` when nothing does or the saved
    precision cannot be known.

    Raises:
        precision_fsdp.errors.PrecisionChangeError: the parameter storage dtype differs (``*-true`` on one side).
    """
    saved = resume.saved_precision(checkpoint, qualname)
    if saved is None:
        return None
    init_scale = loss_scale(scaler)
    said = resume.changes(saved, precision, init_scale)
    return resume.message(saved, precision, said) if said else None


__all__ = ["load_scaler_state", "resume_warning", "scaler_state"]
