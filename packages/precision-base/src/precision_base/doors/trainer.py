"""What turns ``precision_plugin=`` (and plugin names in ``plugins=``) into arguments a Lightning Trainer accepts.

Two public forms, for both Lightning namespaces (``lightning.pytorch`` and ``pytorch_lightning``):

* [`PrecisionPluginTrainerMixin`][precision_base.doors.trainer.PrecisionPluginTrainerMixin], listed before a Lightning
  ``Trainer`` class in the bases of a Trainer
  class (``precision_base.Trainer`` and ``precision_base.pytorch_lightning.Trainer`` are exactly that). It finds
  the namespace from the class it is mixed into, honours ``PL_<CLASS>_<ARGUMENT>`` environment defaults the way
  Lightning's Trainer does (``PL_TRAINER_PRECISION_PLUGIN`` included), and calls
  [`prepare_trainer_kwargs`][precision_base.doors.trainer.prepare_trainer_kwargs].
* [`prepare_trainer_kwargs`][precision_base.doors.trainer.prepare_trainer_kwargs], for a Trainer subclass that writes
  its own ``__init__``.

The steps both doors share are [`precision_base.doors.combine.combine_door_kwargs`][], driven by
[`TRAINER`][precision_base.doors.trainer.TRAINER].
Importing this module imports no Lightning module; each call imports the namespace it works for.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from typing import Any, Optional

from precision_base._compat import parse_env_variables
from precision_base.contract import PrecisionPlugin
from precision_base.doors import combine
from precision_base.doors.cant_train import (
    TRAINER_FIX,
    ReplacedParameters,
)
from precision_base.doors.identity import door_of, wrong_door_error
from precision_base.errors import TrainerConfigurationError, describe
from precision_base.namespaces import NAMESPACES, lightning_root, namespace_of

_PRECISION_PLUGIN = "precision_plugin"
_lock = threading.Lock()


def _checked_instance(plugin: Any, namespace: str, precision_class: type) -> Any:
    if isinstance(plugin, PrecisionPlugin) and door_of(plugin) == "Fabric":
        raise wrong_door_error(plugin, "Trainer", where="precision_plugin=")
    if isinstance(plugin, precision_class):
        return plugin
    other = namespace_of(plugin)
    if other in NAMESPACES and not isinstance(plugin, PrecisionPlugin):
        raise TrainerConfigurationError(
            f"precision_plugin={type(plugin).__name__}(...) is {other}'s class, but this Trainer is {namespace}'s. "
            f"Pass {namespace}.plugins.precision.{type(plugin).__name__} instead."
        )
    if other in NAMESPACES:
        raise TrainerConfigurationError(
            f"precision_plugin={type(plugin).__name__}(...) was built for {other}, but this Trainer is "
            f"{namespace}'s. Pass the plugin's name instead (e.g. precision_plugin="
            f"{getattr(plugin, 'spec', 'fsdp:bf16-mixed')!r}), or build the instance for {namespace} with "
            f"precision_base.namespaces.for_namespace({type(plugin).__name__}, {namespace!r})(...)."
        )
    raise combine.not_a_plugin_error(plugin, namespace)


TRAINER = combine.DoorDescription(
    name="Trainer",
    check_instance=_checked_instance,
)
"""The Trainer door, as [`combine_door_kwargs`][precision_base.doors.combine.combine_door_kwargs] sees it."""


def prepare_trainer_kwargs(
    precision_plugin: Optional[Any], kwargs: dict[str, Any], *, namespace: str = "lightning.pytorch"
) -> dict[str, Any]:
    """Turn ``precision_plugin=`` and plugin names in ``plugins=`` into Lightning Trainer keyword arguments.

    The function form of [`PrecisionPluginTrainerMixin`][precision_base.doors.trainer.PrecisionPluginTrainerMixin], for
    a Trainer subclass with its own ``__init__``::

        class MyTrainer(lightning.Trainer):
            def __init__(self, *, precision_plugin=None, **kwargs):
                super().__init__(**prepare_trainer_kwargs(precision_plugin, kwargs))

    Args:
        precision_plugin: ``None``, a plugin name ``"<backend>:<precision>"`` (e.g. ``"fsdp:bf16-mixed"``) or a
            ``Precision`` instance of ``namespace``.
        kwargs: the other Trainer keyword arguments; not modified. A string in ``plugins=`` (alone or in the list)
            is read as a plugin name, as if given to ``precision_plugin=``.
        namespace: ``"lightning.pytorch"`` (``lightning.Trainer``) or ``"pytorch_lightning"``.

    Returns:
        A new dict: ``plugins=`` holds the plugin instance (built for ``namespace``) after the other plugins, and
        ``strategy=`` is what the plugin's ``configure_strategy`` returned for the given ``strategy``,
        ``accelerator`` and ``devices``. Without a precision plugin, ``kwargs`` comes back as a copy.

    Raises:
        TrainerConfigurationError: ``precision=`` is also given, more than one precision plugin is given, the
            instance was built for the other namespace, a string in ``plugins=`` is not a plugin name (this one is
            also Lightning's ``MisconfigurationException``), or the plugin cannot work with ``strategy=``.
        TypeError: ``precision_plugin`` is neither a name nor a ``Precision``.
        PrecisionPluginError: a name that cannot be resolved raises what [`precision_base.resolve`][] raises.
    """
    if namespace not in NAMESPACES:
        raise ValueError(f"namespace must be one of {NAMESPACES}, got {describe(namespace)}")
    from precision_base.audit.callback import add_audit_from_env  # PRECISION_PLUGINS_AUDIT: the audit callback

    kwargs = add_audit_from_env(kwargs, namespace)
    return combine.combine_door_kwargs(precision_plugin, kwargs, door=TRAINER, namespace=namespace)


def _trainer_namespace(cls: type) -> str:
    return combine.door_namespace(cls, PrecisionPluginTrainerMixin, TRAINER)


def _env_signature(owner: type, *, for_mixin: bool) -> inspect.Signature:
    """The keyword arguments of ``owner`` that environment defaults are read for.

    For Lightning's reader (``for_mixin=False``): the class's own ``__init__`` parameters without
    ``precision_plugin``, with ``**kwargs`` spelled out as the Lightning Trainer's parameters. For the mixin's reader
    (``for_mixin=True``): the Lightning Trainer's parameters and ``precision_plugin``, which is what the mixin passes
    on (the parameters of a subclass's own ``__init__`` were consumed before the mixin runs).
    """
    trainer_init = lightning_root(_trainer_namespace(owner)).Trainer.__init__
    lightning_params = list(inspect.signature(trainer_init).parameters.values())[1:]
    if for_mixin:
        extra = inspect.Parameter(_PRECISION_PLUGIN, inspect.Parameter.KEYWORD_ONLY, default=None)
        return inspect.Signature([*lightning_params, extra])
    init = owner.__init__  # type: ignore[misc]
    if init in (PrecisionPluginTrainerMixin.__init__, trainer_init):
        return inspect.Signature(lightning_params)
    own = list(inspect.signature(init).parameters.values())[1:]
    params = [p for p in own if p.kind is not inspect.Parameter.VAR_KEYWORD and p.name != _PRECISION_PLUGIN]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in own):
        taken = {p.name for p in params}
        params += [p for p in lightning_params if p.name not in taken]
    return inspect.Signature(params)


class _LightningVisibleSignature:
    """``__signature__`` of a class using the mixin, as ``inspect.signature(cls)`` (what Lightning's environment
    defaults read) sees it: every Trainer argument, without ``precision_plugin`` (the mixin reads that one)."""

    def __init__(self) -> None:
        self._cache: weakref.WeakKeyDictionary[type, inspect.Signature] = weakref.WeakKeyDictionary()

    def __get__(self, instance: object, owner: type) -> Optional[inspect.Signature]:
        if instance is not None or namespace_of(owner) not in NAMESPACES:
            return None
        signature = self._cache.get(owner)
        if signature is None:
            signature = self._cache[owner] = _env_signature(owner, for_mixin=False)
        return signature


class PrecisionPluginTrainerMixin:
    """Gives a Lightning Trainer class a ``precision_plugin=`` argument; list it before the Trainer class::

        class MyTrainer(PrecisionPluginTrainerMixin, lightning.Trainer): ...
        class MyPLTrainer(PrecisionPluginTrainerMixin, pytorch_lightning.Trainer): ...

    The Lightning namespace comes from the class the mixin is mixed into. Environment defaults work as in
    Lightning's Trainer: ``PL_<CLASS NAME>_<ARGUMENT>`` (``PL_TRAINER_MAX_EPOCHS=3`` for a class named
    ``Trainer``), read for every Trainer argument and for ``precision_plugin``; an argument passed explicitly wins.

    Args:
        precision_plugin: a plugin name ``"<backend>:<precision>"`` (e.g. ``"fsdp:bf16-mixed"``) resolved through
            the installed plugins and built for the Trainer's namespace, or a ``Precision`` instance of that
            namespace. ``None`` (the default) leaves the Trainer exactly as Lightning's, except that plugin names
            in ``plugins=`` are resolved.
        **kwargs: every argument of the Lightning Trainer; see
            [`prepare_trainer_kwargs`][precision_base.doors.trainer.prepare_trainer_kwargs].
    """

    __signature__ = _LightningVisibleSignature()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        combine.check_mixin_first(cls, PrecisionPluginTrainerMixin, TRAINER)

    def __init__(self, *, precision_plugin: Optional[Any] = None, **kwargs: Any) -> None:
        cls = type(self)
        namespace = _trainer_namespace(cls)
        proxy = type(cls.__name__, (), {"__signature__": _env_signature(cls, for_mixin=True)})
        env = vars(parse_env_variables(namespace, proxy))
        from_env = env.pop(_PRECISION_PLUGIN, None)
        kwargs = {**env, **kwargs}
        if precision_plugin is None:
            precision_plugin = from_env
        kwargs = prepare_trainer_kwargs(precision_plugin, kwargs, namespace=namespace)
        if any(isinstance(p, PrecisionPlugin) for p in combine.as_list(kwargs.get("plugins"))):
            kwargs["callbacks"] = [*combine.as_list(kwargs.get("callbacks")), _trainability_check(namespace)()]
        super().__init__(**kwargs)  # spelled this way so that LightningCLI (jsonargparse) sees Lightning's arguments


_check_classes: dict[str, type] = {}


def _trainability_check(namespace: str) -> type:
    """The Trainer door's callback (built once per namespace) that refuses or warns about a run that cannot train
    ([`precision_base.doors.cant_train`][]): at ``setup`` it notes the LightningModule's parameters; at ``on_fit_start``
    (after ``configure_model`` and ``configure_optimizers``) an optimizer that holds parameters the strategy
    replaced raises [`StaleOptimizerError`][precision_base.errors.StaleOptimizerError]; on the first optimizer
    steps, no
    trainable parameter with a gradient warns ([`NoGradientWarning`][precision_base.errors.NoGradientWarning])."""
    with _lock:
        cls = _check_classes.get(namespace)
        if cls is None:
            lightning: Any = lightning_root(namespace)
            cls = _check_classes[namespace] = type(
                "TrainabilityCheck", (_TrainabilityCheckImpl, lightning.Callback), {"__module__": __name__}
            )
    return cls


class _TrainabilityCheckImpl:
    """The code of `_trainability_check`'s callback (Lightning's ``Callback`` hooks; no Lightning base here)."""

    def __init__(self) -> None:
        self._before: Optional[ReplacedParameters] = None
        self._watch = combine.GradientWatch()

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._before, self._watch = ReplacedParameters(pl_module), combine.GradientWatch()

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        before, self._before = self._before, None
        if before:
            before.check(
                pl_module,
                trainer.optimizers,
                what="the optimizer from configure_optimizers",
                fix=TRAINER_FIX,
            )

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        where = "Before optimizer step {step} (after the backward of training_step)"
        self._watch.step(optimizer, pl_module.named_parameters, where)


__all__ = ["TRAINER", "PrecisionPluginTrainerMixin", "prepare_trainer_kwargs"]
