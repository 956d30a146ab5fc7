"""What turns ``precision_plugin=`` (and plugin names in ``plugins=``) into arguments a Lightning Trainer accepts.

Two public forms, for both Lightning namespaces (``lightning.pytorch`` and ``pytorch_lightning``):

* :class:`PrecisionPluginTrainerMixin`, listed before a Lightning ``Trainer`` class in the bases of a Trainer
  class (``precision_base.Trainer`` and ``precision_base.pytorch_lightning.Trainer`` are exactly that). It finds
  the namespace from the class it is mixed into, honours ``PL_<CLASS>_<ARGUMENT>`` environment defaults the way
  Lightning's Trainer does (``PL_TRAINER_PRECISION_PLUGIN`` included), and calls :func:`prepare_trainer_kwargs`.
* :func:`prepare_trainer_kwargs`, for a Trainer subclass that writes its own ``__init__``.

Importing this module imports no Lightning module; each call imports the namespace it works for.
"""

from __future__ import annotations

import inspect
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Optional

from precision_base._compat import parse_env_variables
from precision_base.cant_train import (
    GRAD_CHECK_STEPS,
    TRAINER_FIX,
    NoGradientWarning,
    ReplacedParameters,
    no_gradient_message,
)
from precision_base.contract import PrecisionPlugin
from precision_base.doors import Door, door_of, wrong_door_error
from precision_base.errors import PrecisionPluginError, TrainerConfigurationError, describe, type_name
from precision_base.namespaces import NAMESPACES, lightning_root, namespace_of
from precision_base.registry import resolve
from precision_base.spec import PRECISIONS, normalize_precision

_PRECISION_PLUGIN = "precision_plugin"


def _as_list(plugins: Any) -> list[Any]:
    if plugins is None:
        return []
    if isinstance(plugins, (list, tuple)):
        return list(plugins)
    if isinstance(plugins, str) or not isinstance(plugins, Iterable):
        return [plugins]
    return list(plugins)


_error_classes: dict[str, type[TrainerConfigurationError]] = {}
_error_lock = threading.Lock()


def _plugin_name_error(namespace: str, message: str) -> TrainerConfigurationError:
    """A :class:`TrainerConfigurationError` that is also the namespace's ``MisconfigurationException`` (what
    Lightning raises for a bad entry in ``plugins=``), so code catching either keeps working."""
    with _error_lock:
        cls = _error_classes.get(namespace)
        if cls is None:
            lightning: Any = lightning_root(namespace)
            misconfiguration = lightning.utilities.exceptions.MisconfigurationException
            cls = _error_classes[namespace] = type(
                "InvalidPluginNameError",
                (TrainerConfigurationError, misconfiguration),
                {"__module__": __name__, "__doc__": "A string in plugins= that is not a precision plugin name."},
            )
    return cls(message)


_TRAINER_PLUGIN_TYPES = "Precision, CheckpointIO, ClusterEnvironment, or LayerSync"


def resolve_name_in_plugins(
    name: str,
    namespace: str,
    resolver: Callable[[str], Any],
    *,
    expected: str = _TRAINER_PLUGIN_TYPES,
    keep: tuple[type[BaseException], ...] = (),
) -> Any:
    """Resolve a string found in ``plugins=`` with ``resolver``; a string that is no plugin name gets Lightning's
    "invalid type for plugin" text (``expected`` lists the plugin types of the door) followed by ours. Errors of the
    types in ``keep`` (and every error that is not about the name) propagate unchanged."""
    try:
        return resolver(name)
    except (ValueError, TypeError) as exc:
        if not isinstance(exc, PrecisionPluginError) or isinstance(exc, (TrainerConfigurationError, *keep)):
            raise
        raise _plugin_name_error(
            namespace,
            f"Found invalid type for plugin {describe(name)[1:-1]}. Expected one of: {expected}. A string in "
            f"plugins= is read as a precision plugin name, and {describe(name)} is not one: {exc}",
        ) from exc


def _precision_flag(precision: Any) -> str:
    try:
        return normalize_precision(precision)
    except PrecisionPluginError:
        return str(precision)


def _duplicate_precision_error(shown: str) -> TrainerConfigurationError:
    return TrainerConfigurationError(
        "Received multiple values for Precision flags in `plugins`. Expected one value for each type at most. "
        f"{shown} Pass exactly one precision plugin: by name with precision_plugin= (or one name in plugins=), or "
        "one instance in plugins=."
    )


