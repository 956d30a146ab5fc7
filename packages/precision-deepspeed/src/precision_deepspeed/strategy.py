"""The one place the plugin's DeepSpeed config section reaches a strategy, and a DeepSpeed strategy for the CPU.

[`write_plugin_config`][precision_deepspeed.strategy.write_plugin_config] merges the precision plugin's section
([`precision_deepspeed.config`][]) and the
Trainer's ``gradient_clip_val`` into a DeepSpeed strategy's ``config``, once per strategy:

* in [`DeepSpeedCPUStrategy`][precision_deepspeed.strategy.DeepSpeedCPUStrategy], from its ``_format_config``, *before*
  Lightning writes its defaults (so ZeRO-3's
  ``deepspeed.zero.Init`` already sees the section);
* in Lightning's own ``DeepSpeedStrategy`` (what users on GPUs pass), from the plugin's ``connect``, which Lightning
  calls after it wrote its defaults: the keys Lightning added are told apart from the user's
  (`precision_deepspeed._compat.lightning_written_keys`) and give way to the plugin's section. Conflicts are
  looked for only in what the user wrote.

Lightning's ``DeepSpeedStrategy`` refuses the CPU in three places: ``setup_environment`` requires a
``CUDAAccelerator``; ``setup_distributed`` validates device indices, which are ``None`` for CPU devices; and the
engine is created with ``device_rank=root_device.index`` (``None`` on CPU), which DeepSpeed compares with 0.
[`DeepSpeedCPUStrategy`][precision_deepspeed.strategy.DeepSpeedCPUStrategy] steps around these three when its
accelerator is a CPU accelerator, and is Lightning's
``DeepSpeedStrategy`` unchanged on any other accelerator. DeepSpeed picks its CPU accelerator itself when no GPU is
visible, and gloo for the collectives. Its code,
[`DeepSpeedCPUStrategyImpl`][precision_deepspeed.strategy.DeepSpeedCPUStrategyImpl], is also that of Fabric's
[`precision_deepspeed.fabric.DeepSpeedCPUStrategy`][]; the private Lightning methods each door's strategy replaces
are held in `precision_deepspeed._compat.strategies`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Optional, Protocol, runtime_checkable

import lightning.pytorch as pl
import torch
from typing_extensions import override

from precision_base.kit.plugin_support import uses_cpu
from precision_base.namespaces import namespace_of
from precision_deepspeed import _compat
from precision_deepspeed.config import engine_mode, write_into_config
from precision_deepspeed.errors import DeepSpeedConfigConflictError
from precision_deepspeed.resume import check_resume

if TYPE_CHECKING:

    class _StrategyBase:
        """What the shared CPU code uses of Lightning's two ``DeepSpeedStrategy`` classes (for the type checker)."""

        @property
        def accelerator(self) -> Any: ...

        @accelerator.setter
        def accelerator(self, accelerator: Any) -> None: ...

        @property
        def global_rank(self) -> int: ...

        @property
        def local_rank(self) -> int: ...

        @property
        def root_device(self) -> torch.device: ...

        def setup_environment(self) -> None: ...

else:
    _StrategyBase = object  # at run time the concrete class supplies Lightning's DeepSpeedStrategy of its namespace

DeepSpeedStrategy = pl.strategies.DeepSpeedStrategy

#: Attribute set on a strategy once its config carries the plugin's section.
_WRITTEN = "_precision_deepspeed_section_written"


@runtime_checkable
class SectionOwner(Protocol):
    """What [`write_plugin_config`][precision_deepspeed.strategy.write_plugin_config] needs of a precision plugin
    (``DeepSpeedPrecision`` of either namespace)."""

    precision: str

    @property
    def spec(self) -> str: ...

    def precision_section(self) -> dict[str, Any]: ...


def write_plugin_config(strategy: Any) -> Optional[float]:
    """Merge the strategy's precision plugin's section and the Trainer's clip value into ``strategy.config``, once.

    Does nothing when the strategy's precision plugin does not render a DeepSpeed section, or the strategy has no
    dict config. Returns the ``gradient_clipping`` DeepSpeed will use (``None`` when the config sets none).

    Raises:
        precision_deepspeed.errors.DeepSpeedConfigConflictError: the user's config, or a loss-scaling argument given
            to the strategy, contradicts the plugin or the Trainer.
    """
    plugin = strategy.precision_plugin
    config = getattr(strategy, "config", None)
    if not isinstance(plugin, SectionOwner) or not isinstance(config, dict):
        return None
    if not getattr(strategy, _WRITTEN, False):
        trainer = _compat.trainer_of(getattr(strategy, "lightning_module", None))  # Fabric strategies have none
        write_into_config(
            config,
            plugin.precision_section(),
            owner=plugin.spec,
            lightning_keys=_compat.lightning_written_keys(strategy),
            strategy_loss_scaling=_compat.strategy_loss_scaling(strategy),
            gradient_clip_val=getattr(trainer, "gradient_clip_val", None),
        )
        setattr(strategy, _WRITTEN, True)
        _check_zero3_parameters(strategy, plugin.spec, engine_mode(config))
    clip = config.get("gradient_clipping")
    return float(clip) if clip is not None else None


