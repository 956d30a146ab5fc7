"""Every error class precision-fsdp defines, in one place: what to catch.

* [`Float8UnavailableError`][precision_fsdp.errors.Float8UnavailableError]: an fp8 / MXFP8 precision cannot run here
  ([`precision_fsdp.float8.config`][]);
* [`KeepFP32Error`][precision_fsdp.errors.KeepFP32Error]: ``keep_fp32`` cannot be honoured as asked
  ([`precision_fsdp.keep_fp32`][]);
* [`ClipGradNormError`][precision_fsdp.errors.ClipGradNormError]: clip-by-norm where the global norm cannot be exact
  ([`precision_fsdp.clipping`][]); what is raised is the subclass
  [`clip_error_class`][precision_fsdp.errors.clip_error_class] builds for the plugin's Lightning namespace;
* [`PrecisionChangeError`][precision_fsdp.errors.PrecisionChangeError]: a checkpoint cannot be resumed under the
  plugin's precision ([`precision_fsdp.resume`][]);
* [`TiedAcrossUnitsError`][precision_fsdp.errors.TiedAcrossUnitsError]: tied parameters would be split between FSDP2
  units ([`precision_fsdp.sharding.units`][]).

Running out of loss scale (``max_skipped_steps``) raises precision-base's
[`OverflowStormError`][precision_base.errors.OverflowStormError], shared with the DeepSpeed plugin.

Imports no torch and no Lightning module.
"""

from __future__ import annotations

import types

from precision_base import PrecisionPluginError


class Float8UnavailableError(PrecisionPluginError, RuntimeError):
    """An FP8 precision cannot run here: torchao is missing, the GPU has no FP8, or FSDP1 is used."""


class KeepFP32Error(PrecisionPluginError, ValueError):
    """``keep_fp32`` cannot be honoured as asked (FSDP1, or a kept module sharded inside another unit)."""


class ClipGradNormError(PrecisionPluginError, RuntimeError):
    """Clipping by norm was asked for where the plugin cannot compute the global norm exactly.

    What is raised is the subclass [`clip_error_class`][precision_fsdp.errors.clip_error_class] builds for the
    plugin's Lightning namespace, which is also
    that namespace's ``MisconfigurationException``, the type Lightning's own ``FSDPPrecision`` raises here.
    """


_ERROR_CLASSES: dict[str, type[ClipGradNormError]] = {}


def clip_error_class(lightning: types.ModuleType) -> type[ClipGradNormError]:
    """[`ClipGradNormError`][precision_fsdp.errors.ClipGradNormError] that is also
    ``<lightning>.utilities.exceptions.MisconfigurationException``."""
    name = lightning.__name__
    if name not in _ERROR_CLASSES:
        lightnings: type = lightning.utilities.exceptions.MisconfigurationException
        _ERROR_CLASSES[name] = type("ClipGradNormError", (ClipGradNormError, lightnings), {"__module__": __name__})
    return _ERROR_CLASSES[name]


class PrecisionChangeError(ValueError):
    """A checkpoint cannot be resumed under the plugin's precision (the message names both precisions)."""


class TiedAcrossUnitsError(ValueError):
    """Tied parameters would be split between FSDP2 units that Lightning calls separately."""


__all__ = [
    "ClipGradNormError",
    "Float8UnavailableError",
    "KeepFP32Error",
    "PrecisionChangeError",
    "TiedAcrossUnitsError",
    "clip_error_class",
]