def _both_precisions_error(
    precision: Any, flag: str, chosen: Any, precision_plugin: Optional[Any], plugins: Any
) -> TrainerConfigurationError:
    """``precision=`` next to a precision plugin that runs another precision: names what the user passed."""
    if isinstance(precision_plugin, str):
        given = f"precision_plugin={precision_plugin!r}"
    elif precision_plugin is not None:
        given = f"precision_plugin={type(precision_plugin).__name__}(...)"
    else:
        named = [p for p in _as_list(plugins) if isinstance(p, str)]
        if named:
            given = f"plugins={named[0]!r}" if isinstance(plugins, str) else f"{named[0]!r} in plugins="
        else:
            given = f"{type(chosen).__name__}(...) in plugins="
    spec = getattr(chosen, "spec", None)
    runs = getattr(chosen, "precision", None)
    backend = getattr(chosen, "backend", None)
    fix = "remove precision= (the plugin sets the precision)"
    if backend is not None and flag in PRECISIONS:
        fix += f", or pass precision_plugin={f'{backend}:{flag}'!r} if {flag} is what you want"
    what = f"the plugin {spec!r} runs {runs!r}" if spec is not None else f"{type(chosen).__name__} sets its own"
    return TrainerConfigurationError(  # Lightning's own first words, then what the user passed and why it differs
        f"Received both `precision={flag}` and `{given}`. Choose one. (They disagree: {what}, not {flag!r}; {fix}.)"
    )


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
    raise TypeError(
        f'precision_plugin must be a name like "fsdp:bf16-mixed" or a {namespace} Precision instance, '
        f"got {type_name(plugin)} {describe(plugin)}"
    )


def prepare_trainer_kwargs(
    precision_plugin: Optional[Any], kwargs: dict[str, Any], *, namespace: str = "lightning.pytorch"
) -> dict[str, Any]:
    """Turn ``precision_plugin=`` and plugin names in ``plugins=`` into Lightning Trainer keyword arguments.

    The function form of :class:`PrecisionPluginTrainerMixin`, for a Trainer subclass with its own ``__init__``::

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
        PrecisionPluginError: a name that cannot be resolved raises what :func:`precision_base.resolve` raises.
    """
    if namespace not in NAMESPACES:
        raise ValueError(f"namespace must be one of {NAMESPACES}, got {describe(namespace)}")
    lightning: Any = lightning_root(namespace)
    precision_class: type = lightning.plugins.precision.Precision
    from precision_base.audit.callback import add_audit_from_env  # PRECISION_PLUGINS_AUDIT: the audit callback

    kwargs = add_audit_from_env(kwargs, namespace)
    return combine_door_kwargs(
        precision_plugin,
        kwargs,
        door="Trainer",
        precision_class=precision_class,
        resolver=lambda name: resolve(name, namespace=namespace),
        check_instance=lambda plugin: _checked_instance(plugin, namespace, precision_class),
        name_in_plugins=lambda name: resolve_name_in_plugins(
            name, namespace, lambda n: resolve(n, namespace=namespace)
        ),
    )


def combine_door_kwargs(
    precision_plugin: Optional[Any],
    kwargs: dict[str, Any],
    *,
    door: Door,
    precision_class: type,
    resolver: Callable[[str], Any],
    check_instance: Callable[[Any], Any],
    name_in_plugins: Callable[[str], Any],
) -> dict[str, Any]:
    """The steps the Trainer and the Fabric doors share: resolve names in ``plugins=``, refuse the other door's plugin
    classes and a second precision plugin, refuse ``precision=`` next to a plugin, let the plugin choose the
    strategy, and put the plugin last in ``plugins=``.

    Args:
        precision_plugin: what the user passed as ``precision_plugin=`` (``None``, a name or an instance).
        kwargs: the door's other keyword arguments; not modified.
        door: ``"Trainer"`` or ``"Fabric"``: the door in use (the other door's plugin classes are refused).
        precision_class: the Lightning ``Precision`` base class of the door's namespace.
        resolver: turns a plugin name into an instance for this door and namespace.
        check_instance: checks an instance given as ``precision_plugin=`` and returns it.
        name_in_plugins: turns a string found in ``plugins=`` into an instance (with the door's error wording).
    """
    other_door: Door = "Fabric" if door == "Trainer" else "Trainer"
    given = _as_list(kwargs.get("plugins"))
    named = [p for p in given if isinstance(p, str)]
    plugins = [name_in_plugins(p) if isinstance(p, str) else p for p in given]
    for plugin in plugins:
        if isinstance(plugin, PrecisionPlugin) and door_of(plugin) == other_door:
            raise wrong_door_error(plugin, door, where="plugins=")
    chosen: Optional[Any] = None
    if precision_plugin is not None:
        chosen = resolver(precision_plugin) if isinstance(precision_plugin, str) else check_instance(precision_plugin)
    in_plugins = [p for p in plugins if isinstance(p, precision_class)]
    if chosen is not None and in_plugins:
        raise _duplicate_precision_error(
            f"(precision_plugin={describe(precision_plugin)} and the precision plugin "
            f"{type(in_plugins[0]).__name__} in plugins= are two.)"
        )
    if len(in_plugins) > 1:
        raise _duplicate_precision_error("(plugins= holds " + ", ".join(type(p).__name__ for p in in_plugins) + ".)")
    if chosen is None and named:
        chosen = in_plugins[0]  # a name in plugins= is treated like precision_plugin=
    out = dict(kwargs)
    if chosen is None:
        if named:
            out["plugins"] = plugins
        return out
    if kwargs.get("precision") is not None:
        flag = _precision_flag(kwargs["precision"])
        if flag != getattr(chosen, "precision", None):  # the same precision twice is one answer: accepted
            raise _both_precisions_error(kwargs["precision"], flag, chosen, precision_plugin, kwargs.get("plugins"))
    out.pop("precision", None)
    if isinstance(chosen, PrecisionPlugin):
        out["strategy"] = chosen.configure_strategy(
            kwargs.get("strategy", "auto"),
            accelerator=kwargs.get("accelerator", "auto"),
            devices=kwargs.get("devices", "auto"),
        )
    out["plugins"] = [*(p for p in plugins if p is not chosen), chosen]
    return out


