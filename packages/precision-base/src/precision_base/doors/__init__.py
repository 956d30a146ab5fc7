"""The two doors a plugin name comes in by: a Lightning Trainer and Lightning Fabric.

* [`precision_base.doors.combine`][]: what both doors do with ``precision_plugin=`` and ``plugins=``, driven by a
  [`DoorDescription`][precision_base.doors.combine.DoorDescription] of what differs;
* [`precision_base.doors.trainer`][]: the Trainer door (``precision_base.Trainer``'s mixin,
  ``prepare_trainer_kwargs``, ``PL_TRAINER_PRECISION_PLUGIN``, the trainability check);
* [`precision_base.doors.fabric`][]: the Fabric door (``precision_base.Fabric``'s mixin, ``prepare_fabric_kwargs``,
  ``resolve_fabric``);
* [`precision_base.doors.identity`][], exported here: which door a plugin class belongs to, and
  [`WrongDoorError`][precision_base.errors.WrongDoorError] for the other door's class
  ([`check_caller`][precision_base.doors.check_caller] for a plugin's ``convert_module``).

Names resolve through [`precision_base.registry.resolve`][] at the door. Users import the public names from
``precision_base`` (``Trainer``, ``Fabric``, the two mixins, ``prepare_trainer_kwargs``, ``prepare_fabric_kwargs``,
``resolve_fabric``); every fact about a door is in [`precision_base.door_table`][]. Importing this package imports no
torch or Lightning module.
"""

from precision_base.doors.identity import check_caller, door_of, wrong_door_error

__all__ = ["check_caller", "door_of", "wrong_door_error"]
