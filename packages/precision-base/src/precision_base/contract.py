"""What every precision plugin is and what it declares.

A plugin distribution publishes two things:

* a [`PluginInfo`][precision_base.contract.PluginInfo] object, the value of its entry point in the
  ``precision_base.plugins`` group. It is
  plain data, cheap to import (no torch, Lightning or DeepSpeed), so that listing plugins stays fast;
* a plugin class, named by ``PluginInfo.plugin_class``, that derives from both a Lightning
  ``lightning.pytorch.plugins.precision.Precision`` and [`PrecisionPlugin`][precision_base.contract.PrecisionPlugin]
  below. Its constructor takes
  the canonical precision as first argument, and any further options by keyword.

The contract carries a version ([`CONTRACT_VERSION`][precision_base.contract.CONTRACT_VERSION]). A plugin whose info
declares another major
version is refused with [`ContractVersionError`][precision_base.errors.ContractVersionError] before its code is
imported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

from precision_base.errors import InvalidPluginInfoError, InvalidSpecError, SpecTypeError, UnsupportedPrecisionError
from precision_base.namespaces import door_of
from precision_base.spec import PRECISIONS, normalize_precision

if TYPE_CHECKING:
    from types import ModuleType

    import torch
    from lightning.pytorch.strategies import Strategy

CONTRACT_VERSION: int = 1
"""The version of this contract. A plugin declaring another version is refused."""

_BACKEND_RE = re.compile(r"[a-z][a-z0-9_-]*\Z")
_OBJECT_REF_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")


@dataclass(frozen=True)
class PluginInfo:
    """The cheap description of one backend, published as an entry point.

    Attributes:
        backend: the name users type before the colon, e.g. ``"fsdp"``; must equal the entry point's name.
        precisions: the canonical precisions the plugin offers.
        plugin_class: ``"module:QualName"`` of the plugin class; imported only when the plugin is resolved.
        strategy: a human-readable name of the Lightning strategy the plugin pairs with.
        requires: PEP 508 requirement strings checked before the plugin's code is imported,
            e.g. ``("deepspeed>=0.14",)``.
        contract_version: the [`CONTRACT_VERSION`][precision_base.contract.CONTRACT_VERSION] the plugin was built for.
        summary: one line for ``precision-plugins list``.
        extra_precisions: optional precisions beyond Lightning's five, each named by
            [`EXTRA_PRECISION_RULE`][precision_base.spec.EXTRA_PRECISION_RULE] (e.g. ``"fp8-tensorwise"``), as ``(name,
            base)`` pairs:
            ``base`` is the one of the five it behaves like outside its own feature (e.g. ``"bf16-mixed"``), which
            tools use for the dtypes of everything the extra precision does not change. ``()`` (the default) for
            plugins with none; old plugins are unaffected.
        fabric_class: optional ``"module:QualName"`` of the plugin's class for ``lightning.fabric.Fabric`` (derived
            from a ``lightning.fabric.plugins.precision`` class and
            [`PrecisionPlugin`][precision_base.contract.PrecisionPlugin]); ``""`` (the default)
            means the plugin offers no Fabric class, which Fabric doors say when asked for it.
        precision_extras: optional ``(precision, extra)`` pairs: the extra precision ``precision`` needs the
            distribution's optional extra ``extra`` (``pip install "<distribution>[<extra>]"``). The registry checks
            that extra's ``Requires-Dist`` lines against what is installed (metadata only, nothing imported); while
            they are unmet the precision is *unavailable*: ``resolve``, the Trainer and Fabric doors refuse it with
            the install line, ``precision-plugins list`` and ``doctor`` mark it and say why. ``()`` (the default):
            every precision needs only the distribution's own requirements.
        extra_imports: optional ``(extra, modules)`` pairs: modules an installed ``extra`` of ``precision_extras``
            must import. Asked only for those precisions (by ``resolve`` at both doors, ``list`` and ``doctor``):
            where one fails, the precision is *broken* here and they say so with the import error and the
            installed versions, never with an install line. ``()`` (the default): installed means usable.
        preference: where ``precision-plugins recommend`` ranks this backend among the installed ones that offer
            its suggested precision: lower first, ties by name. ``100`` (the default) for a plugin that does not say.
        extra_cuda_capability: optional ``(precision, (major, minor))`` pairs: the extra precision computes its
            matrix products only on a CUDA GPU of at least that compute capability (elsewhere it is emulated, for
            tests), which ``recommend`` says when it rules the name out.
        extra_notes: optional ``(precision, line)`` pairs: what the extra precision trades, one line, shown by
            ``recommend`` where the name is an alternative.
        extra_matmuls: optional ``(precision, family)`` pairs: the dtype family the extra precision's matrix
            products run in; ``"float8"`` makes the precision audit expect float8 matrix products in converted
            layers (and none elsewhere).
    """

    backend: str
    precisions: tuple[str, ...]
    plugin_class: str
    strategy: str = ""
    requires: tuple[str, ...] = ()
    contract_version: int = CONTRACT_VERSION
    summary: str = ""
    fabric_class: str = ""
    extra_precisions: tuple[tuple[str, str], ...] = ()
    precision_extras: tuple[tuple[str, str], ...] = ()
    extra_imports: tuple[tuple[str, tuple[str, ...]], ...] = ()
    preference: int = 100
    extra_cuda_capability: tuple[tuple[str, tuple[int, int]], ...] = ()
    extra_notes: tuple[tuple[str, str], ...] = ()
    extra_matmuls: tuple[tuple[str, str], ...] = ()

    @property
    def all_precisions(self) -> tuple[str, ...]:
        """``precisions`` followed by the names of ``extra_precisions``."""
        return (*self.precisions, *(name for name, _base in self.extra_precisions))

    def __post_init__(self) -> None:
        problems = _info_problems(self)
        if problems:
            raise InvalidPluginInfoError("invalid PluginInfo: " + "; ".join(problems))


def _info_problems(info: PluginInfo) -> list[str]:
    problems: list[str] = []
    if not isinstance(info.backend, str) or not _BACKEND_RE.match(info.backend):
        problems.append(f"backend must be a lowercase name matching [a-z][a-z0-9_-]*, got {info.backend!r}")
    if not isinstance(info.precisions, tuple) or not info.precisions:
        problems.append(f"precisions must be a non-empty tuple, got {info.precisions!r}")
    else:
        unknown = [p for p in info.precisions if p not in PRECISIONS]
        if unknown:
            problems.append(f"precisions {unknown!r} are not canonical; use names from {PRECISIONS}")
    if not isinstance(info.plugin_class, str) or not _OBJECT_REF_RE.match(info.plugin_class):
        problems.append(f"plugin_class must look like 'package.module:ClassName', got {info.plugin_class!r}")
    if not isinstance(info.fabric_class, str) or (info.fabric_class and not _OBJECT_REF_RE.match(info.fabric_class)):
        problems.append(f"fabric_class must be '' or look like 'package.module:ClassName', got {info.fabric_class!r}")
    problems += _extra_problems(info.extra_precisions)
    problems += _precision_extras_problems(info)
    problems += _extra_facts_problems(info)
    if not isinstance(info.requires, tuple) or not all(isinstance(r, str) for r in info.requires):
        problems.append(f"requires must be a tuple of requirement strings, got {info.requires!r}")
    if not isinstance(info.contract_version, int) or isinstance(info.contract_version, bool):
        problems.append(f"contract_version must be an int, got {info.contract_version!r}")
    for name in ("strategy", "summary"):
        if not isinstance(getattr(info, name), str):
            problems.append(f"{name} must be a string")
    return problems


def _extra_problems(extras: object) -> list[str]:
    from precision_base.spec import EXTRA_PRECISION_RULE, is_extra_precision_name

    if not isinstance(extras, tuple) or not all(isinstance(e, tuple) and len(e) == 2 for e in extras):
        return [f"extra_precisions must be a tuple of (name, base) pairs, got {extras!r}"]
    problems = []
    for name, base in extras:
        if not is_extra_precision_name(name):
            problems.append(f"extra precision {name!r} breaks the naming rule: {EXTRA_PRECISION_RULE}")
        if base not in PRECISIONS:
            problems.append(f"extra precision {name!r} has base {base!r}; the base must be one of {PRECISIONS}")
    return problems


def _extra_facts_problems(info: PluginInfo) -> list[str]:
    """``preference`` and the ``(precision, value)`` facts about extra precisions."""
    problems = []
    preference = getattr(info, "preference", 100)
    if not isinstance(preference, int) or isinstance(preference, bool):
        problems.append(f"preference must be an int (lower is preferred), got {preference!r}")
    extras = info.extra_precisions if isinstance(info.extra_precisions, tuple) else ()
    declared = {e[0] for e in extras if isinstance(e, tuple) and e}
    checks: dict[str, Callable[[Any], bool]] = {
        "extra_cuda_capability": lambda v: isinstance(v, tuple) and len(v) == 2 and all(type(x) is int for x in v),
        "extra_notes": lambda v: isinstance(v, str) and bool(v),
        "extra_matmuls": lambda v: isinstance(v, str) and bool(v),
    }
    for field_name, valid in checks.items():
        pairs = getattr(info, field_name, ())
        if not isinstance(pairs, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
            problems.append(f"{field_name} must be a tuple of (precision, value) pairs, got {pairs!r}")
            continue
        for precision, value in pairs:
            if precision not in declared:
                problems.append(f"{field_name} names {precision!r}, which is not one of extra_precisions")
            if not valid(value):
                problems.append(f"{field_name}: {value!r} for {precision!r} is not a valid value")
    return problems


_EXTRA_NAME_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?\Z")  # PEP 685 extra names


def _precision_extras_problems(info: PluginInfo) -> list[str]:
    pairs = getattr(info, "precision_extras", ())
    if not isinstance(pairs, tuple) or not all(isinstance(e, tuple) and len(e) == 2 for e in pairs):
        return [f"precision_extras must be a tuple of (precision, extra) pairs, got {pairs!r}"]
    extras = info.extra_precisions if isinstance(info.extra_precisions, tuple) else ()
    declared = [e[0] for e in extras if isinstance(e, tuple) and e]
    problems = []
    for precision, extra in pairs:
        if precision not in declared:
            problems.append(
                f"precision_extras names {precision!r}, which is not one of extra_precisions {tuple(declared)}"
            )
        if not isinstance(extra, str) or not _EXTRA_NAME_RE.match(extra):
            problems.append(
                f"precision_extras: {extra!r} is not the name of an extra (PEP 685: letters, digits, '.', '_' and '-')"
            )
    imports = getattr(info, "extra_imports", ())
    if not isinstance(imports, tuple) or not all(
        isinstance(e, tuple) and len(e) == 2 and isinstance(e[1], tuple) and all(isinstance(m, str) for m in e[1])
        for e in imports
    ):
        return [*problems, f"extra_imports must be a tuple of (extra, (module, ...)) pairs, got {imports!r}"]
    used = {extra for _precision, extra in pairs}
    problems += [
        f"extra_imports names the extra {extra!r}, which no precision_extras pair needs" for extra, _m in imports
        if extra not in used
    ]  # fmt: skip
    return problems


@dataclass(frozen=True)
class DtypeTable:
    """The dtype of each thing a precision plugin governs, as torch dtype names (``"bfloat16"``...).

    Attributes:
        parameters: dtype in which parameters are stored (the sharded/master copy the optimizer updates).
        compute: dtype in which the forward and backward matmuls run.
        reduction: dtype in which gradients are reduced across ranks.
        buffers: dtype of module buffers during compute.
        inputs: dtype floating-point inputs are cast to by ``convert_input``.
        init: dtype of floating tensors created under ``module_init_context`` / ``tensor_init_context``, and of
            parameters after ``convert_module`` (before the strategy wraps the module).
        autocast: dtype ``forward_context`` enables ``torch.autocast`` with, or ``None`` if it does not.
        notes: free-form remarks shown by ``precision-plugins show``.
    """

    parameters: str
    compute: str
    reduction: str
    buffers: str
    inputs: str
    init: str
    autocast: Optional[str] = None
    notes: tuple[str, ...] = field(default=())

    def rows(self) -> list[tuple[str, str]]:
        """``(role, dtype)`` pairs in display order."""
        return [
            (f.name, "-" if getattr(self, f.name) is None else str(getattr(self, f.name)))
            for f in fields(self)
            if f.name != "notes"
        ]


def _device_of(model: Any) -> Any:
    """The device a module computes on, or ``None`` if it has no parameters or sits on the meta device."""
    device = None
    try:
        device = next(iter(model.parameters())).device
    except (AttributeError, StopIteration, TypeError):
        device = getattr(model, "device", None)
    if device is None or getattr(device, "type", None) in (None, "meta"):
        return None
    return device


class _LightningRoot:
    """Descriptor behind [`PrecisionPlugin.lightning`][precision_base.contract.PrecisionPlugin.lightning]: works on the
    class and on instances."""

    def __get__(self, instance: object, owner: type) -> ModuleType:
        from precision_base.namespaces import lightning_root, namespace_of

        namespace = namespace_of(owner)
        if namespace is None:
            raise AttributeError(
                f"{owner.__qualname__} has no Lightning base class, so it belongs to no Lightning namespace; "
                "only a concrete plugin class (implementation mixin + a Lightning Precision class) has one"
            )
        return lightning_root(namespace)


class PrecisionPlugin:
    """Mixin every plugin class inherits next to Lightning's ``Precision``.

    Class attributes ``backend`` and ``precisions`` must match the plugin's
    [`PluginInfo`][precision_base.contract.PluginInfo]; the
    conformance kit checks that they do.

    A plugin package writes all its code in an implementation mixin deriving from this class only (it reaches
    Lightning's methods through ``super()`` and namespace-specific classes through
    [`lightning`][precision_base.contract.PrecisionPlugin.lightning]), and a
    concrete class that only lists bases: ``class FSDPPrecision(FSDPPrecisionImpl, lightning.pytorch.plugins.
    precision.FSDPPrecision)``. [`precision_base.namespaces.for_namespace`][] then builds the same class for
    ``pytorch_lightning``.

    Attributes:
        lightning_precision_error: optional ``str.format`` template of the message Lightning's own plugin raises for
            an unsupported precision (fields ``precision``, ``supported`` and ``door``: ``"Trainer"``, or
            ``"Fabric"`` for a class built on a Fabric precision class, for a message that names the call the user
            made, e.g. ``"`{door}(strategy=...)`"``);
            [`canonical_precision`][precision_base.contract.PrecisionPlugin.canonical_precision] puts it
            first, verbatim, before its own guidance.
    """

    backend: ClassVar[str]
    precisions: ClassVar[tuple[str, ...]]
    contract_version: ClassVar[int] = CONTRACT_VERSION
    lightning_precision_error: ClassVar[Optional[str]] = None
    extra_precisions: ClassVar[tuple[tuple[str, str], ...]] = ()

    precision: str

    lightning = _LightningRoot()
    """The root module of the Lightning namespace this class was built for: ``lightning.pytorch`` or
    ``pytorch_lightning``. Method bodies reach namespace-specific classes through it
    (``self.lightning.strategies.FSDPStrategy``) instead of importing ``lightning.pytorch`` directly."""

    def __repr__(self) -> str:
        """``FSDPPrecision('bf16-mixed')``: what Lightning's messages show where they print the plugin."""
        return f"{type(self).__qualname__}({getattr(self, 'precision', '?')!r})"

    @property
    def spec(self) -> str:
        """The plugin's name, ``"<backend>:<precision>"`` (e.g. ``"fsdp:bf16-mixed"``)."""
        return f"{self.backend}:{self.precision}"

    @classmethod
    def canonical_precision(cls, precision: object) -> str:
        """The canonical name of ``precision`` (Lightning's aliases ``"bf16"``, ``"16"``, ``"32"``, ``16``, ``32``
        included), checked against `precisions`. Plugins call it first thing in ``__init__``.

        Raises:
            UnsupportedPrecisionError: (a ``ValueError``) ``precision`` is not a precision, or not one this class
                offers; the message names the class and lists `precisions`.
        """
        if isinstance(precision, str) and precision in dict(cls.extra_precisions):
            return precision
        try:
            canonical: Optional[str] = normalize_precision(precision)
        except (InvalidSpecError, SpecTypeError):
            canonical = None
        if canonical in cls.precisions:
            assert canonical is not None
            return canonical
        shown = f"{precision!r} (that is {canonical!r})" if canonical is not None else repr(precision)
        ours = (
            f"{cls.__qualname__} does not support precision={shown}; it supports "
            + ", ".join(cls.precisions)
            + ' (Lightning\'s aliases "32", "16", "bf16", 32 and 16 are accepted for these).'
        )
        template = cls.lightning_precision_error
        if template:
            door = door_of(cls) or "Trainer"  # a mixin without a Lightning base: the Trainer's wording
            ours = template.format(precision=precision, supported=tuple(cls.precisions), door=door) + " " + ours
        raise UnsupportedPrecisionError(ours)

    def convert_output(self, data: Any) -> Any:
        """Cast every floating tensor in ``data`` (any nesting) to ``torch.get_default_dtype()`` (float32 by
        default); other values come back unchanged."""
        import torch

        from precision_base.kit.casting import cast_floating

        return cast_floating(data, torch.get_default_dtype())

    def bind_device(self, device: Union[str, torch.device]) -> None:
        """Tell the plugin which device type compute runs on (autocast is enabled for it).

        Plugins learn this themselves when Lightning connects them to a model; tests and custom loops call it.

        Warns (once per plugin, rank 0): a float16 precision set to compute on a CPU that only emulates float16
        ([`precision_base.kit.cpu_half`][]), naming the precision to use there instead.
        """
        self._device_type = device if isinstance(device, str) else device.type
        if self._device_type == "cpu":
            from precision_base.kit.cpu_half import warn_once_on_cpu

            warn_once_on_cpu(self)

    @property
    def device_type(self) -> str:
        """The device type ``forward_context`` enables autocast for (``"cpu"`` until told otherwise)."""
        return getattr(self, "_device_type", "cpu")

    def _rank_zero_warn(self, message: str, category: type[Warning]) -> None:
        """Lightning's ``rank_zero_warn`` of the plugin's namespace, looked up only when there is something to say
        (``self.lightning`` costs microseconds: step paths pass this method instead)."""
        self.lightning.utilities.rank_zero_warn(message, category=category)

    def connect(self, model: Any, optimizers: Any, lr_schedulers: Any) -> Any:
        """Lightning's hook when the strategy hands over the model: remember its device type, then defer.

        List this mixin before Lightning's ``Precision`` in the plugin's bases for this to run.
        """
        device = _device_of(model)
        if device is not None:
            self.bind_device(device)
        return super().connect(model, optimizers, lr_schedulers)  # type: ignore[misc]

    def dtypes(self) -> DtypeTable:
        """The dtype of parameters, compute, gradient reduction, buffers and inputs under this plugin."""
        raise NotImplementedError(f"{type(self).__name__} does not implement dtypes()")

    def describe(self) -> Mapping[str, Any]:
        """Extra facts for ``precision-plugins show`` (e.g. a DeepSpeed config section). Empty by default."""
        return {}

    def audit_collectives(self) -> tuple[tuple[Any, str, str], ...]:
        """Where the backend's engine keeps ``torch.distributed`` collectives of its own, for the audit to record.

        Optional: the default is none. The audit ([`precision_base.audit`][]) wraps ``torch.distributed``'s functions
        while it records; an engine that took a reference to one of them when it started (DeepSpeed's comm layer
        does) calls it past those wrappers. Each ``(owner, attribute, collective)`` names such a reference,
        ``getattr(owner, attribute)``, and the ``torch.distributed`` function it is (``"all_gather_into_tensor"``,
        ``"reduce_scatter_tensor"``, ...: a name in [`GATHERS`][precision_base.audit.collectives.GATHERS] or
        [`REDUCTIONS`][precision_base.audit.collectives.REDUCTIONS]). Asked when the audit starts recording.
        """
        return ()

    def precision_stats(self, strategy: Any = None) -> Mapping[str, float]:
        """Numbers about the numerics of training so far, for [`precision_base.PrecisionMonitor`][] to log.

        Optional: the default reports nothing (and the monitor then logs nothing). Keys a plugin may report, each only
        where it knows it (see [`precision_base.callbacks.monitor.STAT_KEYS`][]): ``"loss_scale"`` (the current loss
        scale), ``"skipped_steps"`` (optimizer steps skipped for inf/NaN gradients, cumulative),
        ``"nonfinite_grad_steps"`` (steps whose gradients held inf/NaN, cumulative) and ``"grad_norm"`` (the unscaled
        global gradient norm of the last step, where the plugin computed it anyway, e.g. for clipping).

        Args:
            strategy: the Lightning strategy running the plugin (the monitor passes ``trainer.strategy``), for
                plugins whose numbers live in the engine the strategy built (DeepSpeed); may be ``None``.
        """
        return {}

    def configure_strategy(
        self, strategy: Union[str, Strategy], *, accelerator: Any, devices: Any
    ) -> Union[str, Strategy]:
        """Check ``strategy`` against this plugin and return the strategy the Trainer should use.

        Called by [`precision_base.Trainer`][] before Lightning sees any argument. ``strategy="auto"`` is
        replaced by the backend's strategy where the hardware allows it; a strategy that cannot work with
        the plugin raises [`TrainerConfigurationError`][precision_base.errors.TrainerConfigurationError] saying what to
        pass.
        The default accepts everything unchanged.
        """
        return strategy
