"""The two doors a plugin name comes in by: a Lightning Trainer and Lightning Fabric.

* [`precision_base.doors.table`][]: every fact about a door (its namespaces, its ``PluginInfo`` field, what the user
  calls, Lightning's plugin types), one row each, read by every module below;
* [`precision_base.doors.combine`][]: what both doors do with ``precision_plugin=`` and ``plugins=``, driven by a
  [`DoorDescription`][precision_base.doors.combine.DoorDescription] of what differs;
* [`precision_base.doors.trainer`][]: the Trainer door (``precision_base.Trainer``'s mixin,
  ``prepare_trainer_kwargs``, ``PL_TRAINER_PRECISION_PLUGIN``, the trainability check);
  [`precision_base.doors.trainer_class`][] holds ``precision_base.Trainer`` itself;
* [`precision_base.doors.fabric`][]: the Fabric door (``precision_base.Fabric``'s mixin, ``prepare_fabric_kwargs``,
  ``resolve_fabric``); [`precision_base.doors.fabric_class`][] holds ``precision_base.Fabric``;
* [`precision_base.doors.cant_train`][]: runs that cannot train (replaced parameters, steps without gradients),
  checked at both doors;
* [`precision_base.doors.identity`][]: which door a plugin class belongs to, and
  [`WrongDoorError`][precision_base.errors.WrongDoorError] for the other door's class
  ([`check_caller`][precision_base.doors.identity.check_caller] for a plugin's ``convert_module``).

Names resolve through [`precision_base.registry.resolve`][] at the door. Users import the public names from
``precision_base`` (``Trainer``, ``Fabric``, the two mixins, ``prepare_trainer_kwargs``, ``prepare_fabric_kwargs``,
``resolve_fabric``). Each name is imported from the module that defines it: this ``__init__`` imports nothing, so
the parts of this package (and the table, which the registry reads early) never find it half-built.
"""
