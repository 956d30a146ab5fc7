"""The Fabric front door: ``precision_plugin="fsdp:bf16-mixed"`` for ``lightning.fabric.Fabric``.

Three public forms, like the Trainer door ([`precision_base.front_door`][]):

* ``precision_base.Fabric``: ``lightning.fabric.Fabric`` with a ``precision_plugin=`` argument;
* [`PrecisionPluginFabricMixin`][precision_base.fabric.PrecisionPluginFabricMixin], listed before a Fabric class in the
  bases of a user's own Fabric subclass
  (``lightning.fabric.Fabric`` or ``lightning_fabric.Fabric``; the namespace comes from the class);
* [`prepare_fabric_kwargs`][precision_base.fabric.prepare_fabric_kwargs], for a Fabric subclass with its own
  ``__init__``.

A name resolves to the backend's *Fabric* class (``PluginInfo.fabric_class``, derived from a
``lightning.fabric.plugins.precision`` class), never to its Trainer class;
[`resolve_fabric`][precision_base.fabric.resolve_fabric] does that and
says so when a backend has no Fabric class. The plugin's ``configure_strategy`` then checks ``strategy=``:
``"auto"`` becomes the backend's Fabric strategy, a strategy that cannot work is an error saying what to pass.

The code lives in [`precision_base.doors.fabric`][]; this module keeps the public names where they were. Importing
it imports no torch or Lightning module; each call imports the namespace it works for.
"""

from __future__ import annotations

from precision_base.doors.fabric import (
    FabricNotSupportedError,
    PrecisionPluginFabricMixin,
    bind_device_from_inputs,
    fabric_class,
    prepare_fabric_kwargs,
    resolve_fabric,
)

__all__ = [
    "FabricNotSupportedError",
    "PrecisionPluginFabricMixin",
    "bind_device_from_inputs",
    "fabric_class",
    "prepare_fabric_kwargs",
    "resolve_fabric",
]
