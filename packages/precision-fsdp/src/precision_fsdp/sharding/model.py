"""How the FSDP plugin shards a model with FSDP2 and keeps modules in float32:
[`ModelShardingMixin`][precision_fsdp.sharding.model.ModelShardingMixin].

The plugin's own methods a ``configure_model`` (or [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy]) calls:
[`fully_shard`][precision_fsdp.sharding.model.ModelShardingMixin.fully_shard],
[`prepare_for_sharding`][precision_fsdp.sharding.model.ModelShardingMixin.prepare_for_sharding],
[`expect_model`][precision_fsdp.sharding.model.ModelShardingMixin.expect_model] and
[`mark_keep_fp32`][precision_fsdp.sharding.model.ModelShardingMixin.mark_keep_fp32], and the ``keep_fp32`` part
of ``convert_module``. A base of [`FSDPPrecisionImpl`][precision_fsdp.implementation.FSDPPrecisionImpl], which sets the
state
declared here in its ``__init__``; it overrides no Lightning method.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Optional

import torch

from precision_base import PrecisionPlugin, PrecisionPluginWarning
from precision_base.doors import door_of
from precision_base.extra import ExtraPrecisionFeature
from precision_base.keep_fp32 import KeepFP32, install_fp32_forward, is_kept
from precision_fsdp import _compat
from precision_fsdp.errors import KeepFP32Error
from precision_fsdp.keep_fp32 import cast_except_kept_
from precision_fsdp.policy import DtypePlan, dtype_name
from precision_fsdp.sharding.units import NESTED_UNIT_MARK, FSDPVersion, fsdp_version_of, is_nested_unit, nested_units

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

KEEP_FP32_FSDP1 = (
    "keep_fp32 needs FSDP2 (fully_shard): FSDP1 (FSDPStrategy / strategy='fsdp') applies one MixedPrecision per "
    "wrapped unit and has no public per-module float32 override. Use strategy='auto' (precision_fsdp.FSDP2Strategy) "
    "or Lightning's ModelParallelStrategy, or drop keep_fp32."
)
"""The refusal of ``keep_fp32`` under FSDP1."""

LIGHTNING_TRUE_WARNING = "FSDP with `{precision}` enables computation in lower precision."
"""First sentence of Lightning's ``*-true`` warning, kept verbatim. Lightning's second sentence ("FSDP will always
retain a full-precision copy of the model parameters for sharding") is false here and in Lightning: the module is
cast to fp16/bf16 before FSDP shards it, so the sharded parameters are fp16/bf16. Ours says what is true instead."""


def cast_unsharded_(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """Cast, in place, the floating parameters and buffers of ``module`` that FSDP2 has not sharded yet."""
    for sub in module.modules():
        for param in sub.parameters(recurse=False):
            if not isinstance(param, _compat.DTensor) and param.is_floating_point() and param.dtype != dtype:
                param.data = param.data.to(dtype)
        for name, buf in list(sub.named_buffers(recurse=False)):
            if buf.is_floating_point() and buf.dtype != dtype:
                setattr(sub, name, buf.to(dtype))  # assigning to a buffer's name keeps it a (non-)persistent buffer


class ModelShardingMixin(PrecisionPlugin):
    """FSDP2 sharding with the plugin's dtypes, ``fp8-*`` preparation and ``keep_fp32`` units (see the module)."""

    _plan: DtypePlan
    _keep: KeepFP32
    _feature: ExtraPrecisionFeature
    _fsdp_version: Optional[FSDPVersion]
    _whole_model: Optional[torch.nn.Module]
    device_type: str

    _warned_true: bool

    def _warn_true_precision(self) -> None:
        """``*-true``, once: Lightning's first sentence, then what is true here."""
        if self._plan.mixed or self.precision == "32-true" or self._warned_true:
            return
        self._warned_true = True
        low = dtype_name(self._plan.storage)
        self.lightning.utilities.rank_zero_warn(
            LIGHTNING_TRUE_WARNING.format(precision=self.precision)
            + f" The sharded parameters, gradients and optimizer state are {low} as well (precision-fsdp keeps no "
            "full-precision copy); use the matching '-mixed' precision to keep fp32 parameters."
        )

    @property
    def mixed_precision_policy(self) -> _compat.MixedPrecisionPolicy:
        """FSDP2's ``MixedPrecisionPolicy`` of an outermost unit: ``param_dtype`` = compute dtype, ``reduce_dtype`` =
        reduce dtype, forward inputs cast to ``param_dtype``, outputs left in it. Under ``*-mixed``, a unit that
        [`fully_shard`][precision_fsdp.sharding.model.ModelShardingMixin.fully_shard] later finds inside another
        stops casting its inputs ([`DtypePlan.fsdp2_policy`][precision_fsdp.policy.DtypePlan.fsdp2_policy])."""
        return self._plan.fsdp2_policy()

    def fully_shard(self, module: torch.nn.Module, mesh: Optional[DeviceMesh] = None, **kwargs: Any) -> Any:
        """Shard ``module`` with FSDP2 using this plugin's dtypes; the one line a ``configure_model`` needs::

            def configure_model(self):
                for layer in self.model.layers:
                    self.trainer.precision_plugin.fully_shard(layer, mesh=self.device_mesh["data_parallel"])
                self.trainer.precision_plugin.fully_shard(self.model, mesh=self.device_mesh["data_parallel"])

        Parameters and buffers not yet sharded are first cast to the storage dtype (fp32 for ``32-true`` and
        ``*-mixed``, fp16/bf16 for ``*-true``); ``mp_policy`` is
        [`mixed_precision_policy`][precision_fsdp.sharding.model.ModelShardingMixin.mixed_precision_policy]. Other
        keyword
        arguments go to torch's ``fully_shard``. Returns the sharded module. (Without a ``configure_model``,
        [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy] calls this for you by its wrap policy.) Under
        [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy], the first call inside ``configure_model`` first runs
        [`prepare_for_sharding`][precision_fsdp.sharding.model.ModelShardingMixin.prepare_for_sharding] on the whole
        LightningModule (``fp8-*`` conversion, ``keep_fp32`` names).
        A module that is already sharded is returned as it is: Lightning calls ``configure_model`` again for
        ``validate`` / ``test`` / ``predict`` after ``fit``, and the model keeps the units of its first sharding.

        Warns (``*-true``, once), like Lightning's: "FSDP with `16-true` enables computation in lower precision."

        Raises:
            TypeError: ``mp_policy`` is passed (the dtypes come from the plugin and nowhere else).
        """
        if "mp_policy" in kwargs:
            raise TypeError(
                "FSDPPrecision.fully_shard() sets mp_policy from the plugin's precision; do not pass one (choose "
                "the precision and reduce_dtype on the plugin instead)"
            )
        if isinstance(module, _compat.FSDPModule):
            return module  # configure_model runs again for validate/test/predict after fit: sharded once, kept
        self._warn_true_precision()
        self._fsdp_version = 2
        if self._whole_model is not None and self._whole_model is not module:
            self.prepare_for_sharding(self._whole_model)  # names and first/last Linear relative to the whole model
        self._feature.prepare_model(self, module, exclude=self._kept_modules(module))
        if self._keep.active:
            for _name, kept, entry in self._keep.kept(module, skip=lambda m: isinstance(m, _compat.FSDPModule)):
                if isinstance(kept, _compat.FSDPModule):
                    continue
                self._keep_in_fp32(kept, entry)
                fp32 = _compat.MixedPrecisionPolicy(
                    param_dtype=torch.float32, reduce_dtype=torch.float32, cast_forward_inputs=True
                )
                cast_unsharded_(kept, torch.float32)
                _compat.fully_shard(kept, mesh=mesh, mp_policy=fp32, **kwargs)
                if kept is module:
                    return module
        cast_unsharded_(module, self._plan.storage)
        sharded = _compat.fully_shard(module, mesh=mesh, mp_policy=self.mixed_precision_policy, **kwargs)
        self._stop_nested_input_casts(module)
        return sharded

    def _stop_nested_input_casts(self, unit: torch.nn.Module) -> None:
        """The plugin's units that now run inside ``unit``'s forward
        ([`nested_units`][precision_fsdp.sharding.units.nested_units]) are marked nested and, under ``*-mixed``, stop
        casting their forward inputs ([`DtypePlan.fsdp2_policy`][precision_fsdp.policy.DtypePlan.fsdp2_policy]).
        Units sharded with another policy (``keep_fp32``'s float32 units, a user's own ``fully_shard``) are left as
        they are."""
        ours = self._plan.fsdp2_policy()
        for inner in nested_units(unit):
            if is_kept(inner) or is_nested_unit(inner) or _compat.fsdp2_policy(inner) != ours:
                continue
            setattr(inner, NESTED_UNIT_MARK, True)
            nested = self._plan.fsdp2_policy(nested=True)
            if nested != ours:
                _compat.set_fsdp2_policy(inner, nested)

    def _kept_modules(self, root: torch.nn.Module) -> Iterator[torch.nn.Module]:
        """The ``keep_fp32`` modules of ``root`` (lazily: walked only when a feature asks; keep_fp32 wins over fp8)."""
        for _name, module, _entry in self._keep.kept(root):
            yield module

    def prepare_for_sharding(self, root: torch.nn.Module) -> None:
        """Before sharding ``root``'s parts one by one: match ``keep_fp32`` names against the whole model and
        (``fp8-*``) convert its Linear layers to float8. [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy] calls it; a
        ``configure_model`` that shards children separately calls it with ``self`` first (under
        [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy] the first
        [`fully_shard`][precision_fsdp.sharding.model.ModelShardingMixin.fully_shard] call does it)."""
        self._whole_model = None
        self._keep.mark(root)
        self._feature.prepare_model(self, root, exclude=self._kept_modules(root))

    def expect_model(self, model: Optional[torch.nn.Module]) -> None:
        """The whole model that the next [`fully_shard`][precision_fsdp.sharding.model.ModelShardingMixin.fully_shard]
        calls shard parts of (``None``: forget it).
        [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy] passes the LightningModule before ``configure_model`` runs, so
        that
        the first [`fully_shard`][precision_fsdp.sharding.model.ModelShardingMixin.fully_shard] there calls
        [`prepare_for_sharding`][precision_fsdp.sharding.model.ModelShardingMixin.prepare_for_sharding] with it, and
        ``None`` after."""
        self._whole_model = model

    def mark_keep_fp32(self, root: torch.nn.Module) -> None:
        """Match ``keep_fp32`` names against ``root`` (the whole model) before sharding its parts one by one, so a
        kept module passed to [`fully_shard`][precision_fsdp.sharding.model.ModelShardingMixin.fully_shard] on its own
        is recognised. [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy]
        calls it; a ``configure_model`` that shards children separately calls it with ``self`` first."""
        self._keep.mark(root)

    def _keep_in_fp32(self, module: torch.nn.Module, entry: str) -> None:
        out = None if self._plan.mixed else self._plan.compute
        install_fp32_forward(module, entry, lambda: self.device_type, out)

    def _convert_kept(self, module: torch.nn.Module) -> Optional[torch.nn.Module]:
        """``convert_module``'s ``keep_fp32`` part: the converted module, or ``None`` when the rest of
        ``convert_module`` decides (no ``keep_fp32`` entry, or only default rules under ``*-mixed``)."""
        if self._keep:
            return self._convert_with_kept(module)
        if self._keep.active and fsdp_version_of(module) == 2:  # the default float32 rules are FSDP2's only
            if not self._plan.mixed:
                return self._convert_with_kept(module)
            self._check_default_kept(module)
        return None

    def _convert_with_kept(self, module: torch.nn.Module) -> torch.nn.Module:
        """``convert_module`` with ``keep_fp32``: hooks on every kept module, the rest cast to the storage dtype.

        Under ``*-true`` and ``32-true``, FSDP2 units sharded without the plugin (torch's own ``fully_shard`` in a
        ``configure_model``) hold sharded parameters in the dtype they had (float32): each unit that holds no kept
        parameter is cast as a whole (``unit.to(dtype=...)``, which re-registers its shards), as ``convert_module``
        casts a model without kept modules. A module that a default rule would keep but that was sharded inside
        another unit (warned about) computes as that unit does, so it is cast with it.

        Raises:
            KeepFP32Error: the model is FSDP2-sharded but a kept module with parameters was sharded inside another
                unit (it was not reached by
                [`fully_shard`][precision_fsdp.sharding.model.ModelShardingMixin.fully_shard] before its parent), so it
                cannot have its own policy; or (``*-true``) an FSDP2 unit sharded without the plugin holds a kept
                module and its own parameters in another dtype than the precision's: torch's public API casts a unit
                only with everything inside it, the kept module included.
        """
        found = self._keep.kept(module)
        sharded = fsdp_version_of(module) == 2
        kept_modules: list[torch.nn.Module] = []
        for name, kept, entry in found:
            has_params = any(True for _ in kept.parameters())
            if sharded and has_params and not is_kept(kept) and self._keep.is_default(entry):
                self._warn_default_not_kept(name, entry)
                continue
            if sharded and has_params and not is_kept(kept):
                plugin, model, where = _sharding_calls(self)
                raise KeepFP32Error(
                    f"keep_fp32 entry {entry} matches module {name!r}, but FSDP2 sharded it without the plugin's "
                    "float32 policy (inside another unit, or on its own with another policy), so it cannot keep "
                    f"float32 parameters. Shard through {plugin}.fully_shard(...) and call "
                    f"{plugin}.mark_keep_fp32({model}) first in {where}, or leave sharding to "
                    "strategy='auto' (FSDP2Strategy)."
                )
            self._keep_in_fp32(kept, entry)
            kept_modules.append(kept)
        if sharded and not self._plan.mixed:
            self._cast_units(module, kept_modules)
        cast_except_kept_(module, self._plan.storage, kept_modules)
        return module

    def _cast_units(self, root: torch.nn.Module, kept: list[torch.nn.Module]) -> None:
        """Cast the sharded parameters of ``root``'s FSDP2 units to the storage dtype: each outermost unit that holds
        no kept parameter with ``unit.to(dtype=...)`` (FSDP2's ``_apply`` re-registers the shards); inside a unit that
        holds kept parameters, its nested units the same way.

        Raises:
            KeepFP32Error: a unit holding a kept module has its own floating parameters (not a nested unit's, not
                kept) in another dtype.
        """
        target = self._plan.storage
        kept_params = {id(p) for m in kept for p in m.parameters()}

        def visit(name: str, sub: torch.nn.Module) -> None:
            if isinstance(sub, _compat.FSDPModule):
                params = list(sub.parameters())
                if not any(id(p) in kept_params for p in params):
                    if any(p.is_floating_point() and p.dtype != target for p in params):
                        sub.to(dtype=target)
                    return
                self._check_mixed_unit(name, sub, kept_params)
            for child_name, child in sub.named_children():
                visit(f"{name}.{child_name}" if name else child_name, child)

        visit("", root)

    def _check_mixed_unit(self, name: str, unit: torch.nn.Module, kept_params: set[int]) -> None:
        """Refuse a unit holding kept parameters whose own parameters are not in the storage dtype (see
        `_cast_units`)."""
        target = self._plan.storage
        nested = {
            id(p) for m in unit.modules() if m is not unit and isinstance(m, _compat.FSDPModule) for p in m.parameters()
        }
        own = [
            param_name
            for param_name, p in unit.named_parameters()
            if id(p) not in nested and id(p) not in kept_params and p.is_floating_point() and p.dtype != target
        ]
        if not own:
            return
        plugin, model, where = _sharding_calls(self)
        low = dtype_name(target)
        dtype = dtype_name(dict(unit.named_parameters())[own[0]].dtype)
        shown = ", ".join(own[:3]) + (f" and {len(own) - 3} more" if len(own) > 3 else "")
        unit_named = f"FSDP2 unit {name!r}" if name else "the FSDP2 unit of the whole model"
        raise KeepFP32Error(
            f"{self.spec}: {unit_named} was sharded without the plugin, so its "
            f"parameters ({shown}) are still {dtype}, and it holds a module kept in float32: casting the unit to "
            f"{low} would cast the kept module too, so as sharded the run cannot be {self.precision}. Shard it "
            f"through {plugin}.fully_shard(...) (it casts before sharding and gives each kept module its own float32 "
            f"unit) after {plugin}.mark_keep_fp32({model}) in {where}, or leave sharding to strategy='auto' "
            "(FSDP2Strategy)."
        )

    def _check_default_kept(self, module: torch.nn.Module) -> None:
        """``*-mixed``: warn about each module a default rule keeps that FSDP2 sharded without the plugin."""
        for name, kept, entry in self._keep.kept(module):
            if not is_kept(kept) and any(True for _ in kept.parameters()):
                self._warn_default_not_kept(name, entry)

    def _warn_default_not_kept(self, name: str, entry: str) -> None:
        plugin, model, _where = _sharding_calls(self)
        self.lightning.utilities.rank_zero_warn(
            f"{self.spec}: module {name!r} ({entry}) would be kept in float32 by default, but FSDP2 sharded it "
            "without the plugin (inside another unit or with another policy), so it computes as that unit does. If "
            "its forward fails with 'expected scalar type BFloat16 but found Float' (or Half), shard through "
            f"{plugin}.fully_shard(...) after {plugin}.mark_keep_fp32({model}), or "
            "leave sharding to strategy='auto' (FSDP2Strategy).",
            category=PrecisionPluginWarning,
        )


def _sharding_calls(plugin: Any) -> tuple[str, str, str]:
    """How the messages about sharding name the user's calls at the plugin's door: the plugin as the user's code
    reaches it, the whole model, and where sharding is written (``trainer.precision_plugin``, ``self``,
    ``configure_model`` at a Trainer; ``plugin``, ``model``, the ``parallelize_fn`` at Fabric)."""
    if door_of(plugin) == "Fabric":
        return "plugin", "model", "the parallelize_fn"
    return "trainer.precision_plugin", "self", "configure_model"


__all__ = ["KEEP_FP32_FSDP1", "LIGHTNING_TRUE_WARNING", "ModelShardingMixin", "cast_unsharded_"]
