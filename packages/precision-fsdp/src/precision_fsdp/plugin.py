"""``FSDPPrecision``: Lightning's FSDP precision plugin for FSDP1 and FSDP2, with the built-in's defects fixed.

The class keeps Lightning's name and derives from Lightning's ``FSDPPrecision``, so ``FSDPStrategy`` accepts it and
checkpoints written by either class resume with the other (Lightning files the plugin state under the class's
``__qualname__``; the state is the loss scaler's, with the same keys in both). Its code lives in
[`FSDPPrecisionImpl`][precision_fsdp.implementation.FSDPPrecisionImpl]; this class only names the bases, so that
``precision_base.namespaces.for_namespace(FSDPPrecision, "pytorch_lightning")`` builds the same plugin for
``pytorch_lightning.Trainer``.
"""

from __future__ import annotations

import lightning.pytorch as pl

from precision_fsdp.implementation import FSDPPrecisionImpl


class FSDPPrecision(FSDPPrecisionImpl, pl.plugins.precision.FSDPPrecision):  # type: ignore[misc]  # str vs Literal
    """Precision plugin for Fully Sharded Data Parallel (FSDP1 and FSDP2), for ``lightning.pytorch``.

    See [`FSDPPrecisionImpl`][precision_fsdp.implementation.FSDPPrecisionImpl] for the arguments, the dtype table and
    the errors.
    """