def door_namespace(cls: type, mixin: type, namespaces: tuple[str, ...], door: str, bases: str) -> str:
    """The Lightning namespace of the class ``cls`` that uses the door ``mixin`` (``door``: "Trainer" or "Fabric");
    a ``TypeError`` naming ``bases`` (what to list the mixin before) when ``cls`` has no such Lightning base."""
    namespace = namespace_of(cls)
    if namespace not in namespaces:
        example = bases.split(" or ")[0]
        raise TypeError(
            f"{cls.__qualname__} uses {mixin.__name__} without a Lightning {door} base: list the mixin before "
            f"{bases}, e.g. class My{door}({mixin.__name__}, {example})"
        )
    assert namespace is not None
    return namespace


def check_mixin_first(cls: type, mixin: type, namespaces: tuple[str, ...], door: str) -> None:
    """Refuse a class that lists the namespace's ``Trainer``/``Fabric`` (``door``) before the door ``mixin``: the
    mixin's ``__init__`` would never run."""
    namespace = namespace_of(cls)
    if namespace in namespaces:
        base = getattr(lightning_root(namespace), door)
        mro = cls.__mro__
        if base in mro and mro.index(base) < mro.index(mixin):
            raise TypeError(
                f"{cls.__qualname__} lists {base.__module__}.{door} before {mixin.__name__}, so the mixin's __init__ "
                f"never runs; list the mixin first: class {cls.__name__}({mixin.__name__}, {door})"
            )


def _trainer_namespace(cls: type) -> str:
    return door_namespace(
        cls, PrecisionPluginTrainerMixin, NAMESPACES, "Trainer", "lightning.Trainer or pytorch_lightning.Trainer"
    )


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
        **kwargs: every argument of the Lightning Trainer; see :func:`prepare_trainer_kwargs`.
    """

    __signature__ = _LightningVisibleSignature()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_mixin_first(cls, PrecisionPluginTrainerMixin, NAMESPACES, "Trainer")

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
        if any(isinstance(p, PrecisionPlugin) for p in _as_list(kwargs.get("plugins"))):
            kwargs["callbacks"] = [*_as_list(kwargs.get("callbacks")), _trainability_check(namespace)()]
        super().__init__(**kwargs)  # spelled this way so that LightningCLI (jsonargparse) sees Lightning's arguments


_check_classes: dict[str, type] = {}


def _trainability_check(namespace: str) -> type:
    """The Trainer door's callback (built once per namespace) that refuses or warns about a run that cannot train
    (:mod:`precision_base.cant_train`): at ``setup`` it notes the LightningModule's parameters; at ``on_fit_start``
    (after ``configure_model`` and ``configure_optimizers``) an optimizer that holds parameters the strategy
    replaced raises :class:`~precision_base.cant_train.StaleOptimizerError`; on the first optimizer steps, no
    trainable parameter with a gradient warns (:class:`~precision_base.cant_train.NoGradientWarning`)."""
    with _error_lock:
        cls = _check_classes.get(namespace)
        if cls is None:
            lightning: Any = lightning_root(namespace)
            cls = _check_classes[namespace] = type(
                "TrainabilityCheck", (_TrainabilityCheckImpl, lightning.Callback), {"__module__": __name__}
            )
    return cls


class _TrainabilityCheckImpl:
    """The code of :func:`_trainability_check`'s callback (Lightning's ``Callback`` hooks; no Lightning base here)."""

    def __init__(self) -> None:
        self._before: Optional[ReplacedParameters] = None
        self._steps = 0

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._before, self._steps = ReplacedParameters(pl_module), 0

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
        if self._steps >= GRAD_CHECK_STEPS:
            return
        self._steps += 1
        where = f"Before optimizer step {self._steps} (after the backward of training_step)"
        message = no_gradient_message([optimizer], pl_module.named_parameters(), where=where)
        if message is not None:
            self._steps = GRAD_CHECK_STEPS  # once is enough
            warnings.warn(message, NoGradientWarning, stacklevel=2)


__all__ = ["PrecisionPluginTrainerMixin", "prepare_trainer_kwargs"]
