"""Which door a plugin instance was built for (a Lightning Trainer or Fabric), and the error for the wrong one.

A plugin package offers two classes per backend: the Trainer class (``PluginInfo.plugin_class``, built on
``lightning.pytorch``'s precision class) and the Fabric class (``PluginInfo.fabric_class``, built on
``lightning.fabric``'s). Lightning's Trainer-side precision classes derive from Fabric's ``Precision``, so
``lightning.fabric.Fabric(plugins=[<Trainer class instance>])`` accepts one and fails much later (an
``AttributeError`` in ``fabric.backward``). The doors ([`precision_base.doors.trainer`][],
[`precision_base.doors.fabric`][]) refuse such an instance when they are called;
[`check_caller`][precision_base.doors.identity.check_caller] lets a
plugin's ``convert_module`` refuse it when Lightning's own ``Fabric.setup`` (or a Trainer strategy) sets it up.

Importing this module imports no torch or Lightning module.
"""

from __future__ import annotations

from typing import Any, Optional

from precision_base._compat import caller_frames
from precision_base.doors.table import DOORS, Door, door_of_namespace, other_door
from precision_base.errors import PrecisionPluginError, WrongDoorError
from precision_base.namespaces import ALL_NAMESPACES, door_of, namespace_of, namespace_of_module


def _class_path(plugin: Any, door: Door) -> str:
    """``"module.QualName"`` of the plugin's class for ``door``, from its backend's registration when it has one."""
    backend = getattr(plugin, "backend", None)
    ref = ""
    if isinstance(backend, str):
        from precision_base.registry import get_entry

        try:
            info = get_entry(backend).info
        except PrecisionPluginError:  # an unregistered backend only loses the class name in the message
            info = None
        if info is not None:
            ref = getattr(info, DOORS[door].info_field)
    return ref.replace(":", ".") if ref else ""


def wrong_door_error(plugin: Any, door: Door, *, where: str = "") -> WrongDoorError:
    """The error for ``plugin`` (built for the other door) handed to ``door``.

    Args:
        plugin: the plugin instance.
        door: the door it was handed to: ``"Trainer"`` or ``"Fabric"``.
        where: how it was handed over, e.g. ``"precision_plugin="`` or ``"Fabric.setup()"``; shown in the message.

    Returns:
        A [`WrongDoorError`][precision_base.errors.WrongDoorError] whose message names the class to use for
        ``door`` (from the backend's
        ``PluginInfo``) and the plugin name that builds it.
    """
    built_for = other_door(door)
    cls = type(plugin)
    spec = getattr(plugin, "spec", None)
    use = _class_path(plugin, door)
    shown = f"{where} got " if where else ""
    message = (
        f"{shown}{plugin!r}, an instance of {cls.__module__}.{cls.__qualname__}: that is the plugin class for "
        f"{DOORS[built_for].described} ({namespace_of(plugin)}), and a "
        f"{door} cannot use it."
    )
    if use and spec:
        message += f" Use {use}({getattr(plugin, 'precision', '')!r}) instead"
        message += f", or pass the name: {DOORS[door].user_class}(precision_plugin={spec!r})."
    elif spec:
        message += (
            f" The backend {getattr(plugin, 'backend', '?')!r} registers no class for {door}"
            f"{' (its PluginInfo has no fabric_class)' if door == 'Fabric' else ''}."
        )
    return WrongDoorError(message, plugin=plugin, door=door)


def _calling_door(depth: int) -> tuple[Optional[Door], str]:
    """The door of the first Lightning module among the 8 frames above ``depth`` frames of the call stack, and where
    in it the call came from (``"Fabric.setup()"``, ``"lightning.pytorch.strategies.model_parallel (setup)"``).
    The frames come from `precision_base._compat.caller_frames` (``sys._getframe``, fenced there)."""
    for module, function in caller_frames(depth + 1, 8):
        door = door_of_namespace(namespace_of_module(module, ALL_NAMESPACES))
        if door is not None:
            shown = f"Fabric.{function}()" if module.endswith(".fabric") else f"{module} ({function})"
            return door, shown
    return None, ""


def check_caller(plugin: Any) -> None:
    """Refuse ``plugin`` when the Lightning code calling into it belongs to the other door.

    Plugin classes call this first thing in ``convert_module``, which both ``lightning.fabric.Fabric.setup`` and
    every Trainer strategy call before training: a Trainer class set up by Fabric (or a Fabric class by a Trainer
    strategy) is refused there, with the class to use, instead of failing later in ``backward``. Calls from
    anywhere else (tests, custom loops) pass.

    Raises:
        WrongDoorError: the caller is Lightning code of the other door.
    """
    built_for = door_of(plugin)
    caller, module = _calling_door(1)
    if built_for is None or caller is None or caller == built_for:
        return
    raise wrong_door_error(plugin, caller, where=module)


__all__ = ["check_caller", "door_of", "wrong_door_error"]
