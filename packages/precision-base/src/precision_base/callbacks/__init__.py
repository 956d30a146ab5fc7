"""Lightning callbacks users add to a Trainer, one module each.

* [`precision_base.callbacks.monitor`][]: [`PrecisionMonitor`][precision_base.callbacks.monitor.PrecisionMonitor],
  the plugin's loss scale, skipped steps and norms to the loggers;
* [`precision_base.callbacks.schedule`][]:
  [`PrecisionSchedule`][precision_base.callbacks.schedule.PrecisionSchedule], precision that changes during a run.

The runtime precision audit, also a callback, is its own part: [`precision_base.audit`][]. Users import the classes
from ``precision_base`` (or ``precision_base.pytorch_lightning`` for that namespace); importing this package imports
no torch or Lightning module.
"""
