"""What both doors share: turning ``precision_plugin=`` and plugin names in ``plugins=`` into a door's arguments.

[`combine_door_kwargs`][precision_base.doors.combine.combine_door_kwargs] runs the same steps for the Trainer and the
Fabric door; what differs between them
(name, namespaces, the plugin types in Lightning's message, the instance check) is a
[`DoorDescription`][precision_base.doors.combine.DoorDescription]
([`precision_base.doors.trainer.TRAINER`][], [`precision_base.doors.fabric.FABRIC`][]). Names are resolved by
[`precision_base.registry.resolve`][] at the door. Importing this module imports no Lightning module.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Optional

from precision_base.contract import PrecisionPlugin
from precision_base.doors.cant_train import GRAD_CHECK_STEPS, no_gradient_message
from precision_base.doors.identity import door_of, wrong_door_error
from precision_base.doors.table import DOORS, Door, DoorFacts, other_door
from precision_base.errors import (
    NoGradientWarning,
    PrecisionPluginError,
    TrainerConfigurationError,
    describe,
    type_name,
)
from precision_base.namespaces import lightning_root, namespace_of
from precision_base.registry import resolve
from precision_base.spec import PRECISIONS, normalize_precision


@dataclass(frozen=True)
class DoorDescription:
    """What a door does its own way; [`combine_door_kwargs`][precision_base.doors.combine.combine_door_kwargs] does
    the rest, and every fact about the door (its namespaces, the classes its mixin goes before, Lightning's plugin
    types) comes from [`DOORS`][precision_base.doors.table.DOORS].

    Attributes:
        name: ``"Trainer"`` or ``"Fabric"`` (the ``door=`` of [`precision_base.registry.resolve`][]).
        check_instance: checks an instance given as ``precision_plugin=`` (``(plugin, namespace, precision_class)``)
            and returns it.
        keep: errors of resolving a name in ``plugins=`` that propagate unchanged (not "invalid type for plugin").
    """

    name: Door
    check_instance: Callable[[Any, str, type], Any]
    keep: tuple[type[BaseException], ...] = ()

    @property
    def facts(self) -> DoorFacts:
        """This door's row of [`DOORS`][precision_base.doors.table.DOORS]."""
        return DOORS[self.name]


class GradientWatch:
    """The first ``GRAD_CHECK_STEPS`` optimizer steps of a run, at either door: warns once
    ([`NoGradientWarning`][precision_base.errors.NoGradientWarning]) when no trainable parameter of the optimizer
    had a
    gradient. Each door's callback calls [`step`][precision_base.doors.combine.GradientWatch.step] from its
    optimizer-step hook."""

    def __init__(self) -> None:
        self.steps = 0

    def step(self, optimizer: Any, named_parameters: Callable[[], Iterable[tuple[str, Any]]], where: str) -> None:
        """Check one step; ``where`` names it, ``{step}`` standing for its number (from 1)."""
        if self.steps >= GRAD_CHECK_STEPS:
            return
        self.steps += 1
        message = no_gradient_message([optimizer], named_parameters(), where=where.format(step=self.steps))
        if message is not None:
            self.steps = GRAD_CHECK_STEPS  # once is enough
            warnings.warn(message, NoGradientWarning, stacklevel=3)


