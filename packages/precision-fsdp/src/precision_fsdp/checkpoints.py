"""What the FSDP plugin writes to and reads from a checkpoint:
[`CheckpointMixin`][precision_fsdp.checkpoints.CheckpointMixin].

The plugin state is the loss scaler's (``16-mixed``), with the keys of Lightning's built-in ``FSDPPrecision``, so
checkpoints move between both classes; the precision is recorded beside it and compared on resume
([`precision_fsdp.resume`][] says what a change of precision keeps, drops or refuses). A base of
[`FSDPPrecisionImpl`][precision_fsdp.implementation.FSDPPrecisionImpl]; its methods override Lightning's and reach
Lightning's
own through ``super()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typing_extensions import override

from precision_base import PrecisionPlugin
from precision_fsdp import resume
from precision_fsdp.scaler import loss_scale

if TYPE_CHECKING:
    from lightning.pytorch.plugins.precision import FSDPPrecision as _LightningBase
else:
    _LightningBase = object  # at run time the concrete class supplies Lightning's FSDPPrecision of its namespace


class CheckpointMixin(PrecisionPlugin, _LightningBase):  # type: ignore[misc]  # precision: str vs Literal
    """The scaler's state and the precision in checkpoints (see the module)."""

    scaler: Any

    @override
    def state_dict(self) -> dict[str, Any]:
        """The scaler's state for ``16-mixed`` (the keys of Lightning's built-in, so checkpoints move between both
        classes), else empty."""
        state = getattr(self.scaler, "state_dict", None)  # a user's scaler class may keep no state
        return dict(state()) if callable(state) else {}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the scaler's state (written by this class or Lightning's built-in). State for a scaler this
        precision does not have was announced by
        [`on_load_checkpoint`][precision_fsdp.checkpoints.CheckpointMixin.on_load_checkpoint] and is dropped."""
        load = getattr(self.scaler, "load_state_dict", None)
        if callable(load) and state_dict:
            load(state_dict)

    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Record the precision in the checkpoint (key ``"precision_fsdp"``; Lightning's built-in ignores it)."""
        resume.record(checkpoint, self.precision)
        super().on_save_checkpoint(checkpoint)

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Before the state is restored: compare the checkpoint's precision with this one.

        Warns: what changes, e.g. "resuming a checkpoint written under precision '16-mixed' with precision
        'bf16-mixed': the 16-mixed loss scaler state is dropped: bf16-mixed does not scale the loss; ...".

        Raises:
            precision_fsdp.errors.PrecisionChangeError: the parameter storage dtype differs (``*-true`` on one side).
        """
        saved = resume.saved_precision(checkpoint, type(self).__qualname__)
        if saved is not None:
            init_scale = loss_scale(self.scaler)
            said = resume.changes(saved, self.precision, init_scale)
            if said:
                self.lightning.utilities.rank_zero_warn(resume.message(saved, self.precision, said))
        super().on_load_checkpoint(checkpoint)


__all__ = ["CheckpointMixin"]
