"""The fence, Lightning part: private or undocumented Lightning symbols and behaviours the plugin relies on.

Lightning symbols are looked up in the namespace at hand (``lightning.pytorch`` or ``pytorch_lightning``) where the
caller passes it. See `precision_fsdp._compat` for the rules; `FENCED` lists this module's entries.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, Optional

import torch

from precision_base.kit.fence import Fenced

INPUT_DTYPE_ATTR: Final = "_desired_input_dtype"
"""Private attribute of Lightning's ``FSDPPrecision``: the dtype its ``convert_input`` casts to. Set for code that
reads it from Lightning's built-in class."""


LIGHTNING_SCALER_METHODS: Final = ("pre_backward", "optimizer_step")
"""Undocumented behaviour relied on: these methods of Lightning's ``FSDPPrecision`` scale the loss, unscale, step and
update with whatever ``self.scaler`` holds (or skip scaling when it is ``None``). The plugin sets ``self.scaler`` to
the scaler it builds (``torch.amp.GradScaler`` for FSDP2, ``ShardedGradScaler`` for FSDP1) and calls them through
``super()``."""


def set_lightning_input_dtype(plugin: Any, dtype: torch.dtype) -> None:
    """Set `INPUT_DTYPE_ATTR` on ``plugin``."""
    setattr(plugin, INPUT_DTYPE_ATTR, dtype)


MODEL_PARALLEL_SIZE_ATTRS: Final = ("_data_parallel_size", "_tensor_parallel_size")
"""Private attributes of Lightning's ``ModelParallelStrategy`` holding its two mesh sizes (``"auto"`` or an int),
resolved in ``setup_environment``."""


def mesh_sizes(strategy: Any) -> tuple[Any, Any]:
    """``(data_parallel_size, tensor_parallel_size)`` of a ``ModelParallelStrategy``, each ``"auto"`` or an int."""
    return tuple(getattr(strategy, name) for name in MODEL_PARALLEL_SIZE_ATTRS)  # type: ignore[return-value]


def set_data_parallel_size(strategy: Any, size: int) -> None:
    """Set the data-parallel size of a ``ModelParallelStrategy`` before its ``setup_environment`` builds the mesh."""
    setattr(strategy, MODEL_PARALLEL_SIZE_ATTRS[0], size)


@contextmanager
def configure_model_counted_as_overridden(module: Any) -> Iterator[None]:
    """Inside the block, Lightning's ``is_overridden("configure_model", module)`` is true.

    ``ModelParallelStrategy.setup`` refuses a LightningModule that does not override ``configure_model`` (it assumes
    nothing else shards the model). When [`FSDP2Strategy`][precision_fsdp.sharding.strategy.FSDP2Strategy] has sharded
    the model itself, it runs Lightning's ``setup`` inside this block. Undocumented behaviour used: ``is_overridden``
    compares ``getattr(module, "configure_model")`` with ``LightningModule.configure_model``, so an instance
    attribute holding another function counts as an override. The attribute is removed on exit. A LightningModule
    whose class overrides ``configure_model`` is left as it is.
    """
    if "configure_model" in vars(module) or _class_overrides_configure_model(type(module)):
        yield
        return

    def configure_model(self: Any) -> None:
        """Sharded by precision_fsdp.FSDP2Strategy's default policy."""

    module.configure_model = types.MethodType(configure_model, module)
    try:
        yield
    finally:
        del module.configure_model


def _class_overrides_configure_model(cls: type) -> bool:
    """Whether a class between ``cls`` and Lightning's ``LightningModule`` (either namespace) defines
    ``configure_model``."""
    for base in cls.__mro__:
        if base.__name__ == "LightningModule" and base.__module__.endswith(".core.module"):
            return False
        if "configure_model" in vars(base):
            return True
    return False


THROUGHPUT_DTYPE_FUNCTION: Final = "_plugin_to_compute_dtype"
"""Private function of ``<lightning>.callbacks.throughput_monitor`` that ``ThroughputMonitor.setup`` calls to learn
a precision plugin's compute dtype. For any ``FSDPPrecision`` it returns ``mixed_precision_config.reduce_dtype``,
which is fp32 under our ``*-mixed`` default (gradients reduced in fp32) although compute runs in bf16/fp16."""

_ROUTED_MARK: Final = "__precision_fsdp_routed__"


