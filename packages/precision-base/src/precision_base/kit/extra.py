"""Extra precisions as features: one object per feature (e.g. FSDP's fp8), with the hook points a plugin calls.

An extra precision is a name beyond Lightning's five (``fp8-tensorwise``) that behaves like one of them (its *base*,
``bf16-mixed``) outside its own feature. A plugin declares each feature's names once, as
[`ExtraPrecisions`][precision_base.kit.extra.ExtraPrecisions]
(plain data: its ``_info.py`` reads the same object without torch, so `PluginInfo.extra_precisions` and
``precision_extras`` are derived from it), and implements the
feature as an [`ExtraPrecisionFeature`][precision_base.kit.extra.ExtraPrecisionFeature], whose hooks the plugin's
implementation calls at fixed points instead
of branching on the precision:

* [`check_sharding`][precision_base.kit.extra.ExtraPrecisionFeature.check_sharding]: the strategy was chosen, or the
  model's sharding is known (refuse one the feature cannot run on), and
  [`check_machine`][precision_base.kit.extra.ExtraPrecisionFeature.check_machine] (refuse a machine without the hardware
  or library the feature needs);
* [`prepare_model`][precision_base.kit.extra.ExtraPrecisionFeature.prepare_model]: the whole model is seen, before
  sharding (convert layers);
* [`check_model`][precision_base.kit.extra.ExtraPrecisionFeature.check_model]: the model is handed to Lightning (refuse
  one left unprepared);
* [`describe`][precision_base.kit.extra.ExtraPrecisionFeature.describe]: facts for ``precision-plugins show``;
* [`table`][precision_base.kit.extra.ExtraPrecisionFeature.table]: the plugin's dtype table, which the feature may
  annotate.

A precision without a feature gets [`NO_FEATURE`][precision_base.kit.extra.NO_FEATURE], whose hooks do nothing. A new
extra precision of an existing feature is one more name in its
[`ExtraPrecisions`][precision_base.kit.extra.ExtraPrecisions]; a new feature is one module with both objects.

Pure Python: importing this module imports none of torch, Lightning and DeepSpeed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable


@dataclass(frozen=True)
class ExtraPrecisions:
    """The extra precisions of one feature, as plain data.

    Attributes:
        feature: what the feature is called in messages and ``describe`` keys, e.g. ``"float8 (torchao)"``.
        bases: ``(name, base)`` pairs, e.g. ``(("fp8-tensorwise", "bf16-mixed"),)``: each extra precision and the
            one of Lightning's five it behaves like outside the feature.
        extra: the distribution's optional extra every name needs (``pip install "<dist>[<extra>]"``), or ``""``.
        imports: the modules of that extra every name needs at run time, e.g. ``("torchao.float8",)``: where the
            extra is installed but one of them fails to import, the names are *broken* there, reported with the
            import error and the installed versions (never with an install line: the extra is installed).
        cuda_capability: ``(name, (major, minor))``: the least CUDA compute capability the name computes on
            (`PluginInfo.extra_cuda_capability`).
        notes: ``(name, line)``: what the name trades, for ``recommend`` (`PluginInfo.extra_notes`).
        matmuls: the dtype family every name's matrix products run in (``"float8"``), or ``""``
            (`PluginInfo.extra_matmuls`).
    """

    feature: str
    bases: tuple[tuple[str, str], ...]
    extra: str = ""
    imports: tuple[str, ...] = ()
    cuda_capability: tuple[tuple[str, tuple[int, int]], ...] = ()
    notes: tuple[tuple[str, str], ...] = ()
    matmuls: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        """The extra precisions' names, in declaration order."""
        return tuple(name for name, _base in self.bases)

    @property
    def precision_extras(self) -> tuple[tuple[str, str], ...]:
        """``(name, extra)`` for every name, for `PluginInfo.precision_extras`; ``()`` without an extra."""
        return tuple((name, self.extra) for name in self.names) if self.extra else ()

    def __contains__(self, precision: object) -> bool:
        return precision in self.names

    def base_of(self, precision: str) -> str:
        """The base precision of ``precision``; ``precision`` itself when it is not one of these names."""
        return dict(self.bases).get(precision, precision)


def declared(*features: ExtraPrecisions) -> tuple[tuple[str, str], ...]:
    """Every ``(name, base)`` pair of ``features``, for `PluginInfo.extra_precisions`.

    Raises:
        ValueError: a name is declared twice.
    """
    pairs = [pair for feature in features for pair in feature.bases]
    names = [name for name, _base in pairs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"extra precisions declared twice: {twice}")
    return tuple(pairs)


