"""Helpers every precision plugin needs, written once: accelerator checks, strategy lookups, the wrong-strategy
error and the precision -> dtype map.

Importing this module imports neither torch nor Lightning; each function imports what it needs when called.
Accelerator instances are recognised with ``isinstance`` against the classes of every Lightning namespace that
is already imported (an instance of a namespace's class means that namespace is imported), never by type name.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any, Final, Optional

from precision_base.errors import TrainerConfigurationError

if TYPE_CHECKING:
    import torch

PRECISION_DTYPE_NAMES: Final[dict[str, str]] = {
    "32-true": "float32",
    "16-true": "float16",
    "bf16-true": "bfloat16",
    "16-mixed": "float16",
    "bf16-mixed": "bfloat16",
}
"""Each canonical precision and the torch dtype name it computes in (the low dtype of a ``*-mixed`` precision).

The only precision -> dtype map of the project; [`precision_dtype`][precision_base.kit.plugin_support.precision_dtype]
turns a name into the ``torch.dtype``.
"""

_CUDA_NAMES: Final = frozenset({"cuda", "gpu"})
# modules whose CPU / CUDA accelerator classes an accelerator instance may come from (Trainer and Fabric, both names)
_ACCELERATOR_MODULES: Final = (
    "lightning.pytorch.accelerators",
    "pytorch_lightning.accelerators",
    "lightning.fabric.accelerators",
    "lightning_fabric.accelerators",
)


def precision_dtype(precision: str) -> torch.dtype:
    """The ``torch.dtype`` a canonical precision computes in (``torch.bfloat16`` for ``"bf16-mixed"``).

    Raises:
        KeyError: ``precision`` is not one of the five canonical precisions (normalise aliases first with
            [`precision_base.normalize_precision`][]).
    """
    import torch

    return getattr(torch, PRECISION_DTYPE_NAMES[precision])  # type: ignore[no-any-return]


def _loaded_accelerator_classes(name: str) -> tuple[type, ...]:
    found: list[type] = []
    for module_name in _ACCELERATOR_MODULES:
        module = sys.modules.get(module_name)
        cls = getattr(module, name, None) if module is not None else None
        if isinstance(cls, type):
            found.append(cls)
    return tuple(found)


def _auto_accelerator() -> str:
    """What Lightning's ``accelerator="auto"`` picks on this machine: ``"tpu"``, ``"mps"``, ``"cuda"`` or ``"cpu"``."""
    try:
        accelerators: Any = importlib.import_module("lightning.fabric.accelerators")
    except ImportError:
        accelerators = importlib.import_module("lightning_fabric.accelerators")
    if accelerators.XLAAccelerator.is_available():
        return "tpu"
    if accelerators.MPSAccelerator.is_available():
        return "mps"
    if accelerators.CUDAAccelerator.is_available():
        return "cuda"
    return "cpu"


def uses_cpu(accelerator: Any) -> bool:
    """Whether a Trainer/Fabric ``accelerator`` argument means the CPU.

    Args:
        accelerator: ``"cpu"``, ``"auto"`` (resolved the way Lightning resolves it on this machine), any other
            accelerator name, or an accelerator instance of either Lightning namespace.
    """
    if isinstance(accelerator, str):
        name = accelerator.lower()
        return (_auto_accelerator() if name == "auto" else name) == "cpu"
    return isinstance(accelerator, _loaded_accelerator_classes("CPUAccelerator"))


def uses_cuda(accelerator: Any) -> bool:
    """Whether a Trainer/Fabric ``accelerator`` argument means CUDA GPUs.

    Args:
        accelerator: ``"cuda"`` or ``"gpu"``, ``"auto"`` (CUDA when Lightning's automatic choice is CUDA), any other
            accelerator name, or an accelerator instance of either Lightning namespace.
    """
    if isinstance(accelerator, str):
        name = accelerator.lower()
        return (_auto_accelerator() if name == "auto" else name) in _CUDA_NAMES
    return isinstance(accelerator, _loaded_accelerator_classes("CUDAAccelerator"))


def registered_strategy_class(name: str, namespace: str = "lightning.pytorch") -> Optional[type]:
    """The strategy class the name ``name`` (``"fsdp"``, ``"deepspeed_stage_2"``...) builds in ``namespace``.

    Args:
        name: a strategy name as given to ``Trainer(strategy=...)``.
        namespace: ``"lightning.pytorch"`` or ``"pytorch_lightning"``.

    Returns:
        The class from that namespace's ``StrategyRegistry``, or ``None`` when the name is not registered there.
    """
    registry: Any = importlib.import_module(f"{namespace}.strategies").StrategyRegistry
    # StrategyRegistry.get() builds an instance; the class sits in the registry's entry
    return registry[name]["strategy"] if name in registry else None


def _describe_strategy(strategy: Any) -> str:
    return repr(strategy) if isinstance(strategy, str) else f"{type(strategy).__name__}(...)"


def wrong_strategy_error(spec: str, given: Any, remedy: str) -> TrainerConfigurationError:
    """The error every plugin raises when a Trainer's ``strategy=`` cannot work with it.

    Args:
        spec: the plugin's name, e.g. ``"fsdp:bf16-mixed"``.
        given: the ``strategy=`` argument (a name or a strategy instance).
        remedy: what to pass instead, as one or more full sentences.

    Returns:
        A [`TrainerConfigurationError`][precision_base.errors.TrainerConfigurationError] reading
        ``precision plugin 'fsdp:bf16-mixed' cannot work with strategy='ddp'. <remedy>``, with the attributes
        ``spec`` and ``strategy`` set to the arguments.
    """
    error = TrainerConfigurationError(
        f"precision plugin {spec!r} cannot work with strategy={_describe_strategy(given)}. {remedy}"
    )
    error.spec = spec  # type: ignore[attr-defined]
    error.strategy = given  # type: ignore[attr-defined]
    return error


def bind_device_from_inputs(plugin: Any, data: Any) -> None:
    """Fabric plugin classes call this in ``convert_input``: Fabric has no ``connect`` hook, so the device autocast
    runs on is learned from the first tensor in ``data`` (Fabric moved the inputs to the strategy's device)."""
    import torch

    stack = [data]
    while stack:
        item = stack.pop(0)
        if isinstance(item, torch.Tensor):
            plugin.bind_device(item.device)
            return
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


__all__ = [
    "bind_device_from_inputs",
    "PRECISION_DTYPE_NAMES",
    "precision_dtype",
    "registered_strategy_class",
    "uses_cpu",
    "uses_cuda",
    "wrong_strategy_error",
]