def route_throughput_compute_dtype(
    lightning: types.ModuleType, compute_dtype_of: Callable[[Any], Optional[Any]]
) -> None:
    """Make ``ThroughputMonitor`` of the Lightning namespace ``lightning`` ask ``compute_dtype_of(plugin)`` first
    (for a Fabric namespace: Fabric's ``ThroughputMonitor``, in ``<fabric>.utilities.throughput``).

    ``compute_dtype_of`` returns a ``torch.dtype`` for plugins of this package and ``None`` for all others, which
    keep Lightning's answer. Installed once per namespace (idempotent), by the plugin's constructor.
    """
    if hasattr(lightning, "callbacks"):
        module: Any = getattr(lightning.callbacks, "throughput_monitor")  # noqa: B009
    else:  # Fabric: lightning.fabric.utilities.throughput holds the same private function
        module = lightning.utilities.throughput
    original = getattr(module, THROUGHPUT_DTYPE_FUNCTION)
    if getattr(original, _ROUTED_MARK, False):
        return

    @functools.wraps(original)
    def compute_dtype(plugin: Any) -> Any:
        ours = compute_dtype_of(plugin)
        return original(plugin) if ours is None else ours

    setattr(compute_dtype, _ROUTED_MARK, True)
    setattr(module, THROUGHPUT_DTYPE_FUNCTION, compute_dtype)


FSDP_ON_CPU_CHECK: Final = "_check_strategy_and_fallback"
"""Private method of Lightning's ``_AcceleratorConnector`` (``<lightning>.trainer.connectors.accelerator_connector``)
that refuses FSDP1 on an accelerator other than CUDA. Its wording depends on the release (Lightning 2.4.0-2.5.2:
"... requires a GPU accelerator, but got: cpu"; 2.5.3 on: "... but received `accelerator='cpu'`. Please set ..."),
so the plugin quotes the installed Lightning's message by running this check rather than keeping a copy. Undocumented
behaviour used: before raising, the check reads only ``self._strategy_flag`` and ``self._accelerator_flag``."""


def lightning_fsdp_on_cpu_message(lightning: types.ModuleType, accelerator: Any) -> Optional[str]:
    """The installed Lightning's own error message for ``strategy="fsdp"`` with ``accelerator``, verbatim.

    Args:
        lightning: the Lightning namespace's root module (``lightning.pytorch`` or ``pytorch_lightning``).
        accelerator: the accelerator as Lightning resolved it (``"cpu"``, or the object passed).

    Returns:
        The message of the ``ValueError`` Lightning raises, or ``None`` when this Lightning does not refuse it.
    """
    module = importlib.import_module(f"{lightning.__name__}.trainer.connectors.accelerator_connector")
    check = getattr(module._AcceleratorConnector, FSDP_ON_CPU_CHECK)
    probe = types.SimpleNamespace(_strategy_flag="fsdp", _accelerator_flag=accelerator)
    try:
        check(probe)
    except ValueError as err:
        return str(err)
    return None


FSDP1_STATE_DICT_TYPE_ATTR: Final = "_state_dict_type"
"""Where both Lightning namespaces' ``FSDPStrategy`` keep the constructor's ``state_dict_type``."""


def fsdp1_state_dict_type(strategy: Any) -> Optional[str]:
    """``"full"`` or ``"sharded"``: what an ``FSDPStrategy`` instance was asked to save (``None`` when unknown)."""
    value = getattr(strategy, FSDP1_STATE_DICT_TYPE_ATTR, None)
    return value if isinstance(value, str) else None


# -- the entries the compat test walks ----------------------------------------------------------------------------
def _check_fsdp1_state_dict_type() -> Optional[str]:
    from lightning.fabric.strategies.fsdp import FSDPStrategy as FabricFSDPStrategy
    from lightning.pytorch.strategies import FSDPStrategy

    got = [fsdp1_state_dict_type(cls(state_dict_type="full")) for cls in (FSDPStrategy, FabricFSDPStrategy)]
    return None if got == ["full", "full"] else f"no longer holds state_dict_type (got {got!r})"


def _check_lightning_scaler_use() -> Optional[str]:
    cls = _lightning_fsdp_precision()
    uses = [name for name in LIGHTNING_SCALER_METHODS if "self.scaler" in inspect.getsource(getattr(cls, name))]
    missing = sorted(set(LIGHTNING_SCALER_METHODS) - set(uses))
    return f"{missing} no longer use self.scaler" if missing else None


def _lightning_fsdp_precision() -> Any:
    from lightning.pytorch.plugins.precision import FSDPPrecision

    return FSDPPrecision


def _check_input_dtype_attr() -> Optional[str]:
    source = inspect.getsource(_lightning_fsdp_precision())
    return None if INPUT_DTYPE_ATTR in source else "Lightning's FSDPPrecision no longer uses it"