def as_list(plugins: Any) -> list[Any]:
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
    """A [`TrainerConfigurationError`][precision_base.errors.TrainerConfigurationError] that is also the namespace's
    ``MisconfigurationException`` (what
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


def resolve_name_in_plugins(name: str, namespace: str, door: DoorDescription) -> Any:
    """Resolve a string found in ``plugins=`` at ``door``; a string that is no plugin name gets Lightning's "invalid
    type for plugin" text (listing the door's plugin types) followed by ours. Errors of the door's ``keep`` types
    (and every error that is not about the name) propagate unchanged."""
    try:
        return resolve(name, door=door.name, namespace=namespace)
    except (ValueError, TypeError) as exc:
        if not isinstance(exc, PrecisionPluginError) or isinstance(exc, (TrainerConfigurationError, *door.keep)):
            raise
        raise _plugin_name_error(
            namespace,
            f"Found invalid type for plugin {describe(name)[1:-1]}. Expected one of: {door.facts.plugin_types}. "
            "A string "
            f"in plugins= is read as a precision plugin name, and {describe(name)} is not one: {exc}",
        ) from exc


def not_a_plugin_error(plugin: Any, namespace: str) -> TypeError:
    """The error for a ``precision_plugin=`` that is neither a plugin name nor a ``Precision`` of ``namespace``."""
    return TypeError(
        f'precision_plugin must be a name like "fsdp:bf16-mixed" or a {namespace} Precision instance, '
        f"got {type_name(plugin)} {describe(plugin)}"
    )


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
        named = [p for p in as_list(plugins) if isinstance(p, str)]
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


def combine_door_kwargs(
    precision_plugin: Optional[Any],
    kwargs: dict[str, Any],
    *,
    door: DoorDescription,
    namespace: str,
) -> dict[str, Any]:
    """The steps the Trainer and the Fabric doors share: resolve names in ``plugins=``, refuse the other door's plugin
    classes and a second precision plugin, refuse ``precision=`` next to a plugin, let the plugin choose the
    strategy, and put the plugin last in ``plugins=``.

    Args:
        precision_plugin: what the user passed as ``precision_plugin=`` (``None``, a name or an instance).
        kwargs: the door's other keyword arguments; not modified.
        door: what differs per door ([`precision_base.doors.trainer.TRAINER`][],
            [`precision_base.doors.fabric.FABRIC`][]): the other door's plugin classes are refused.
        namespace: the Lightning namespace of the door's class (one of ``door.facts.namespaces``).
    """
    if namespace not in door.facts.namespaces:
        raise ValueError(f"namespace must be one of {door.facts.namespaces}, got {describe(namespace)}")
    lightning: Any = lightning_root(namespace)
    precision_class: type = lightning.plugins.precision.Precision
    given = as_list(kwargs.get("plugins"))
    named = [p for p in given if isinstance(p, str)]
    plugins = [resolve_name_in_plugins(p, namespace, door) if isinstance(p, str) else p for p in given]
    for plugin in plugins:
        if isinstance(plugin, PrecisionPlugin) and door_of(plugin) == other_door(door.name):
            raise wrong_door_error(plugin, door.name, where="plugins=")
    chosen: Optional[Any] = None
    if isinstance(precision_plugin, str):
        chosen = resolve(precision_plugin, door=door.name, namespace=namespace)
    elif precision_plugin is not None:
        chosen = door.check_instance(precision_plugin, namespace, precision_class)
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


def door_namespace(cls: type, mixin: type, door: DoorDescription) -> str:
    """The Lightning namespace of the class ``cls`` that uses the ``door``'s ``mixin``; a ``TypeError`` naming
    ``door.facts.lightning_classes`` (what to list the mixin before) when ``cls`` has no such Lightning base."""
    namespace = namespace_of(cls)
    if namespace not in door.facts.namespaces:
        bases = door.facts.lightning_classes
        example = bases.split(" or ")[0]
        raise TypeError(
            f"{cls.__qualname__} uses {mixin.__name__} without a Lightning {door.name} base: list the mixin before "
            f"{bases}, e.g. class My{door.name}({mixin.__name__}, {example})"
        )
    assert namespace is not None
    return namespace


def check_mixin_first(cls: type, mixin: type, door: DoorDescription) -> None:
    """Refuse a class that lists the namespace's ``Trainer``/``Fabric`` (``door.name``) before the door's ``mixin``:
    the mixin's ``__init__`` would never run."""
    namespace = namespace_of(cls)
    if namespace in door.facts.namespaces:
        base = getattr(lightning_root(namespace), door.name)
        mro = cls.__mro__
        if base in mro and mro.index(base) < mro.index(mixin):
            raise TypeError(
                f"{cls.__qualname__} lists {base.__module__}.{door.name} before {mixin.__name__}, so the mixin's "
                f"__init__ never runs; list the mixin first: class {cls.__name__}({mixin.__name__}, {door.name})"
            )


__all__ = [
    "DoorDescription",
    "GradientWatch",
    "check_mixin_first",
    "combine_door_kwargs",
    "door_namespace",
    "not_a_plugin_error",
    "resolve_name_in_plugins",
]
