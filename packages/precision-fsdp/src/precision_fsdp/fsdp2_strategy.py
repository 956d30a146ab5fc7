"""``FSDP2Strategy``: Lightning's ``ModelParallelStrategy`` that shards the model with FSDP2 by itself when the
LightningModule does not (no ``configure_model`` needed), over all processes.

This is what ``precision_plugin="fsdp:<precision>"`` with ``strategy="auto"`` trains with. A ``configure_model``
that applies ``fully_shard`` itself (or tensor parallelism) keeps full control: the strategy then shards nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Union

import lightning.pytorch as pl
from typing_extensions import override

from precision_fsdp._compat import (
    configure_model_counted_as_overridden,
    fully_shard,
    mesh_sizes,
    set_data_parallel_size,
)
from precision_fsdp.sharding import (
    WrapPolicy,
    count_units,
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


class FSDP2StrategyImpl(_LightningBase):
    """All code of :class:`FSDP2Strategy`; the concrete class adds Lightning's ``ModelParallelStrategy`` as base
    (for either Lightning namespace, see ``precision_base.namespaces``).

    Args:
        auto_wrap_policy: which submodules become FSDP2 units when the LightningModule does not shard itself:
            ``None`` (blocks: ``_no_split_modules`` classes, else repeated same-class children of ``ModuleList`` /
            ``Sequential``; tied parameters in one unit), a set of module classes, a minimum number of parameters
            (int), or a callable with FSDP1's policy signature; the same meaning as ``FSDPStrategy``'s
            ``auto_wrap_policy`` (see :mod:`precision_fsdp.sharding`). The LightningModule is always sharded last.
        data_parallel_size: size of the data-parallel (sharding) dimension. ``"auto"`` (default): every process
            (number of nodes x devices per node, divided by ``tensor_parallel_size``).
        tensor_parallel_size: size of the tensor-parallel dimension; default 1 (pure FSDP2). ``"auto"`` keeps
            Lightning's meaning (the devices of one node).
        **kwargs: the other arguments of ``ModelParallelStrategy`` (``save_distributed_checkpoint``,
            ``process_group_backend``, ``timeout``).

    Raises:
        TypeError, ValueError: ``auto_wrap_policy`` is none of the accepted kinds.
    """

    auto_wrap_policy: WrapPolicy

    def __init__(
        self,
        auto_wrap_policy: WrapPolicy = None,
        data_parallel_size: Union[Literal["auto"], int] = "auto",
        tensor_parallel_size: Union[Literal["auto"], int] = 1,
        **kwargs: Any,
    ) -> None:
        import torch

        units_to_shard(torch.nn.Module(), auto_wrap_policy)  # refuses a policy of the wrong kind now, not in setup
        super().__init__(  # type: ignore[call-arg]
            data_parallel_size=data_parallel_size, tensor_parallel_size=tensor_parallel_size, **kwargs
        )
        self.auto_wrap_policy = auto_wrap_policy

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

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        """Shard the model by :attr:`auto_wrap_policy` unless ``configure_model`` already applied FSDP or tensor
        parallelism, then run Lightning's ``ModelParallelStrategy.setup``."""
        model = self.model
        assert model is not None
        if fsdp_version_of(model) is not None or _has_dtensor_parameters(model):
            super().setup(trainer)  # type: ignore[misc]
            return
        self.shard(model)
        with configure_model_counted_as_overridden(self.lightning_module):  # type: ignore[attr-defined]
            super().setup(trainer)  # type: ignore[misc]

    def shard(self, model: torch.nn.Module) -> None:
        """Apply FSDP2 to ``model``: each unit :attr:`auto_wrap_policy` selects (innermost first; by default the
        model's blocks, see :mod:`precision_fsdp.sharding`), each direct child holding parameters outside those units
        (:func:`~precision_fsdp.sharding.units_for_lightning`), then ``model``. Rank 0 logs one line naming the units
        (``rank_zero_info``), e.g. "FSDP2Strategy: 4 FSDP2 units by the default policy (_no_split_modules:
        LlamaDecoderLayer): LlamaDecoderLayer x2, LlamaForCausalLM x1, then the root (Model)".

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
        units = units_for_lightning(model, self.auto_wrap_policy)
        line = f"{type(self).__name__}: {describe_units(model, units, self.auto_wrap_policy)}"
        roots = separate_roots(units)  # Lightning runs no root forward: each would stay gathered until its backward
        for unit in units:
            if id(unit) in roots:
                shard_one(unit, mesh=mesh["data_parallel"], reshard_after_forward=True)
            else:
                shard_one(unit, mesh=mesh["data_parallel"])
        shard_one(model, mesh=mesh["data_parallel"])
        kept = count_units(model) - len(units) - 1
        pl.utilities.rank_zero_info(line + (f"; {kept} modules kept in float32, a unit each" if kept > 0 else ""))


def _has_dtensor_parameters(model: torch.nn.Module) -> bool:
    from precision_fsdp._compat import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


class FSDP2Strategy(FSDP2StrategyImpl, pl.strategies.ModelParallelStrategy):
    """Lightning's ``ModelParallelStrategy`` that shards with FSDP2 by a default policy when the LightningModule
    does not shard itself in ``configure_model``; data parallel over all processes by default.

    See :class:`FSDP2StrategyImpl` for the arguments.
    """
