"""The FSDP plugin for Lightning Fabric: ``precision_fsdp.fabric.FSDPPrecision`` and ``FSDP2Strategy``.

One implementation, two thin adapters: the dtype plan, the scaler (user scaler, scaler options), the fp32 reduce
default, ``fully_shard``, ``check_finite_grads`` and ``max_skipped_steps`` are
[`FSDPPrecisionImpl`][precision_fsdp.implementation.FSDPPrecisionImpl]'s.
[`FabricFSDPPrecisionImpl`][precision_fsdp.fabric.FabricFSDPPrecisionImpl] only adapts what
differs in Fabric's loop:

* Fabric has no ``connect`` hook: the device autocast runs on is learned from the inputs in ``convert_input``
  (Fabric moves them to the strategy's device) and from the loss in ``backward``; the FSDP version and the
  scaler's kind and device are settled in ``backward`` before the loss is scaled;
* Fabric's ``optimizer_step(optimizer, **kwargs)`` has no closure: the step is Fabric's (the scaler steps and
  updates), watched for runs of skipped steps like the Trainer's;
* ``configure_strategy`` pairs the plugin with Fabric's strategies (``strategy="auto"`` ->
  [`FSDP2Strategy`][precision_fsdp.fabric.FSDP2Strategy]):
  the choice is [`precision_fsdp.selection.choose_fabric_strategy`][], beside the Trainer's.

Clip-by-norm needs nothing here: Fabric's ``clip_gradients`` unscales through the plugin, then clips the DTensor
gradients of FSDP2 by their exact global norm (``ModelParallelStrategy``), or calls FSDP1's ``clip_grad_norm_``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import lightning.fabric as lf
import torch
from lightning.fabric.strategies.model_parallel import ModelParallelStrategy as _FabricModelParallelStrategy
from typing_extensions import override

from precision_base.kit.plugin_support import bind_device_from_inputs
from precision_fsdp.implementation import FSDPPrecisionImpl
from precision_fsdp.loop_state import restorable_entries, restore_entries
from precision_fsdp.selection import choose_fabric_strategy
from precision_fsdp.sharding.strategy import FSDP2StrategyImpl
from precision_fsdp.sharding.units import fsdp_version_of, units_to_shard

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


class FabricFSDPPrecisionImpl(FSDPPrecisionImpl):
    """All Fabric-specific code of [`FSDPPrecision`][precision_fsdp.fabric.FSDPPrecision]; everything else is
    [`FSDPPrecisionImpl`][precision_fsdp.fabric.FSDPPrecisionImpl]'s (same
    arguments, dtypes and errors)."""

    @override
    def configure_strategy(self, strategy: Any, *, accelerator: Any, devices: Any) -> Any:
        """The Fabric strategy to use: ``"auto"`` -> [`FSDP2Strategy`][precision_fsdp.fabric.FSDP2Strategy] (FSDP2 over
        all processes, sharded by
        the plugin); any ``ModelParallelStrategy`` is kept; ``"fsdp"``/``FSDPStrategy`` (FSDP1) is kept off CPU and
        refused on CPU, and refused with its own ``mixed_precision=``; anything else raises
        [`TrainerConfigurationError`][precision_base.TrainerConfigurationError] naming what to pass.
        See [`precision_fsdp.selection.choose_fabric_strategy`][].
        """
        return choose_fabric_strategy(
            self.spec, self.lightning, strategy, accelerator=accelerator, fsdp2_strategy=FSDP2Strategy
        )

    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Fabric's ``setup_module`` calls this with the whole model before the strategy shards it (the Trainer
        calls it after): so `prepare_for_sharding` runs here on a model not sharded yet (``fp8-*`` converts
        its Linear layers, ``keep_fp32`` names are matched), then as the Trainer class.

        Warns (``*-true``, once), as the Trainer class does at ``connect``: Lightning's "FSDP with `16-true` enables
        computation in lower precision", whichever strategy or ``parallelize_fn`` shards the model."""
        if fsdp_version_of(module) is None:
            self.prepare_for_sharding(module)
        self._warn_true_precision()
        return super().convert_module(module)

    @override
    def convert_input(self, data: Any) -> Any:
        """Learn the compute device from the inputs (Fabric moved them there), then cast like the Trainer class."""
        bind_device_from_inputs(self, data)
        return super().convert_input(data)

    @override
    def backward(self, tensor: torch.Tensor, model: Optional[torch.nn.Module], *args: Any, **kwargs: Any) -> None:
        """Settle the FSDP version, device and scaler, then Fabric's backward (scaled by the scaler under
        ``16-mixed``)."""
        if model is not None:
            version = fsdp_version_of(model)
            if version is not None:
                self._fsdp_version = version
        if isinstance(tensor, torch.Tensor):  # Lightning's class takes whatever has backward(); so does this one
            self.bind_device(tensor.device)
        self._ready_scaler()
        super().backward(tensor, model, *args, **kwargs)  # type: ignore[arg-type]  # Fabric's, not the Trainer's

    @override
    def optimizer_step(self, optimizer: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Fabric's step (with a scaler: ``scaler.step`` skips a step with inf/NaN gradients, then ``update``),
        watched by ``max_skipped_steps``; with ``check_finite_grads``, a step with inf/NaN gradients on any rank is
        skipped on every rank.

        Warns ([`PrecisionPluginWarning`][precision_base.PrecisionPluginWarning], rank 0, once per optimizer: Fabric
        has no ``connect``): at an optimizer's first step, a hyperparameter that is 0 in the dtype of its parameters
        (Adam's ``eps=1e-8`` under ``16-true``; see [`precision_base.kit.numerics`][]).

        Raises:
            precision_base.errors.OverflowStormError: ``max_skipped_steps`` steps in a row were skipped.
        """
        self._underflow((optimizer,), self.spec, self._rank_zero_warn)
        self._sharded_init(optimizer, self.spec, self._rank_zero_warn)
        fabric_step = super(FSDPPrecisionImpl, self).optimizer_step  # Fabric's signature, not the Trainer's
        return self._steps.fabric_step(lambda: fabric_step(optimizer, **kwargs), optimizer, self.scaler, self.spec)


class FSDPPrecision(FabricFSDPPrecisionImpl, lf.plugins.precision.FSDPPrecision):  # type: ignore[misc]
    """Precision plugin for FSDP under Lightning Fabric (FSDP2 through ``ModelParallelStrategy``/
    [`FSDP2Strategy`][precision_fsdp.fabric.FSDP2Strategy], FSDP1 through ``FSDPStrategy``).

    The same arguments, dtype table and errors as the Trainer class
    [`precision_fsdp.plugin.FSDPPrecision`][]. The one line for a ``parallelize_fn``::

        def parallelize(module, device_mesh):
            return plugin.fully_shard(module, mesh=device_mesh["data_parallel"])
    """


class FabricFSDP2StrategyImpl(FSDP2StrategyImpl):
    """All code of the Fabric [`FSDP2Strategy`][precision_fsdp.fabric.FSDP2Strategy]: Fabric's ``ModelParallelStrategy``
    whose default
    ``parallelize_fn`` shards by `auto_wrap_policy` with the precision plugin's ``fully_shard``, data parallel
    over all processes (``tensor_parallel_size=1``). The arguments are those of the Trainer's
    [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy], plus ``parallelize_fn`` to replace the default sharding."""

    def __init__(self, *args: Any, parallelize_fn: Any = None, **kwargs: Any) -> None:
        shard = parallelize_fn or self._shard_by_policy

        def parallelize(module: torch.nn.Module, device_mesh: DeviceMesh) -> torch.nn.Module:
            sharded: torch.nn.Module = shard(module, device_mesh)
            if isinstance(sharded, torch.nn.Module):  # else Lightning refuses it, naming what it got
                self._materialize(sharded)
            return sharded

        super().__init__(*args, parallelize_fn=parallelize, **kwargs)

    @property  # type: ignore[misc]  # read-only here: Fabric's strategy keeps the plugin in `precision`
    def precision_plugin(self) -> Any:
        """Fabric's name for it is ``precision``; `shard` reads this one."""
        return self.precision  # type: ignore[attr-defined]

    @override
    def _expect_whole_model(self) -> None:
        """Nothing: Fabric has no LightningModule nor ``configure_model``; ``setup_module`` hands the whole model to
        ``parallelize_fn``, and the default one (`shard`) calls ``prepare_for_sharding`` with it."""

    @override
    def _units(self, model: torch.nn.Module) -> tuple[list[torch.nn.Module], set[int]]:
        """Exactly the units `auto_wrap_policy` selects
        ([`units_to_shard`][precision_fsdp.sharding.units.units_to_shard]): Fabric runs the model's forward, so the
        model's own unit gathers everything else, as FSDP1's wrap policy leaves it to the root."""
        return units_to_shard(model, self.auto_wrap_policy), set()

    def _shard_by_policy(self, module: torch.nn.Module, device_mesh: DeviceMesh) -> torch.nn.Module:
        self.shard(module)
        return module

    @override
    def load_checkpoint(  # type: ignore[override]  # typed against the Trainer's strategy; this is Fabric's
        self, path: Any, state: Any = None, strict: bool = True, weights_only: Optional[bool] = None
    ) -> dict[str, Any]:
        """Fabric's load, then every stateful entry of ``state`` (not a module or optimizer: a stateful dataloader,
        a sampler, a user's object with ``state_dict`` / ``load_state_dict``) gets ``load_state_dict`` with what was
        saved and stays the object the loop holds, from either layout. Lightning's sharded (folder) load puts the
        saved dict in its place instead, so the loop's own object would silently start again from scratch; its
        one-file load already restores it like this. Plain values are replaced, as Lightning does."""
        stateful = restorable_entries(state)
        load: Any = super().load_checkpoint  # Fabric's ModelParallelStrategy's, in the MRO
        remainder: dict[str, Any] = load(path, state, strict, weights_only=weights_only)
        restore_entries(state, stateful)
        return remainder


class FSDP2Strategy(FabricFSDP2StrategyImpl, _FabricModelParallelStrategy):  # type: ignore[misc]
    """Lightning Fabric's ``ModelParallelStrategy`` that shards with FSDP2 by a default policy (the plugin's dtypes),
    data parallel over all processes. See [`FabricFSDP2StrategyImpl`][precision_fsdp.fabric.FabricFSDP2StrategyImpl]."""


__all__ = [
    "FSDP2Strategy",
    "FSDPPrecision",
    "FabricFSDP2StrategyImpl",
    "FabricFSDPPrecisionImpl",
]
