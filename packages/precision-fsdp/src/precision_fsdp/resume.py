"""Resuming a checkpoint written under another precision: say exactly what changes, or refuse.

The plugin's own state (``state_dict``) stays the loss scaler's, with the keys of Lightning's built-in
``FSDPPrecision``, so checkpoints move between both classes in both directions. The precision a checkpoint was
written under goes into a separate top-level key, [`CHECKPOINT_KEY`][precision_fsdp.resume.CHECKPOINT_KEY], which
Lightning's built-in ignores. A
checkpoint without that key (written by Lightning's built-in) is recognised as ``16-mixed`` when it holds scaler
state; otherwise its precision is unknown and nothing is said.

What changes, for each pair (parameters and optimizer state are restored as saved in every case):

* from ``16-mixed`` to a precision without loss scaling: the scaler state in the checkpoint is dropped;
* to ``16-mixed`` from a precision without it: the scaler starts fresh at its ``init_scale``;
* any change of compute dtype (e.g. ``bf16-mixed`` -> ``32-true``): the forward/backward dtype changes from the
  next step on, so the loss curve may jump;
* a change of parameter storage dtype (``*-true`` on one side only) is refused: the sharded parameters and the
  optimizer state in the checkpoint have another dtype than the model being resumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Optional

from precision_fsdp.errors import PrecisionChangeError
from precision_fsdp.float8.recipes import FLOAT8
from precision_fsdp.policy import DtypePlan, dtype_name

CHECKPOINT_KEY: Final = "precision_fsdp"
"""Top-level checkpoint key holding ``{"precision": <the precision the checkpoint was written under>}``."""


def record(checkpoint: dict[str, Any], precision: str) -> None:
    """Write the precision into ``checkpoint`` (called from the plugin's ``on_save_checkpoint``)."""
    checkpoint[CHECKPOINT_KEY] = {"precision": precision}


def saved_precision(checkpoint: Mapping[str, Any], qualname: str) -> Optional[str]:
    """The precision ``checkpoint`` was written under, or ``None`` when it cannot be known."""
    ours = checkpoint.get(CHECKPOINT_KEY)
    if isinstance(ours, Mapping) and isinstance(ours.get("precision"), str):
        return str(ours["precision"])
    state = checkpoint.get(qualname)
    if isinstance(state, Mapping) and "scale" in state:
        return "16-mixed"  # Lightning's built-in writes plugin state only for its 16-mixed scaler
    return None


def _base(precision: str) -> str:
    """The one of Lightning's five precisions ``precision`` follows (itself, or an FP8 precision's base)."""
    return FLOAT8.base_of(precision)


def changes(saved: str, now: str, init_scale: Optional[float]) -> list[str]:
    """What resuming a ``saved``-precision checkpoint under ``now`` changes, one sentence each.

    Raises:
        PrecisionChangeError: the parameter storage dtype differs, so the checkpoint cannot be resumed.
    """
    if saved == now:
        return []
    said: list[str] = []
    if saved in FLOAT8 or now in FLOAT8:
        fp8 = [p for p in (saved, now) if p in FLOAT8]
        said.append(
            f"the Linear layers torchao converts run in float8 only under {' and '.join(fp8)} (the weights are "
            "stored in float32 either way)"
        )
        if _base(saved) == _base(now):
            return said
    before, after = DtypePlan.for_precision(_base(saved)), DtypePlan.for_precision(_base(now))
    if before.storage != after.storage:
        raise PrecisionChangeError(
            f"cannot resume a checkpoint written under precision {saved!r} with precision {now!r}: its sharded "
            f"parameters and optimizer state are {dtype_name(before.storage)}, the model's are "
            f"{dtype_name(after.storage)}. Resume under {saved!r} (or another precision that stores parameters in "
            f"{dtype_name(before.storage)}), or load only the weights into a new run."
        )
    if saved == "16-mixed":
        said.append(f"the 16-mixed loss scaler state is dropped: {now} does not scale the loss")
    if now == "16-mixed":
        said.append(f"the 16-mixed loss scaler starts fresh at scale {init_scale}: {saved} did not scale the loss")
    if before.compute != after.compute:
        said.append(
            f"compute runs in {dtype_name(after.compute)} instead of {dtype_name(before.compute)} from "
            "the next step on (parameters and optimizer state are restored as saved)"
        )
    return said


def message(saved: str, now: str, said: list[str]) -> str:
    """The warning for [`changes`][precision_fsdp.resume.changes]' sentences."""
    return f"resuming a checkpoint written under precision {saved!r} with precision {now!r}: " + "; ".join(said) + "."
