"""How a model is sharded with FSDP1 and FSDP2.

* [`precision_fsdp.sharding.units`][]: which modules become FSDP2 units (the wrap policies, the default blocks,
  Lightning's extra units), and telling FSDP1 from FSDP2 on a model;
* [`precision_fsdp.sharding.model`][]: the plugin's own ``fully_shard`` and the ``keep_fp32`` part of
  ``convert_module`` (plain functions the plugin calls);
* [`precision_fsdp.sharding.strategy`][]: ``FSDP2Strategy``, which shards by those units when the LightningModule does
  not shard itself;
* [`precision_fsdp.sharding.root_unit`][]: a LightningModule that is itself a unit gathers its parameters in its
  step methods;
* [`precision_fsdp.sharding.sharded_init`][]: initialising a model after sharding on a CPU device mesh.

Importing this package imports nothing else (no torch).
"""
