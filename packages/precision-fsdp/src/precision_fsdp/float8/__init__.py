"""Low-precision training by name: ``fsdp:fp8-tensorwise``, ``fsdp:fp8-rowwise`` and ``fsdp:mxfp8-rceil`` (torchao).

* [`precision_fsdp.float8.recipes`][]: the names, their torchao recipes and what each needs (plain data, no torch:
  ``_info.py`` reads it);
* [`precision_fsdp.float8.config`][]: torchao's conversion of the Linear layers, the hardware checks, the filters;
* [`precision_fsdp.float8.feature`][]: the feature object whose hooks the plugin calls;
* [`precision_fsdp.float8.switch`][]: undoing the conversion when a precision schedule switches away from fp8.

Importing this package imports nothing else (no torch, no torchao).
"""
