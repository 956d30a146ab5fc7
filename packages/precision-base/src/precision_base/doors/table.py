"""The two doors a plugin comes in by, a Lightning Trainer and Lightning Fabric: every fact about a door, once.

Every module that needs a door fact (which namespaces a door builds plugins for, which ``PluginInfo`` field names
its class, what the user calls, what Lightning lists in its messages) reads it from
[`DOORS`][precision_base.doors.table.DOORS]. Imports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Door = Literal["Trainer", "Fabric"]
"""A door's name: the ``door=`` of [`precision_base.registry.resolve`][]."""


@dataclass(frozen=True)
class DoorFacts:
    """What is true of one door.

    Attributes:
        name: ``"Trainer"`` or ``"Fabric"``.
        namespaces: the Lightning namespaces the door builds plugin instances for; the first is the default.
        info_field: the [`PluginInfo`][precision_base.PluginInfo] field naming the backend's class for this door.
        user_class: what a user calls to pass ``precision_plugin=`` at this door.
        lightning_classes: the Lightning classes the door's mixin is listed before.
        plugin_types: the plugin types Lightning names when it refuses an entry of ``plugins=`` at this door.
        described: the door in a sentence ("a Lightning Trainer").
    """

    name: Door
    namespaces: tuple[str, ...]
    info_field: str
    user_class: str
    lightning_classes: str
    plugin_types: str
    described: str


DOORS: Final[dict[Door, DoorFacts]] = {
    "Trainer": DoorFacts(
        name="Trainer",
        namespaces=("lightning.pytorch", "pytorch_lightning"),
        info_field="plugin_class",
        user_class="precision_base.Trainer",
        lightning_classes="lightning.Trainer or pytorch_lightning.Trainer",
        plugin_types="Precision, CheckpointIO, ClusterEnvironment, or LayerSync",
        described="a Lightning Trainer",
    ),
    "Fabric": DoorFacts(
        name="Fabric",
        namespaces=("lightning.fabric", "lightning_fabric"),
        info_field="fabric_class",
        user_class="precision_base.Fabric",
        lightning_classes="lightning.fabric.Fabric or lightning_fabric.Fabric",
        plugin_types="Precision, CheckpointIO, ClusterEnvironment",
        described="Lightning Fabric",
    ),
}
"""Every door, by name."""


def other_door(door: Door) -> Door:
    """The door that is not ``door``: its plugin classes are the ones ``door`` refuses."""
    (other,) = (name for name in DOORS if name != door)
    return other


def door_of_namespace(namespace: object) -> Door | None:
    """The door whose namespaces include ``namespace``; ``None`` for any other value."""
    for facts in DOORS.values():
        if namespace in facts.namespaces:
            return facts.name
    return None


__all__ = ["DOORS", "Door", "DoorFacts", "door_of_namespace", "other_door"]
