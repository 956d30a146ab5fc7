"""The DeepSpeed plugin for Lightning Fabric: ``precision_deepspeed.fabric.DeepSpeedPrecision`` and
``DeepSpeedCPUStrategy``.

One implementation, two thin adapters: the precision section of DeepSpeed's config, its conflict errors, the loss
scaling options, ``torch_autocast``, the dtypes, the conversions, the strategy choice
([`precision_deepspeed.selection`][], for both doors) and the checkpoint record are
[`DeepSpeedPrecisionImpl`][precision_deepspeed.implementation.DeepSpeedPrecisionImpl]'s.
[`FabricDeepSpeedPrecisionImpl`][precision_deepspeed.fabric.FabricDeepSpeedPrecisionImpl] adapts only what differs in
Fabric's loop:
``backward`` and ``optimizer_step`` get Fabric's arguments (the engine itself, no closure), and the autocast device is
learned from the inputs in ``convert_input`` (Fabric has no ``connect``).

[`DeepSpeedCPUStrategy`][precision_deepspeed.fabric.DeepSpeedCPUStrategy] is Fabric's ``DeepSpeedStrategy`` usable on
``accelerator="cpu"`` (gloo, DeepSpeed's
CPU accelerator), stepping around the same three CUDA-only spots as the Trainer's
[`precision_deepspeed.DeepSpeedCPUStrategy`][], with the same code
([`DeepSpeedCPUStrategyImpl`][precision_deepspeed.strategy.DeepSpeedCPUStrategyImpl]; Fabric's private methods are
replaced in
`precision_deepspeed._compat.FabricStrategyHooks`); it writes the plugin's section into its config before
Lightning writes defaults. On other accelerators it is Lightning's class unchanged.
"""

from __future__ import annotations

from typing import Any

import lightning.fabric as lf
import torch
from lightning.fabric.strategies.deepspeed import DeepSpeedStrategy as _FabricDeepSpeedStrategy
from typing_extensions import override

from precision_base.kit.plugin_support import bind_device_from_inputs
from precision_deepspeed import _compat
from precision_deepspeed.errors import DeepSpeedPrecisionError, error_class, setup_alone_error
from precision_deepspeed.implementation import DeepSpeedPrecisionImpl
from precision_deepspeed.strategy import DeepSpeedCPUStrategyImpl


class FabricDeepSpeedPrecisionImpl(DeepSpeedPrecisionImpl):
    """All Fabric-specific code of [`DeepSpeedPrecision`][precision_deepspeed.fabric.DeepSpeedPrecision]; everything
    else is
    [`DeepSpeedPrecisionImpl`][precision_deepspeed.implementation.DeepSpeedPrecisionImpl]'s (same arguments, dtypes and
    errors)."""

    @override
    def convert_input(self, data: Any) -> Any:
        """Learn the compute device from the inputs, then cast like the Trainer class."""
        bind_device_from_inputs(self, data)
        return super().convert_input(data)

    @override
    def backward(self, tensor: torch.Tensor, model: Any, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """``engine.backward(tensor, ...)``: Fabric hands over the DeepSpeed engine; it scales, partitions and
        reduces the gradients."""
        model.backward(tensor, *args, **kwargs)

    @override
    def optimizer_step(self, optimizer: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """``optimizer.step(**kwargs)``, then the ``max_skipped_steps`` watch, as in the Trainer class. Fabric
        passes the engine or DeepSpeed's own optimizer (Lightning 2.6 passes the ZeRO optimizer): a skipped step is
        ``engine.was_step_applied()`` false for the one, the optimizer's overflow flag for the other.

        Warns ([`PrecisionPluginWarning`][precision_base.PrecisionPluginWarning], rank 0, once per optimizer), as the
        Trainer class: before the first step, a hyperparameter that is 0 in the dtype of the parameters DeepSpeed
        steps (see [`precision_deepspeed.steps`][]).

        Raises:
            precision_deepspeed.errors.DeepSpeedPrecisionError: (fp16) a step overflowed again at the lowest loss
                scale; DeepSpeed's message first, then what to do (the Trainer class's message).
            precision_deepspeed.errors.DeepSpeedOverflowStormError: ``max_skipped_steps`` steps in a row were
                skipped (a [`precision_base.OverflowStormError`][]).
        """
        self._check_numerics(optimizer)
        result = self._step_checked(lambda: optimizer.step(**kwargs))
        if hasattr(optimizer, "was_step_applied"):  # the engine
            self._count_skipped_step(optimizer)
        else:  # DeepSpeed's optimizer (what Fabric steps when it does not take the engine for an optimizer)
            self._count_skipped_optimizer_step(optimizer)
        return result


class DeepSpeedPrecision(FabricDeepSpeedPrecisionImpl, lf.plugins.precision.DeepSpeedPrecision):  # type: ignore[misc]
    """Precision plugin for DeepSpeed under Lightning Fabric.

    The same arguments, dtypes and errors as the Trainer class [`precision_deepspeed.DeepSpeedPrecision`][].
    """


class FabricDeepSpeedCPUStrategyImpl(DeepSpeedCPUStrategyImpl, _compat.FabricStrategyHooks):
    """What the Fabric [`DeepSpeedCPUStrategy`][precision_deepspeed.fabric.DeepSpeedCPUStrategy] adds to
    [`DeepSpeedCPUStrategyImpl`][precision_deepspeed.strategy.DeepSpeedCPUStrategyImpl]: the names
    [`write_plugin_config`][precision_deepspeed.strategy.write_plugin_config] reads."""

    @property
    def precision_plugin(self) -> Any:
        """The precision plugin (Fabric calls it ``precision``); `write_plugin_config` reads this name."""
        return self.precision

    @property
    def lightning_module(self) -> None:
        """Fabric has no LightningModule (and no Trainer ``gradient_clip_val``); `write_plugin_config` asks."""
        return None

    @override
    def setup_module(self, module: torch.nn.Module) -> Any:
        """Lightning's setup of a model alone (for inference), refused up front under ZeRO stage 1 or 2, where
        DeepSpeed cannot build an engine without the optimizer.

        Raises:
            precision_deepspeed.errors.DeepSpeedPrecisionError: (also Fabric's ``MisconfigurationException``) the
                stage needs the optimizer: [`setup_alone_error`][precision_deepspeed.errors.setup_alone_error].
        """
        stage = ((self.config or {}).get("zero_optimization") or {}).get("stage", 0)
        if stage in (1, 2):
            raise error_class(DeepSpeedPrecisionError, "lightning.fabric")(setup_alone_error(stage))
        return super().setup_module(module)  # type: ignore[misc]


class DeepSpeedCPUStrategy(FabricDeepSpeedCPUStrategyImpl, _FabricDeepSpeedStrategy):
    """Lightning Fabric's ``DeepSpeedStrategy``, usable with ``accelerator="cpu"``; takes every argument of
    ``lightning.fabric.strategies.DeepSpeedStrategy``. See
    [`FabricDeepSpeedCPUStrategyImpl`][precision_deepspeed.fabric.FabricDeepSpeedCPUStrategyImpl]."""


__all__ = [
    "DeepSpeedCPUStrategy",
    "DeepSpeedPrecision",
    "FabricDeepSpeedCPUStrategyImpl",
    "FabricDeepSpeedPrecisionImpl",
]
