"""The private methods of Lightning's two ``DeepSpeedStrategy`` classes that the CPU strategies replace, held here.

`TrainerStrategyHooks` (for ``lightning.pytorch``/``pytorch_lightning``) and `FabricStrategyHooks`
(for ``lightning.fabric``/``lightning_fabric``) override only private Lightning methods, and each override hands
over to a public-named method of [`precision_deepspeed.strategy.DeepSpeedCPUStrategyImpl`][], where the logic
is (``engine_rank``, ``on_cpu``, ``setup_cpu_distributed``, ``before_format_config``). A CPU strategy lists the
implementation mixin first, then the hooks of its door, then Lightning's class.

Importing this module imports no Lightning module (the Lightning bases exist for the type checker only).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Optional

from typing_extensions import override

from precision_deepspeed._compat.lightning import format_config_once, module_hooks_kept

if TYPE_CHECKING:
    import deepspeed
    from lightning.fabric.strategies.deepspeed import DeepSpeedStrategy as _FabricBase
    from lightning.pytorch.strategies import DeepSpeedStrategy as _TrainerBase
    from torch.nn import Module

    class _Delegates:
        """The methods of [`DeepSpeedCPUStrategyImpl`][precision_deepspeed.strategy.DeepSpeedCPUStrategyImpl] the hooks
        hand over to."""

        def on_cpu(self) -> bool: ...

        def engine_rank(self) -> AbstractContextManager[None]: ...

        def setup_cpu_distributed(self) -> None: ...

        def before_format_config(self) -> None: ...

    class _TrainerHooksBase(_Delegates, _TrainerBase): ...

    class _FabricHooksBase(_Delegates, _FabricBase): ...

else:
    _TrainerHooksBase = _FabricHooksBase = object  # at run time the concrete class supplies Lightning's class


class TrainerStrategyHooks(_TrainerHooksBase):
    """The Trainer's ``DeepSpeedStrategy``: the engines get a CPU device index, evaluation keeps the model's own
    hooks, and the plugin's section goes into the config before Lightning formats it."""

    @override
    def _setup_model_and_optimizer(
        self, model: Module, optimizer: Any, lr_scheduler: Any = None
    ) -> tuple[deepspeed.DeepSpeedEngine, Any]:
        with self.engine_rank():
            return super()._setup_model_and_optimizer(model, optimizer, lr_scheduler)

    @override
    def _initialize_deepspeed_inference(self, model: Module) -> None:
        """Lightning's evaluation engine, built after removing only DeepSpeed's own hooks from the model.

        Lightning's ``DeepSpeedStrategy`` empties every hook table of every module first (so the training
        engine's hooks do not run twice), which also deletes the hooks the model installed itself: after ``fit``,
        ``validate``/``test``/``predict`` on the same Trainer then ran a different model (a Hugging Face
        mixture-of-experts model lost the forward hooks that record its router logits and failed with
        ``IndexError: tuple index out of range`` in its load-balancing loss; a ``keep_fp32`` module lost its float32
        forward). Here only the hooks defined by DeepSpeed are removed
        (`precision_deepspeed._compat.remove_deepspeed_hooks`), on every accelerator.
        """
        with self.engine_rank(), module_hooks_kept(self):
            super()._initialize_deepspeed_inference(model)

    @override
    def _format_config(self) -> None:
        self.before_format_config()
        super()._format_config()


class FabricStrategyHooks(_FabricHooksBase):
    """Fabric's ``DeepSpeedStrategy``: the CPU distributed setup, the engine's CPU device index, and the plugin's
    section before Lightning formats the config."""

    @override
    def _setup_distributed(self) -> None:
        if not self.on_cpu():
            super()._setup_distributed()
            return
        self.setup_cpu_distributed()
        format_config_once(self)

    @override
    def _initialize_engine(
        self, model: Module, optimizer: Optional[Any] = None, scheduler: Optional[Any] = None
    ) -> tuple[deepspeed.DeepSpeedEngine, Any, Any]:
        with self.engine_rank():
            return super()._initialize_engine(model, optimizer, scheduler)

    @override
    def _format_config(self) -> None:
        self.before_format_config()
        super()._format_config()


__all__ = ["FabricStrategyHooks", "TrainerStrategyHooks"]
