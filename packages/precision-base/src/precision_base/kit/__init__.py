"""What a plugin's own code imports from precision-base: the helpers every precision plugin needs, written once.

* [`precision_base.kit.plugin_support`][]: accelerator checks, strategy lookups, the wrong-strategy error, the
  precision -> dtype map, the device a Fabric class learns from its first batch;
* [`precision_base.kit.keep_fp32`][]: which modules stay float32 (``keep_fp32=`` and the shared defaults);
* [`precision_base.kit.overflow`][]: ``max_skipped_steps`` and the watch over skipped steps;
* [`precision_base.kit.numerics`][]: optimizer settings that round to zero in the parameters' dtype;
* [`precision_base.kit.extra`][]: extra precisions (such as a float8 recipe) declared as features, torch-free;
* [`precision_base.kit.fence`][]: the one shape of every plugin's ``_compat`` entries, and their check;
* [`precision_base.kit.casting`][]: casting a batch's floating tensors, switching the default dtype;
* [`precision_base.kit.cpu_half`][]: float16 on a CPU that only emulates it;
* [`precision_base.kit.lazy`][]: a package's PEP 562 lazy exports.

Each module is imported by its own path; this package's ``__init__`` imports nothing, so a plugin's torch-free info
module can import [`precision_base.kit.extra`][] without paying for the rest. The conformance tests a plugin runs
against itself are elsewhere: [`precision_base.testing`][].
"""