_MODE_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _check_zero3_parameters(strategy: Any, owner: str, mode: str) -> None:
    """Refuse ZeRO-3 parameters that ``deepspeed.zero.Init`` already created in another dtype than ``mode`` needs.

    With Lightning's own ``DeepSpeedStrategy``, a ``configure_model`` hook runs under ``deepspeed.zero.Init`` with the
    config Lightning formatted *before* the plugin was connected, so its parameters are partitioned in the dtype of
    Lightning's default section; DeepSpeed later fails on them with a bare ``AssertionError``.
    """
    module = getattr(strategy, "lightning_module", None)
    wanted = _MODE_DTYPES.get(mode, torch.float32)
    found = _compat.zero3_partition_dtypes(module) if module is not None else set()
    wrong = sorted(str(dtype).removeprefix("torch.") for dtype in found if dtype != wanted)
    if wrong:
        raise DeepSpeedConfigConflictError(
            f"{owner} needs DeepSpeed's {mode} mode, whose ZeRO-3 parameters are "
            f"{str(wanted).removeprefix('torch.')}, but deepspeed.zero.Init already created the parameters of "
            f"configure_model in {', '.join(wrong)}: Lightning's DeepSpeedStrategy formats its config (with a default "
            "fp16/bf16 section) before the precision plugin is connected. Put the plugin's section into the "
            "strategy's config yourself (DeepSpeedStrategy(config={..., **plugin.precision_section()})), or use "
            "precision_deepspeed.DeepSpeedCPUStrategy (same arguments, CPU or GPUs), which writes it first."
        )


def section_written(strategy: Any) -> bool:
    """Whether [`write_plugin_config`][precision_deepspeed.strategy.write_plugin_config] has written into ``strategy``'s
    config."""
    return bool(getattr(strategy, _WRITTEN, False))


def announce_cpu_op_build(global_rank: int, namespace: str) -> Optional[str]:
    """Log, on rank 0 at INFO under ``<namespace>.precision_deepspeed``, that DeepSpeed is about to compile its CPU
    communication op (the first DeepSpeed run on a machine is otherwise silent for a minute or two). Call it just
    before ``deepspeed.init_distributed`` on a CPU accelerator. Returns the message, or ``None`` when nothing will be
    compiled (see `precision_deepspeed._compat.cpu_comm_op_build`)."""
    import logging

    pending = _compat.cpu_comm_op_build()
    if pending is None:
        return None
    name, folder = pending
    message = (
        f"precision-deepspeed: DeepSpeed is compiling its CPU op {name} once (about a minute or two); "
        f"later runs reuse it from {folder} (TORCH_EXTENSIONS_DIR chooses the folder)"
    )
    if global_rank == 0:
        logging.getLogger(f"{namespace}.precision_deepspeed").info(message)
    return message