def _check_mesh_sizes() -> Optional[str]:
    from lightning.pytorch.strategies import ModelParallelStrategy

    strategy = ModelParallelStrategy(data_parallel_size=3, tensor_parallel_size=1)
    if mesh_sizes(strategy) != (3, 1):
        return f"no longer hold the constructor's sizes (got {mesh_sizes(strategy)!r})"
    source = inspect.getsource(ModelParallelStrategy.setup_environment)
    return None if all(n in source for n in MODEL_PARALLEL_SIZE_ATTRS) else "setup_environment no longer reads them"


def _check_configure_model_override() -> Optional[str]:
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import ModelParallelStrategy
    from lightning.pytorch.utilities.model_helpers import is_overridden

    module = pl.LightningModule()
    if is_overridden("configure_model", module):
        return "a plain LightningModule already counts as overriding configure_model"
    with configure_model_counted_as_overridden(module):
        inside = is_overridden("configure_model", module)
    if not inside or is_overridden("configure_model", module):
        return "an instance attribute no longer counts as an override (or was not removed)"
    source = inspect.getsource(ModelParallelStrategy.setup)
    return None if "configure_model" in source else "ModelParallelStrategy.setup no longer checks configure_model"


def _check_throughput_function() -> Optional[str]:
    from lightning.pytorch.callbacks import ThroughputMonitor, throughput_monitor

    func = getattr(throughput_monitor, THROUGHPUT_DTYPE_FUNCTION, None)
    if func is None:
        return "function is gone"
    if list(inspect.signature(func).parameters) != ["plugin"]:
        return f"signature changed to {inspect.signature(func)}"
    source = inspect.getsource(ThroughputMonitor.setup)
    return None if THROUGHPUT_DTYPE_FUNCTION in source else "ThroughputMonitor.setup no longer calls it"


def _check_fsdp_on_cpu_message() -> Optional[str]:
    import lightning.pytorch as pl

    message = lightning_fsdp_on_cpu_message(pl, "cpu")
    if message is None or "requires a GPU accelerator" not in message:
        return f"no longer refuses strategy='fsdp' on accelerator='cpu' as expected (got {message!r})"
    return None


FENCED: Final[tuple[Fenced, ...]] = (
    Fenced(
        "lightning.pytorch.plugins.precision",
        "FSDPPrecision.pre_backward/optimizer_step use self.scaler",
        why="the plugin's scaler stepped by Lightning's methods",
        check=_check_lightning_scaler_use,
    ),
    Fenced(
        "lightning.pytorch.plugins.precision",
        f"FSDPPrecision.{INPUT_DTYPE_ATTR}",
        why="code reading Lightning's input dtype",
        check=_check_input_dtype_attr,
    ),
    Fenced(
        "lightning.pytorch.strategies",
        "ModelParallelStrategy." + "/".join(MODEL_PARALLEL_SIZE_ATTRS),
        why="FSDP2Strategy's mesh sizes",
        check=_check_mesh_sizes,
    ),
    Fenced(
        "lightning.pytorch.utilities.model_helpers",
        "is_overridden('configure_model')",
        why="FSDP2Strategy shards a model without configure_model",
        check=_check_configure_model_override,
    ),
    Fenced(
        "lightning.pytorch.callbacks.throughput_monitor",
        THROUGHPUT_DTYPE_FUNCTION,
        why="ThroughputMonitor reports the compute dtype",
        check=_check_throughput_function,
    ),
    Fenced(
        "lightning.pytorch.strategies",
        f"FSDPStrategy.{FSDP1_STATE_DICT_TYPE_ATTR}",
        why="a refused FSDPStrategy's full-state-dict choice carried into the suggested FSDP2Strategy",
        check=_check_fsdp1_state_dict_type,
    ),
    Fenced(
        "lightning.pytorch.trainer.connectors.accelerator_connector",
        f"_AcceleratorConnector.{FSDP_ON_CPU_CHECK}",
        why="quoting Lightning's FSDP1-on-CPU refusal",
        check=_check_fsdp_on_cpu_message,
    ),
)
"""This module's fenced symbols."""

__all__ = [
    "FENCED",
    "FSDP1_STATE_DICT_TYPE_ATTR",
    "FSDP_ON_CPU_CHECK",
    "INPUT_DTYPE_ATTR",
    "LIGHTNING_SCALER_METHODS",
    "MODEL_PARALLEL_SIZE_ATTRS",
    "THROUGHPUT_DTYPE_FUNCTION",
    "configure_model_counted_as_overridden",
    "fsdp1_state_dict_type",
    "lightning_fsdp_on_cpu_message",
    "mesh_sizes",
    "route_throughput_compute_dtype",
    "set_data_parallel_size",
    "set_lightning_input_dtype",
]
