"""``precision_base.Trainer``: Lightning's Trainer plus a ``precision_plugin=`` argument.

Everything but ``precision_plugin`` goes to ``lightning.pytorch.Trainer`` unchanged. All checks run in
``__init__``, before Lightning launches any process.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional, Union

import lightning.pytorch as pl
from lightning.pytorch.plugins.precision import Precision

from precision_base.contract import PrecisionPlugin
from precision_base.errors import TrainerConfigurationError
from precision_base.registry import resolve


def _as_list(plugins: Any) -> list[Any]:
    if plugins is None:
        return []
    if isinstance(plugins, (list, tuple)):
        return list(plugins)
    if isinstance(plugins, str) or not isinstance(plugins, Iterable):
        return [plugins]
    return list(plugins)


def prepare_trainer_kwargs(precision_plugin: Union[str, Precision], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Return Lightning Trainer kwargs with ``precision_plugin`` turned into an instance in ``plugins=``.

    Raises:
        TrainerConfigurationError: ``precision=`` is also given, ``plugins=`` already holds a precision plugin,
            or the plugin cannot work with ``strategy=``.
        TypeError: ``precision_plugin`` is neither a name nor a ``Precision``.
    """
    if kwargs.get("precision") is not None:
        raise TrainerConfigurationError(
            f"Trainer got both precision={kwargs['precision']!r} and precision_plugin={precision_plugin!r}. "
            "The precision plugin already sets the precision: remove precision=, and put the precision in the "
            'plugin name instead (e.g. precision_plugin="fsdp:bf16-mixed").'
        )
    plugins = _as_list(kwargs.get("plugins"))
    clashing = [p for p in plugins if isinstance(p, Precision)]
    if clashing:
        raise TrainerConfigurationError(
            f"Trainer got precision_plugin={precision_plugin!r} and also the precision plugin "
            f"{type(clashing[0]).__name__} in plugins=. Pass exactly one precision plugin: either by name with "
            "precision_plugin= or as an instance in plugins=, not both."
        )
    if isinstance(precision_plugin, str):
        plugin = resolve(precision_plugin)
    elif isinstance(precision_plugin, Precision):
        plugin = precision_plugin
    else:
        raise TypeError(
            'precision_plugin must be a name like "fsdp:bf16-mixed" or a lightning.pytorch Precision instance, '
            f"got {type(precision_plugin).__name__} {precision_plugin!r}"
        )
    out = dict(kwargs)
    out.pop("precision", None)
    if isinstance(plugin, PrecisionPlugin):
        out["strategy"] = plugin.configure_strategy(
            kwargs.get("strategy", "auto"),
            accelerator=kwargs.get("accelerator", "auto"),
            devices=kwargs.get("devices", "auto"),
        )
    out["plugins"] = [*plugins, plugin]
    return out


class Trainer(pl.Trainer):
    """``lightning.pytorch.Trainer`` with one more keyword argument.

    Args:
        precision_plugin: a plugin name ``"<backend>:<precision>"`` (e.g. ``"fsdp:bf16-mixed"``) resolved through
            the installed plugins, or a ``Precision`` instance. ``None`` (the default) leaves the Trainer exactly
            as Lightning's.
        **kwargs: every argument of ``lightning.pytorch.Trainer``.
    """

    def __init__(self, *, precision_plugin: Optional[Union[str, Precision]] = None, **kwargs: Any) -> None:
        if precision_plugin is not None:
            kwargs = prepare_trainer_kwargs(precision_plugin, kwargs)
        super().__init__(**kwargs)
