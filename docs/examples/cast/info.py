"""The entry-point object of the ``"cast"`` example backend: plain data, so listing
plugins imports no torch.

A distribution publishes it in its pyproject.toml::

    [project.entry-points."precision_base.plugins"]
    cast = "cast.info:INFO"
"""

from precision_base import PluginInfo

# 1. The info object: plain data, the value of the entry point. Importing it must stay
# cheap (no torch).
INFO = PluginInfo(
    backend="cast",
    precisions=("16-true", "bf16-true"),
    plugin_class="cast.plugin:CastPrecision",
    strategy="any strategy that leaves parameters alone (single device, DDP)",
    requires=("lightning>=2.4",),
    summary="parameters, inputs and compute in fp16 or bf16; no autocast, no scaler",
)
