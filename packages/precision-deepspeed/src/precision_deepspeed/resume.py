"""Resuming a DeepSpeed checkpoint under another precision: read what it was saved with, refuse a mismatch early.

DeepSpeed's engine state depends on its precision mode: ZeRO's optimizer partitions are written to
``bf16_zero_pp_rank_*`` files in bf16 mode and to ``zero_pp_rank_*`` files otherwise, the fp16 mode carries a loss
scaler, and ``torch_autocast`` keeps fp32 parameters. Resumed under another mode, DeepSpeed's loader fails with a
raw ``FileNotFoundError`` (bf16 <-> fp16/fp32) or goes on with other numerics without a word (fp16 <-> fp32). The
plugin reads the mode the checkpoint was saved with *before* the engine loads it, and refuses a mismatch with an
error naming both precisions.

What a checkpoint was saved with comes from two places, so checkpoints of Lightning's built-in
``DeepSpeedPrecision`` are understood too:

* DeepSpeed's own ``ds_config`` in ``mp_rank_00_model_states.pt`` (every DeepSpeed checkpoint has it);
* the plugin's state (``{"precision": ..., "deepspeed_config_section": ...}``), which Lightning files in the
  checkpoint under the class name ``DeepSpeedPrecision``; Lightning's built-in class ignores it when loading.

Imports torch only inside [`saved_precision`][precision_deepspeed.resume.saved_precision].
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from precision_deepspeed.config import engine_mode
from precision_deepspeed.errors import CheckpointPrecisionError

#: The key Lightning files the plugin's state under (the class's ``__qualname__``, same as Lightning's built-in).
STATE_KEY = "DeepSpeedPrecision"


_MODE_PRECISIONS = {
    "fp16": "16-mixed or 16-true",
    "bf16": "bf16-mixed or bf16-true",
    "fp32": "32-true",
    "torch_autocast/float16": "16-mixed with torch_autocast=True",
    "torch_autocast/bfloat16": "bf16-mixed with torch_autocast=True",
}


@dataclass(frozen=True)
class SavedPrecision:
    """What a DeepSpeed checkpoint was saved with.

    Attributes:
        mode: DeepSpeed's precision mode (see [`engine_mode`][precision_deepspeed.resume.engine_mode]).
        precision: the plugin's precision when the plugin recorded it, else ``None`` (e.g. Lightning's built-in).
    """

    mode: str
    precision: Optional[str]

    def describe(self) -> str:
        """E.g. ``"bf16-mixed (DeepSpeed bf16 mode)"``."""
        name = self.precision or _MODE_PRECISIONS.get(self.mode, self.mode)
        return f"{name} (DeepSpeed {self.mode} mode)"


def saved_precision(checkpoint: Any) -> Optional[SavedPrecision]:
    """What the DeepSpeed checkpoint directory ``checkpoint`` was saved with, or ``None`` if it is none.

    Reads only ``<checkpoint>/<tag>/mp_rank_00_model_states.pt`` (memory-mapped: tensors are not read), where ``tag``
    comes from the ``latest`` file DeepSpeed writes (Lightning saves under the tag ``checkpoint``).
    """
    import torch

    root = Path(checkpoint)
    if not root.is_dir():
        return None
    latest = root / "latest"
    tag = latest.read_text().strip() if latest.is_file() else "checkpoint"
    states = sorted((root / tag).glob("*mp_rank_00_model_states.pt"))
    if not states:
        return None
    state = torch.load(states[0], map_location="cpu", mmap=True, weights_only=False)
    recorded = state.get(STATE_KEY)
    if isinstance(recorded, Mapping) and isinstance(recorded.get("deepspeed_config_section"), Mapping):
        return SavedPrecision(engine_mode(recorded["deepspeed_config_section"]), recorded.get("precision"))
    config = state.get("ds_config")
    if not isinstance(config, Mapping):
        return None
    return SavedPrecision(engine_mode(config), None)


def mismatch_error(checkpoint: Any, saved: SavedPrecision, spec: str, section: Mapping[str, Any]) -> str:
    """The message refusing to resume ``checkpoint`` (saved as ``saved``; ``None``: not known) under ``spec``."""
    mode = engine_mode(section)
    wanted = spec.partition(":")[2]
    where = "this checkpoint" if checkpoint is None else f"the DeepSpeed checkpoint {str(checkpoint)!r}"
    suggestion = saved.precision or _MODE_PRECISIONS.get(saved.mode, saved.mode)
    return (
        f"cannot resume {where} under {spec} (DeepSpeed {mode} mode): it was "
        f"saved under {saved.describe()}. DeepSpeed's optimizer and loss-scaler state belong to the mode they were "
        f"saved in; resuming under {wanted} would fail in DeepSpeed's loader or silently change the numerics. Resume "
        f"with the precision it was saved with ({suggestion}), or start a new run from its weights only: "
        "lightning.pytorch.utilities.deepspeed.convert_zero_checkpoint_to_fp32_state_dict(checkpoint, 'weights.pt'), "
        "then load 'weights.pt' into your LightningModule."
    )


def check_resume(plugin: Any, checkpoint: Any) -> None:
    """Refuse to resume the DeepSpeed checkpoint ``checkpoint`` under ``plugin`` when the modes differ.

    Args:
        plugin: a precision plugin with ``spec`` and ``precision_section()`` (``DeepSpeedPrecision``).
        checkpoint: the path given to ``Trainer.fit(ckpt_path=...)``.

    Raises:
        CheckpointPrecisionError: the checkpoint was saved in another DeepSpeed precision mode; names both.
    """
    saved = saved_precision(checkpoint)
    section = plugin.precision_section()
    if saved is not None and saved.mode != engine_mode(section):
        raise CheckpointPrecisionError(mismatch_error(checkpoint, saved, plugin.spec, section))


__all__ = [
    "check_resume",
    "STATE_KEY",
    "SavedPrecision",
    "engine_mode",
    "mismatch_error",
    "saved_precision",
]