def declared_extras(*features: ExtraPrecisions) -> tuple[tuple[str, str], ...]:
    """Every ``(name, extra)`` pair of ``features``, for `PluginInfo.precision_extras`."""
    return tuple(pair for feature in features for pair in feature.precision_extras)


def declared_imports(*features: ExtraPrecisions) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(extra, modules)`` of every feature with an extra and modules to import, for `PluginInfo.extra_imports`."""
    return tuple((feature.extra, feature.imports) for feature in features if feature.extra and feature.imports)


def declared_facts(*features: ExtraPrecisions) -> dict[str, Any]:
    """``extra_cuda_capability``, ``extra_notes`` and ``extra_matmuls`` of ``features``, as keyword arguments of
    [`PluginInfo`][precision_base.PluginInfo]."""
    return {
        "extra_cuda_capability": tuple(pair for feature in features for pair in feature.cuda_capability),
        "extra_notes": tuple(pair for feature in features for pair in feature.notes),
        "extra_matmuls": tuple((name, f.matmuls) for f in features if f.matmuls for name in f.names),
    }


def base_precision(precision: str, features: Iterable[ExtraPrecisions]) -> str:
    """The base of ``precision`` among ``features``' names; ``precision`` itself for Lightning's five."""
    for feature in features:
        if precision in feature:
            return feature.base_of(precision)
    return precision


@runtime_checkable
class ExtraPrecisionFeature(Protocol):
    """What a plugin's implementation calls on the feature of its precision (or on
    [`NO_FEATURE`][precision_base.kit.extra.NO_FEATURE]).

    ``plugin`` is the plugin instance; each hook reads what it needs from it (``plugin.spec``, ...).
    """

    declared: Optional[ExtraPrecisions]
    """The names of the feature, ``None`` for [`NO_FEATURE`][precision_base.kit.extra.NO_FEATURE]."""

    def check_sharding(self, plugin: Any, sharding: Any) -> None:
        """Raise when the feature cannot run under ``sharding`` (what the plugin knows of how the model is or will be
        sharded, e.g. FSDP's version: 1, 2 or ``None`` when not known yet)."""

    def check_machine(self, plugin: Any) -> None:
        """Raise when this machine cannot run the feature (a library or the hardware is missing)."""

    def prepare_model(self, plugin: Any, root: Any, *, exclude: Iterable[Any] = ()) -> None:
        """Prepare ``root``, the whole model, before it is sharded (e.g. convert its layers), leaving the modules in
        ``exclude`` (and what they hold) alone; the feature decides whether a second call does anything."""

    def check_model(self, plugin: Any, module: Any) -> None:
        """Raise when ``module``, as handed to Lightning, was not prepared."""

    def describe(self, plugin: Any) -> Mapping[str, Any]:
        """Facts for ``precision-plugins show`` (``{}``: nothing to add)."""

    def table(self, plugin: Any, table: Any) -> Any:
        """The plugin's dtype table (a [`DtypeTable`][precision_base.DtypeTable]), annotated or as it is."""


class _NoFeature:
    """The feature of a precision without one: every hook does nothing."""

    declared: Optional[ExtraPrecisions] = None

    def __repr__(self) -> str:
        return "NO_FEATURE"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "NO_FEATURE"  # unpickled (and deep-copied) as the one module-level instance

    def check_sharding(self, plugin: Any, sharding: Any) -> None:
        return None

    def check_machine(self, plugin: Any) -> None:
        return None

    def prepare_model(self, plugin: Any, root: Any, *, exclude: Iterable[Any] = ()) -> None:
        return None

    def check_model(self, plugin: Any, module: Any) -> None:
        return None

    def describe(self, plugin: Any) -> Mapping[str, Any]:
        return {}

    def table(self, plugin: Any, table: Any) -> Any:
        return table


NO_FEATURE: ExtraPrecisionFeature = _NoFeature()
"""The feature of Lightning's five precisions: hooks that do nothing (falsy, so ``if plugin.feature:`` reads well)."""

__all__ = [
    "NO_FEATURE",
    "ExtraPrecisionFeature",
    "ExtraPrecisions",
    "base_precision",
    "declared",
    "declared_extras",
]