def guard_resume(strategy: Any, plugin: Any) -> None:
    """Make a strategy without its own resume check (Lightning's ``DeepSpeedStrategy``) refuse, before DeepSpeed's
    loader runs, a checkpoint saved under another DeepSpeed precision mode while training resumes.

    Wraps ``strategy.load_checkpoint`` on that instance only (once), so Lightning's class is untouched; a
    [`DeepSpeedCPUStrategy`][precision_deepspeed.strategy.DeepSpeedCPUStrategy] checks in its own ``load_checkpoint``
    and is left alone. Also wraps the instance's
    ``_initialize_deepspeed_inference`` so that evaluation after ``fit`` removes only DeepSpeed's module hooks, as
    [`DeepSpeedCPUStrategy`][precision_deepspeed.strategy.DeepSpeedCPUStrategy] does. Without this, resuming a
    bf16 checkpoint under fp32/fp16 (or the reverse) fails in DeepSpeed with a raw ``FileNotFoundError`` about
    ``bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt``.

    Args:
        strategy: the Trainer's strategy.
        plugin: the precision plugin; its ``_fitting`` flag (set in ``connect``) says whether training resumes.
    """
    if isinstance(strategy, TrainerDeepSpeedCPUStrategyImpl) or getattr(strategy, "_precision_resume_guard", False):
        return
    _compat.keep_module_hooks_in_evaluation(strategy)
    load = strategy.load_checkpoint

    def load_checkpoint(checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(plugin, "_fitting", False):
            check_resume(plugin, checkpoint_path)
        return load(checkpoint_path, *args, **kwargs)

    strategy.load_checkpoint = load_checkpoint
    strategy._precision_resume_guard = True


class DeepSpeedCPUStrategyImpl(_StrategyBase):
    """All code both DeepSpeed CPU strategies share (the Trainer's
    [`DeepSpeedCPUStrategy`][precision_deepspeed.strategy.DeepSpeedCPUStrategy] and Fabric's
    [`precision_deepspeed.fabric.DeepSpeedCPUStrategy`][]); the private Lightning methods each door's strategy
    replaces are in `precision_deepspeed._compat.strategies` and hand over to the methods here."""

    _engine_rank_scope: bool = False

    def on_cpu(self) -> bool:
        """Whether the strategy runs on a CPU accelerator (then it steps around Lightning's CUDA-only spots)."""
        return self.accelerator is not None and uses_cpu(self.accelerator)

    @override
    def setup_environment(self) -> None:
        if not self.on_cpu():
            super().setup_environment()
            return
        # DeepSpeedStrategy's override only adds the CUDA check; run the DDP-level setup it would defer to
        _compat.base_method(self, "DeepSpeedStrategy", "setup_environment")()

    def setup_cpu_distributed(self) -> None:
        """On CPU, Lightning's distributed setup without its device-index check (CPU devices carry no index):
        seed, ranks, the CPU op build notice, DeepSpeed's process group."""
        _compat.reset_seed(self)
        _compat.set_world_ranks(self)
        announce_cpu_op_build(self.global_rank, namespace_of(self) or "lightning.pytorch")
        _compat.init_deepspeed_distributed(self)

    @property
    @override
    def root_device(self) -> torch.device:
        device = super().root_device
        if self._engine_rank_scope and device.type == "cpu" and device.index is None:
            # read only by deepspeed.initialize(args=Namespace(device_rank=root_device.index)): give it the rank
            return torch.device("cpu", self.local_rank)
        return device

    @contextlib.contextmanager
    def engine_rank(self) -> Iterator[None]:
        """Within the block (``deepspeed.initialize``), on CPU, `root_device` carries the local rank."""
        self._engine_rank_scope = self.on_cpu()
        try:
            yield
        finally:
            self._engine_rank_scope = False

    def before_format_config(self) -> None:
        """Before Lightning formats the config: the plugin's section goes in
        ([`write_plugin_config`][precision_deepspeed.strategy.write_plugin_config])."""
        write_plugin_config(self)


class TrainerDeepSpeedCPUStrategyImpl(DeepSpeedCPUStrategyImpl, _compat.TrainerStrategyHooks):
    """What the Trainer's CPU strategy adds to
    [`DeepSpeedCPUStrategyImpl`][precision_deepspeed.strategy.DeepSpeedCPUStrategyImpl]: its distributed setup and the
    resume check before DeepSpeed's loader."""

    @override
    def setup_distributed(self) -> None:
        if not self.on_cpu():
            super().setup_distributed()
            return
        self.setup_cpu_distributed()

    @override
    def load_checkpoint(self, checkpoint_path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Lightning's loader, after refusing a checkpoint saved under another DeepSpeed precision mode.

        Raises:
            precision_deepspeed.errors.CheckpointPrecisionError: resuming training from a checkpoint whose DeepSpeed
                precision mode differs from the plugin's (before DeepSpeed's own loader fails or goes on silently).
        """
        module = self.lightning_module
        fitting = module is not None and getattr(module.trainer.state, "fn", None) == "fit"
        if fitting and isinstance(self.precision_plugin, SectionOwner):
            check_resume(self.precision_plugin, checkpoint_path)
        return super().load_checkpoint(checkpoint_path, *args, **kwargs)  # weights_only: Lightning >= 2.5.1


class DeepSpeedCPUStrategy(TrainerDeepSpeedCPUStrategyImpl, DeepSpeedStrategy):  # type: ignore[misc]
    """Lightning's ``DeepSpeedStrategy``, usable with ``accelerator="cpu"`` (gloo, DeepSpeed's CPU accelerator).

    Takes every argument of ``lightning.pytorch.strategies.DeepSpeedStrategy``. On a non-CPU accelerator it
    behaves like Lightning's class, except that evaluation after ``fit`` keeps the model's own (non-DeepSpeed)
    module hooks (see `precision_deepspeed._compat.TrainerStrategyHooks._initialize_deepspeed_inference`).
    When its precision plugin is a [`precision_deepspeed.DeepSpeedPrecision`][], the plugin's precision section
    is merged into the config before Lightning formats it, so ZeRO-3's ``deepspeed.zero.Init`` already sees it.
    """


def user_config_conflicts(strategy: Any, section: Mapping[str, Any]) -> list[str]:
    """Contradictions between the config the user gave ``strategy`` (not yet formatted) and ``section``."""
    from precision_deepspeed.config import precision_conflicts

    config = getattr(strategy, "config", None)
    if not isinstance(config, dict) or _compat.config_formatted(strategy):
        return []
    return precision_conflicts(config, section)


__all__ = [
    "DeepSpeedCPUStrategy",
    "DeepSpeedCPUStrategyImpl",
    "SectionOwner",
    "TrainerDeepSpeedCPUStrategyImpl",
    "announce_cpu_op_build",
    "guard_resume",
    "section_written",
    "user_config_conflicts",
    "write_plugin_config",
]
