"""The Fabric front door: ``precision_plugin="fsdp:bf16-mixed"`` for ``lightning.fabric.Fabric``.

Three public forms, like the Trainer door ([`precision_base.doors.trainer`][]):

* ``precision_base.Fabric``: ``lightning.fabric.Fabric`` with a ``precision_plugin=`` argument;
* [`PrecisionPluginFabricMixin`][precision_base.doors.fabric.PrecisionPluginFabricMixin], listed before a Fabric class
  in the bases of a user's own Fabric subclass
  (``lightning.fabric.Fabric`` or ``lightning_fabric.Fabric``; the namespace comes from the class);
* [`prepare_fabric_kwargs`][precision_base.doors.fabric.prepare_fabric_kwargs], for a Fabric subclass with its own
  ``__init__``.

A name resolves to the backend's *Fabric* class (``PluginInfo.fabric_class``, derived from a
``lightning.fabric.plugins.precision`` class), never to its Trainer class;
[`resolve_fabric`][precision_base.doors.fabric.resolve_fabric] does that and
says so when a backend has no Fabric class (it is [`precision_base.registry.resolve`][] at ``door="Fabric"``).
The plugin's ``configure_strategy`` then checks ``strategy=``: ``"auto"`` becomes the backend's Fabric strategy, a
strategy that cannot work is an error saying what to pass.

Importing this module imports no torch or Lightning module; each call imports the namespace it works for.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional

from precision_base.contract import PrecisionPlugin
from precision_base.doors import combine
from precision_base.doors.cant_train import (
    FABRIC_FIX,
    ReplacedParameters,
)
from precision_base.doors.identity import door_of, wrong_door_error
from precision_base.errors import (
    FabricNotSupportedError,
    TrainerConfigurationError,
    type_name,
)
from precision_base.namespaces import namespace_of
from precision_base.registry import get_plugin_class, resolve


def fabric_class(backend: str) -> type:
    """The Fabric plugin class ``backend`` registers (``PluginInfo.fabric_class``), imported and checked: the
    registry's one class lookup, for the Fabric door ([`precision_base.registry.get_plugin_class`][]).

    Raises:
        FabricNotSupportedError: the backend has no Fabric class.
        PrecisionPluginError: what [`precision_base.resolve`][] raises for a backend that cannot be used, or the
            class is not a [`PrecisionPlugin`][precision_base.PrecisionPlugin] built on a Fabric precision class.
    """
    return get_plugin_class(backend, door="Fabric")


def resolve_fabric(spec: object, *, namespace: str = "lightning.fabric", **options: Any) -> Any:
    """[`precision_base.resolve`][] at the Fabric door: the instance is the backend's Fabric class, built for
    ``namespace`` (``"lightning.fabric"`` or ``"lightning_fabric"``); ``options`` go to its constructor (the same
    options as the Trainer class takes). The same checks, in the same order, as the Trainer door.

    Raises:
        FabricNotSupportedError: the backend has no Fabric class.
        PrecisionPluginError: everything [`precision_base.resolve`][] raises.
    """
    return resolve(spec, door="Fabric", namespace=namespace, **options)


def _checked_instance(plugin: Any, namespace: str, precision_class: type) -> Any:
    if isinstance(plugin, PrecisionPlugin) and door_of(plugin) == "Trainer":
        raise wrong_door_error(plugin, "Fabric", where="precision_plugin=")
    if isinstance(plugin, precision_class):
        if isinstance(plugin, PrecisionPlugin) and namespace_of(plugin) != namespace:
            raise TrainerConfigurationError(
                f"precision_plugin={type_name(plugin)}(...) was built for {namespace_of(plugin)}, but this Fabric is "
                f"{namespace}'s. "
                f"Pass the plugin's name instead (precision_plugin={plugin.spec!r})."
            )
        return plugin
    raise combine.not_a_plugin_error(plugin, namespace)


FABRIC = combine.DoorDescription(
    name="Fabric",
    check_instance=_checked_instance,
    keep=(FabricNotSupportedError,),
)
"""The Fabric door, as [`combine_door_kwargs`][precision_base.doors.combine.combine_door_kwargs] sees it."""


def prepare_fabric_kwargs(
    precision_plugin: Optional[Any], kwargs: dict[str, Any], *, namespace: str = "lightning.fabric"
) -> dict[str, Any]:
    """Turn ``precision_plugin=`` and plugin names in ``plugins=`` into Fabric keyword arguments.

    The function form of [`PrecisionPluginFabricMixin`][precision_base.doors.fabric.PrecisionPluginFabricMixin]::

        class MyFabric(lightning.fabric.Fabric):
            def __init__(self, *, precision_plugin=None, **kwargs):
                super().__init__(**prepare_fabric_kwargs(precision_plugin, kwargs))

    Args:
        precision_plugin: ``None``, a plugin name ``"<backend>:<precision>"`` or a Fabric plugin instance (the
            backend's Fabric class) of ``namespace``.
        kwargs: the other Fabric keyword arguments; not modified. A string in ``plugins=`` is read as a plugin name.
        namespace: ``"lightning.fabric"`` (``lightning.fabric.Fabric``) or ``"lightning_fabric"``.

    Returns:
        A new dict: ``plugins=`` holds the plugin instance after the other plugins, and ``strategy=`` is what the
        plugin's ``configure_strategy`` returned for the given ``strategy``, ``accelerator`` and ``devices``.

    Raises:
        WrongDoorError: the instance is a plugin's Trainer class (the message names the Fabric class to use).
        FabricNotSupportedError: the named backend has no Fabric class.
        TrainerConfigurationError: ``precision=`` is also given, more than one precision plugin is given, a string
            in ``plugins=`` is not a plugin name, or the plugin cannot work with ``strategy=``.
        TypeError: ``precision_plugin`` is neither a name nor a Fabric ``Precision``.
    """
    return combine.combine_door_kwargs(precision_plugin, kwargs, door=FABRIC, namespace=namespace)


class PrecisionPluginFabricMixin:
    """Gives a Lightning Fabric class a ``precision_plugin=`` argument; list it before the Fabric class::

        class MyFabric(PrecisionPluginFabricMixin, lightning.fabric.Fabric): ...

    Args:
        precision_plugin: a plugin name ``"<backend>:<precision>"`` (e.g. ``"deepspeed:bf16-mixed"``) resolved to
            the backend's Fabric class, or an instance of a Fabric plugin class. ``None`` leaves Fabric as it is,
            except that plugin names in ``plugins=`` are resolved.
        **kwargs: every argument of Lightning's ``Fabric``; see
            [`prepare_fabric_kwargs`][precision_base.doors.fabric.prepare_fabric_kwargs].
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        combine.check_mixin_first(cls, PrecisionPluginFabricMixin, FABRIC)

    def __init__(self, *, precision_plugin: Optional[Any] = None, **kwargs: Any) -> None:
        namespace = combine.door_namespace(type(self), PrecisionPluginFabricMixin, FABRIC)
        prepared = prepare_fabric_kwargs(precision_plugin, kwargs, namespace=namespace)
        self._set_up_models: list[tuple[weakref.ref[Any], ReplacedParameters]] = []
        prepared["callbacks"] = [*combine.as_list(prepared.get("callbacks")), _GradientCheck(self)]
        super().__init__(**prepared)

    # -- training that cannot train (precision_base.doors.cant_train) ------------------------------------------------
    def _checks_apply(self) -> bool:
        """The checks run only when the precision is one of ours: without a plugin Fabric stays Lightning's."""
        fabric: Any = self
        return isinstance(fabric.strategy.precision, PrecisionPlugin)

    def _remember(self, set_up: Any, before: ReplacedParameters) -> None:
        self._set_up_models.append((weakref.ref(set_up), before))

    def setup(self, module: Any, *optimizers: Any, **kwargs: Any) -> Any:
        """Lightning's ``Fabric.setup``; then, under a precision plugin, a joint setup whose optimizer still holds
        parameters the strategy replaced (FSDP2's ``fully_shard`` does, so the loss would stay flat) is refused.

        Raises:
            precision_base.errors.StaleOptimizerError: the message names the parameters and gives the fix
                (``setup_module``, then the optimizer from the set-up model's parameters, then ``setup_optimizers``).
        """
        if not self._checks_apply():
            return super().setup(module, *optimizers, **kwargs)  # type: ignore[misc]
        before = ReplacedParameters(module)
        result = super().setup(module, *optimizers, **kwargs)  # type: ignore[misc]
        set_up = result[0] if optimizers else result
        self._remember(set_up, before)
        before.check(set_up, optimizers, what="fabric.setup(model, optimizer)", fix=FABRIC_FIX)
        return result

    def setup_module(self, module: Any, *args: Any, **kwargs: Any) -> Any:
        """Lightning's ``Fabric.setup_module``; remembers the model's parameters from before, so that
        [`setup_optimizers`][precision_base.doors.fabric.PrecisionPluginFabricMixin.setup_optimizers] can refuse an
        optimizer created before this call."""
        if not self._checks_apply():
            return super().setup_module(module, *args, **kwargs)  # type: ignore[misc]
        before = ReplacedParameters(module)
        set_up = super().setup_module(module, *args, **kwargs)  # type: ignore[misc]
        self._remember(set_up, before)
        return set_up

    def setup_optimizers(self, *optimizers: Any) -> Any:
        """Lightning's ``Fabric.setup_optimizers``, refusing (under a precision plugin) an optimizer that holds a
        set-up model's parameters from before
        [`setup_module`][precision_base.doors.fabric.PrecisionPluginFabricMixin.setup_module] replaced them.

        Raises:
            precision_base.errors.StaleOptimizerError: the message names the parameters and gives the fix.
        """
        if self._checks_apply():
            for ref, before in self._set_up_models:
                set_up = ref()
                if set_up is not None:
                    before.check(
                        set_up,
                        optimizers,
                        what="fabric.setup_optimizers(optimizer) with an optimizer created before fabric.setup_module",
                        fix=FABRIC_FIX,
                    )
        return super().setup_optimizers(*optimizers)  # type: ignore[misc]

    def _named_parameters(self) -> list[tuple[str, Any]]:
        named: list[tuple[str, Any]] = []
        for ref, _before in self._set_up_models:
            set_up = ref()
            if set_up is not None:
                named += list(getattr(set_up, "module", set_up).named_parameters())
        return named


class _GradientCheck:
    """A Fabric callback (``on_after_optimizer_step``): on the first ``GRAD_CHECK_STEPS`` steps under a precision
    plugin, warns when no trainable parameter of the optimizer had a gradient. Gradients are still there after the
    step (``zero_grad`` comes later); DeepSpeed passes its engine here, which is not checked."""

    def __init__(self, fabric: PrecisionPluginFabricMixin) -> None:
        self._fabric = weakref.ref(fabric)
        self._watch = combine.GradientWatch()

    def on_after_optimizer_step(self, strategy: Any, optimizer: Any) -> None:
        fabric = self._fabric()
        if fabric is not None and fabric._checks_apply():
            where = "After fabric.backward(loss) at optimizer step {step}"
            self._watch.step(optimizer, fabric._named_parameters, where)


__all__ = [
    "FABRIC",
    "PrecisionPluginFabricMixin",
    "fabric_class",
    "prepare_fabric_kwargs",
    "resolve_fabric",
]
