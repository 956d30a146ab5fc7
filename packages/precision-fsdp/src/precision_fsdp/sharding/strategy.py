"""``FSDP2Strategy``: Lightning's ``ModelParallelStrategy`` that shards the model with FSDP2 by itself when the
LightningModule does not (no ``configure_model`` needed), over all processes.

This is what ``precision_plugin="fsdp:<precision>"`` with ``strategy="auto"`` trains with. A ``configure_model``
that applies ``fully_shard`` itself (or tensor parallelism) keeps full control: the strategy then shards nothing.

The whole Lightning lifecycle runs on one model: ``fit`` then ``validate`` / ``test`` / ``predict`` on the same Trainer
(the model is sharded once, by the first run), each of them alone on a fresh Trainer, with or without ``ckpt_path``
(Lightning's distributed checkpoint, consolidated by ``python -m lightning.fabric.utilities.consolidate_checkpoint``).
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Literal, Union

import lightning.pytorch as pl
from typing_extensions import override

from precision_fsdp._compat import (
    FSDPModule,
    configure_model_counted_as_overridden,
    fully_shard,
    mesh_sizes,
    set_data_parallel_size,
)
from precision_fsdp.sharding.sharded_init import MISSING_RESET, materialize
from precision_fsdp.sharding.units import (
    WrapPolicy,
    class_name,
    describe_units,
    fsdp_version_of,
    separate_roots,
    units_for_lightning,
    units_to_shard,
)

if TYPE_CHECKING:
    import torch
    from lightning.pytorch.strategies import ModelParallelStrategy as _LightningBase
else:
    _LightningBase = object  # at run time the concrete class supplies ModelParallelStrategy of its namespace

ActivationCheckpointing = Union[None, type, Collection[type]]
"""What ``FSDP2Strategy(activation_checkpointing=...)`` accepts: ``None``, a module class or a collection of them."""


class FSDP2StrategyImpl(_LightningBase):
    """All code of [`FSDP2Strategy`][precision_fsdp.sharding.strategy.FSDP2Strategy]; the concrete class adds
    Lightning's ``ModelParallelStrategy`` as base
    (for either Lightning namespace, see ``precision_base.namespaces``).

    See [`FSDP2Strategy`][precision_fsdp.sharding.strategy.FSDP2Strategy] for the arguments.
    """

    auto_wrap_policy: WrapPolicy
    checkpointed: list[str]
    """Qualified names of the modules ``activation_checkpointing`` applies to, once setup ran."""

    def __init__(
        self,
        auto_wrap_policy: WrapPolicy = None,
        data_parallel_size: Union[Literal["auto"], int] = "auto",
        tensor_parallel_size: Union[Literal["auto"], int] = 1,
        activation_checkpointing: ActivationCheckpointing = None,
        **kwargs: Any,
    ) -> None:
        import torch

        units_to_shard(torch.nn.Module(), auto_wrap_policy)  # refuses a policy of the wrong kind now, not in setup
        self._checkpoint_classes = checkpoint_classes(activation_checkpointing)
        super().__init__(  # type: ignore[call-arg]
            data_parallel_size=data_parallel_size, tensor_parallel_size=tensor_parallel_size, **kwargs
        )
        self.auto_wrap_policy = auto_wrap_policy
        self.activation_checkpointing = activation_checkpointing
        self.checkpointed = []

    @override
    def setup_environment(self) -> None:
        """Resolve ``data_parallel_size="auto"`` to all processes, then let Lightning build the device mesh."""
        data_parallel, tensor_parallel = mesh_sizes(self)
        if data_parallel == "auto" and tensor_parallel != "auto":
            processes = self.num_nodes * self.num_processes  # type: ignore[attr-defined]
            if processes % tensor_parallel:
                raise ValueError(
                    f"{type(self).__name__}(tensor_parallel_size={tensor_parallel}) does not divide the "
                    f"{processes} processes (num_nodes x devices); choose sizes whose product is {processes}"
                )
            set_data_parallel_size(self, processes // tensor_parallel)
        super().setup_environment()  # type: ignore[misc]
        self._expect_whole_model()

    def _expect_whole_model(self) -> None:
        """Trainer: before ``configure_model`` runs, tell the precision plugin the LightningModule that its
        ``fully_shard`` calls shard parts of. The Fabric strategy overrides this (Fabric has no LightningModule)."""
        expect = getattr(self.precision_plugin, "expect_model", None)  # type: ignore[attr-defined]
        if expect is not None:
            expect(self.lightning_module)  # type: ignore[attr-defined]

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        """Apply `activation_checkpointing`, shard the model by `auto_wrap_policy` unless it is sharded
        already (by ``configure_model``, by tensor parallelism, or by an earlier ``fit`` / ``validate`` / ``test`` /
        ``predict`` of this model), then run Lightning's ``ModelParallelStrategy.setup``.

        Raises:
            ValueError: ``activation_checkpointing`` names classes of which the model holds no instance.
        """
        model = self.model
        assert model is not None
        plugin = self.precision_plugin  # type: ignore[attr-defined]
        expect = getattr(plugin, "expect_model", None)
        if expect is not None:
            expect(None)  # configure_model has run
        self.checkpointed = apply_activation_checkpointing(model, self._checkpoint_classes)
        if fsdp_version_of(model) is None and not _has_dtensor_parameters(model):
            self.shard(model)
        reshard_after_gradless_forward(model)
        self._materialize(model)
        # Lightning's ModelParallelStrategy.setup refuses a LightningModule without configure_model; the model is
        # sharded by now, by this strategy (in this run or an earlier one) or by the user's configure_model
        with configure_model_counted_as_overridden(self.lightning_module):  # type: ignore[attr-defined]
            super().setup(trainer)  # type: ignore[misc]

    def shard(self, model: torch.nn.Module) -> None:
        """Apply FSDP2 to ``model``: each unit `auto_wrap_policy` selects (innermost first; by default the
        model's blocks, see [`precision_fsdp.sharding.units`][]), each direct child holding parameters outside those
        units ([`units_for_lightning`][precision_fsdp.sharding.units.units_for_lightning]), then ``model``. Rank 0 logs
        one line naming the units (``rank_zero_info``), e.g. "FSDP2Strategy: 4 FSDP2 units by the default policy
        (_no_split_modules: LlamaDecoderLayer): LlamaDecoderLayer x2, LlamaForCausalLM x1, then the root (Model)".

        The dtypes come from the precision plugin when it has a ``fully_shard`` method (``precision_fsdp``'s
        ``FSDPPrecision``); with any other precision plugin, FSDP2 keeps the parameters' own dtypes.

        Raises:
            ValueError: the device mesh has a tensor-parallel dimension larger than 1 (the default policy shards
                over the data-parallel dimension only; tensor parallelism belongs in ``configure_model``).
        """
        mesh = self.device_mesh  # type: ignore[attr-defined]
        if mesh["tensor_parallel"].size() > 1:
            raise ValueError(
                f"{type(self).__name__} shards by its default policy over the data-parallel dimension only, but the "
                f"mesh has tensor_parallel_size={mesh['tensor_parallel'].size()}. Apply tensor parallelism and "
                "fully_shard in LightningModule.configure_model, or use tensor_parallel_size=1."
            )
        plugin = self.precision_plugin  # type: ignore[attr-defined]
        shard_one = getattr(plugin, "fully_shard", None) or fully_shard
        prepare = getattr(plugin, "prepare_for_sharding", None)
        if prepare is not None:
            prepare(model)  # keep_fp32 names and fp8's first/last Linear are relative to the whole model
        units, roots = self._units(model)
        line = f"{type(self).__name__}: {describe_units(model, units, self.auto_wrap_policy)}"
        for unit in units:
            if id(unit) in roots:
                shard_one(unit, mesh=mesh["data_parallel"], reshard_after_forward=True)
            else:
                shard_one(unit, mesh=mesh["data_parallel"])
        shard_one(model, mesh=mesh["data_parallel"])
        chosen = {id(unit) for unit in units} | {id(model)}
        kept = Counter(class_name(m) for m in model.modules() if isinstance(m, FSDPModule) and id(m) not in chosen)
        if kept:
            listed = ", ".join(f"{name} x{count}" for name, count in kept.items())
            line += f"; {sum(kept.values())} modules kept in float32, a unit each ({listed})"
        pl.utilities.rank_zero_info(line)

    def _materialize(self, module: torch.nn.Module) -> None:
        """A sharded model left on the meta device by ``init_module(empty_init=True)``, on a CPU: initialised by
        [`precision_fsdp.sharding.sharded_init.materialize`][] (every rank gets its part of the values the unsharded
        model would get from the same seed); Lightning's own materialisation then finds nothing left to do. On
        accelerators, Lightning's (torch's RNG tracker keeps the ranks' draws apart there)."""
        if self.root_device.type != "cpu":  # type: ignore[attr-defined]
            return
        missing = materialize(module, self.root_device)  # type: ignore[attr-defined]
        if missing:
            pl.utilities.rank_zero_warn(MISSING_RESET.format(names=", ".join(missing)))

    def _units(self, model: torch.nn.Module) -> tuple[list[torch.nn.Module], set[int]]:
        """The units to shard before ``model`` (innermost first), and the ``id`` of those to reshard after their
        forward. Trainer: [`units_for_lightning`][precision_fsdp.sharding.units.units_for_lightning]; each outermost one
        of several is resharded after its forward, as Lightning runs no root forward
        ([`separate_roots`][precision_fsdp.sharding.units.separate_roots])."""
        units = units_for_lightning(model, self.auto_wrap_policy)
        return units, separate_roots(units)


def _has_dtensor_parameters(model: torch.nn.Module) -> bool:
    from precision_fsdp._compat import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


class FSDP2Strategy(FSDP2StrategyImpl, pl.strategies.ModelParallelStrategy):
    """Lightning's ``ModelParallelStrategy`` that shards with FSDP2 by a default policy when the LightningModule
    does not shard itself in ``configure_model``; data parallel over all processes by default.

    Args:
        auto_wrap_policy: which submodules become FSDP2 units when the LightningModule does not shard itself:
            ``None`` (blocks: ``_no_split_modules`` classes, else repeated same-class children of ``ModuleList`` /
            ``Sequential``; tied parameters in one unit), a set of module classes, a minimum number of parameters
            (int), or a callable with FSDP1's policy signature; the same meaning as ``FSDPStrategy``'s
            ``auto_wrap_policy`` (see [`precision_fsdp.sharding.units`][]). The LightningModule is always sharded last.
        data_parallel_size: size of the data-parallel (sharding) dimension. ``"auto"`` (default): every process
            (number of nodes x devices per node, divided by ``tensor_parallel_size``).
        tensor_parallel_size: size of the tensor-parallel dimension; default 1 (pure FSDP2). ``"auto"`` keeps
            Lightning's meaning (the devices of one node).
        activation_checkpointing: a module class, or a collection of them (usually the model's block class,
            e.g. ``(Block,)``), whose instances recompute their forward during backward instead of keeping their
            activations (``torch.utils.checkpoint``, non-reentrant): less memory for one more forward per block.
            Applied before sharding (and also to a model your ``configure_model`` shards), to the outermost
            matching modules; parameter names and checkpoints are unchanged. Default ``None`` (off).
            [`checkpointed`][precision_fsdp.sharding.strategy.FSDP2StrategyImpl.checkpointed] names the modules after
            setup.
        **kwargs: the other arguments of ``ModelParallelStrategy`` (``save_distributed_checkpoint``,
            ``process_group_backend``, ``timeout``).

    Lightning idioms that work under this strategy: ``fit`` then ``validate`` / ``test`` / ``predict`` on the same
    Trainer, or each on a fresh Trainer with ``ckpt_path``; several optimizers with manual optimization, with or
    without ``LightningModule.toggle_optimizer`` (a unit whose forward needs no backward, e.g. the frozen generator
    in a discriminator step, is resharded right after that forward, so the ``requires_grad`` that ``toggle_optimizer``
    sets on the sharded parameters is what its next forward uses); a ``configure_model`` that shards blocks through
    ``self.trainer.precision_plugin.fully_shard`` (``fp8-*`` converts the whole LightningModule's Linear layers at its
    first call, and ``keep_fp32`` names are matched against the whole LightningModule, without extra calls).

    Raises:
        TypeError, ValueError: ``auto_wrap_policy`` or ``activation_checkpointing`` is none of the accepted kinds.
    """


# -- activation checkpointing -----------------------------------------------------------------------------------------
def checkpoint_classes(value: ActivationCheckpointing) -> tuple[type[torch.nn.Module], ...]:
    """``activation_checkpointing`` as a tuple of module classes (empty: off).

    Raises:
        TypeError: ``value`` is not a module class or a collection of them, or names a container without
            ``forward`` (``nn.ModuleList``, ``nn.ModuleDict``), which has nothing to recompute.
    """
    import torch

    if value is None:
        return ()
    classes = (value,) if isinstance(value, type) else value
    if isinstance(classes, (str, bytes)) or not isinstance(classes, Collection):
        raise TypeError(f"activation_checkpointing={value!r}: {_AC_KINDS}")
    found: tuple[type[torch.nn.Module], ...] = tuple(c for c in classes if isinstance(c, type))
    if not found or len(found) != len(classes) or not all(issubclass(c, torch.nn.Module) for c in found):
        raise TypeError(f"activation_checkpointing={value!r}: {_AC_KINDS}")
    forwardless = [c.__name__ for c in found if c.forward is torch.nn.Module.forward]
    if forwardless:
        raise TypeError(
            f"activation_checkpointing={value!r} names {', '.join(forwardless)}, which has no forward to recompute; "
            "name the class of the blocks it holds instead"
        )
    return found


_AC_KINDS = "pass a torch.nn.Module subclass or a collection of them (the model's block class, e.g. (Block,)), or None"


class _CheckpointedForward:
    """A module's ``forward``, run under ``torch.utils.checkpoint`` (non-reentrant): its activations are not kept,
    the forward is run again during backward. Set as the instance's ``forward`` attribute, so FSDP2's hooks (on
    ``__call__``) stay outside: the unit is all-gathered again by FSDP2's pre-backward hook before the recompute.
    Holds the module (not a bound method) so that ``copy.deepcopy`` of the model copies it with the model."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(type(self.module).forward, self.module, *args, use_reentrant=False, **kwargs)


def is_checkpointed(module: torch.nn.Module) -> bool:
    """Whether ``activation_checkpointing`` applies to ``module``."""
    return isinstance(vars(module).get("forward"), _CheckpointedForward)


def apply_activation_checkpointing(model: torch.nn.Module, classes: tuple[type[torch.nn.Module], ...]) -> list[str]:
    """Make each outermost instance of ``classes`` in ``model`` recompute its forward during backward; return their
    qualified names (modules already checkpointed included). Idempotent.

    Raises:
        ValueError: ``model`` holds no instance of ``classes``.
    """
    if not classes:
        return []
    names: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(f"{outer}.") or outer == "" for outer in names):
            continue  # inside a checkpointed module: recomputed with it
        if isinstance(module, classes):
            if not is_checkpointed(module):
                module.forward = _CheckpointedForward(module)  # type: ignore[method-assign]
            names.append(name)
    if not names:
        held = sorted({type(m).__name__ for m in model.modules()})
        raise ValueError(
            f"activation_checkpointing=({', '.join(c.__name__ for c in classes)}) matches no module of "
            f"{type(model).__name__}; its module classes are: {', '.join(held)}"
        )
    return names


# -- requires_grad changes between steps (toggle_optimizer, freezing) --------------------------------------------------
_WATCHED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def reshard_after_gradless_forward(model: torch.nn.Module) -> None:
    """Reshard each FSDP2 unit of ``model`` right after a forward that no backward will follow.

    FSDP2 registers the unsharded parameters on the module for a forward, and copies ``requires_grad`` from the
    sharded parameters (those the optimizer holds, on which ``LightningModule.toggle_optimizer`` and freezing act)
    only when it all-gathers them. It reshards in the post-backward hook, or after the forward for a unit that is not
    its root. A root unit whose forward output needs no gradient (a generator run while its parameters are toggled
    off, or under ``torch.no_grad``) is never resharded: its next forward reuses the unsharded parameters with the old
    ``requires_grad``, and ``manual_backward`` fails with "element 0 of tensors does not require grad and does not
    have a grad_fn" (or a module unfrozen later never gets gradients). Resharding after such a forward makes the next
    forward all-gather again, with the current ``requires_grad``. A forward hook per unit, added once.
    """
    for module in model.modules():
        if isinstance(module, FSDPModule) and module not in _WATCHED:
            module.register_forward_hook(_reshard_if_no_backward)
            _WATCHED.add(module)


def _reshard_if_no_backward(module: torch.nn.Module, args: Any, output: Any) -> None:
    import torch

    if torch.is_grad_enabled() and _may_need_grad(output):
        return  # FSDP2 reshards it after backward (or already did, after this forward)
    module.reshard()  # type: ignore[operator]  # FSDPModule.reshard: a no-op when already sharded


def _may_need_grad(output: Any) -> bool:
    """Whether a backward may run through ``output``: a tensor that requires grad in it, or an object of a kind
    this does not look into."""
    import torch

    if isinstance(output, torch.Tensor):
        return output.requires_grad
    if output is None or isinstance(output, (int, float, bool, str)):
        return False
    if isinstance(output, (list, tuple)):
        return any(_may_need_grad(item) for item in output)
    if isinstance(output, Mapping):
        return any(_may_need_grad(item) for item in output.values())
    return True
