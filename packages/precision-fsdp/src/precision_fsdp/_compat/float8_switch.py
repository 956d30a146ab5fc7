"""The fence, float8-switch part: switching a sharded model away from torchao's float8 training
([`precision_fsdp.float8.switch`][]).

Every private torch / torchao attribute that undoing torchao's conversion on an FSDP2-sharded model touches, one
small function each. See `precision_fsdp._compat` for the rules; `FENCED` lists this module's entries
(part of the package's ``FENCED``, checked by ``tests/test_compat.py``):

* torchao's weight wrappers keep the float32 weight as an attribute: ``WeightWithDynamicFloat8CastTensor._tensor``
  (``torchao.float8``, the module swap's float8 all-gather) and ``TrainingWeightWrapperBaseTensor._data``
  (``torchao.prototype.moe_training``, the weight-wrapper API);
* FSDP2 keeps each sharded parameter in an ``FSDPParam`` (``FSDPModule._get_fsdp_state()._fsdp_param_group
  .fsdp_params``) that holds the padded local shard twice: ``_sharded_param_data`` (flat, what is all-gathered) and
  the sharded DTensor parameter's ``_local_tensor`` (a view of it); both are the wrapper under float8 all-gather;
* FSDP2 gives every unit a class of its own (``FSDPFloat8Linear``), made once per class and cached in
  ``torch.distributed.fsdp._fully_shard._fully_shard.cls_to_fsdp_cls`` (``get_cls_to_fsdp_cls()``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from typing import Any, Final, Optional

import torch

from precision_base.kit.fence import Fenced
from precision_fsdp._compat.torch_fsdp import local_tensor

_INNER: Final[tuple[tuple[str, str, str], ...]] = (
    ("torchao.float8.fsdp_utils", "WeightWithDynamicFloat8CastTensor", "_tensor"),
    ("torchao.prototype.moe_training.tensor", "TrainingWeightWrapperBaseTensor", "_data"),
)
"""torchao's weight-wrapper tensor classes and the attribute that holds the high-precision tensor inside."""

FLOAT8_LINEAR: Final[tuple[str, str]] = ("torchao.float8.float8_linear", "Float8Linear")
"""torchao's module-swap layer (not public in ``torchao.float8``): a ``torch.nn.Linear`` with no parameter or buffer
of its own."""

FLOAT8_LINEAR_ATTRS: Final[tuple[str, ...]] = (
    "config",
    "linear_mm_config",
    "scaling_type_input",
    "scaling_type_weight",
    "scaling_type_grad_output",
)
"""What ``Float8Linear.__init__`` adds to a ``torch.nn.Linear`` (removed when it becomes one again)."""

FSDP2_PARAM_ATTRS: Final[tuple[str, ...]] = ("_sharded_param_data", "sharded_param", "sharded_state")
"""The ``FSDPParam`` attributes `unwrap_fsdp_param` reads or replaces."""


def _loaded(module_name: str, name: str) -> Any:
    """``module_name.name`` if that module is imported already, else ``None``: a model can hold torchao's classes
    only once torchao made them, so a switch without fp8 never imports torchao."""
    return getattr(sys.modules.get(module_name), name, None)


def _wrapper_classes() -> list[tuple[type, str]]:
    return [(cls, attr) for module_name, name, attr in _INNER if (cls := _loaded(module_name, name)) is not None]


def wrapped_inner(tensor: torch.Tensor) -> Optional[torch.Tensor]:
    """The plain tensor inside ``tensor`` when it is one of torchao's weight wrappers, else ``None``."""
    for cls, attr in _wrapper_classes():
        if isinstance(tensor, cls):
            inner: torch.Tensor = getattr(tensor, attr)
            nested = wrapped_inner(inner)
            return inner if nested is None else nested
    return None


def fsdp_params(module: torch.nn.Module) -> list[Any]:
    """The ``FSDPParam`` objects of the FSDP2 unit ``module`` (empty before its parameter group exists)."""
    group = module._get_fsdp_state()._fsdp_param_group  # type: ignore[operator]
    return [] if group is None else list(group.fsdp_params)


def sharded_param(fsdp_param: Any) -> torch.nn.Parameter:
    """The sharded DTensor ``Parameter`` of ``fsdp_param`` (the object the module and the optimizer hold)."""
    param: torch.nn.Parameter = fsdp_param.sharded_param
    return param


def unwrap_fsdp_param(fsdp_param: Any) -> bool:
    """Replace the torchao weight wrapper around ``fsdp_param``'s local shard by the float32 tensor inside it, in
    place: the same DTensor ``Parameter`` (and so the optimizer's state for it) now holds the plain shard, and FSDP2
    all-gathers it in the policy's ``param_dtype`` again. Return whether it was wrapped.

    Raises:
        RuntimeError: the parameter is not sharded (unwrap between optimizer steps only).
    """
    param = sharded_param(fsdp_param)
    inner = wrapped_inner(local_tensor(param))
    if inner is None:
        return False
    if str(getattr(fsdp_param.sharded_state, "name", fsdp_param.sharded_state)) != "SHARDED":
        raise RuntimeError(
            f"cannot undo the float8 weight wrapper of {fsdp_param._param_fqn or 'a parameter'} while it is "
            f"{fsdp_param.sharded_state}; switch between optimizer steps"
        )
    flat = wrapped_inner(fsdp_param._sharded_param_data)
    if flat is None or flat.untyped_storage().data_ptr() != inner.untyped_storage().data_ptr():
        raise RuntimeError("FSDP2's flat shard and the DTensor's local shard no longer share their storage")
    fsdp_param._sharded_param_data = flat
    param._local_tensor = inner  # type: ignore[attr-defined]
    return True


def float8_linear_class() -> Optional[type]:
    """torchao's ``Float8Linear`` class, or ``None`` while ``torchao.float8`` is not imported."""
    cls: Optional[type] = _loaded(*FLOAT8_LINEAR)
    return cls


def plain_class(module: torch.nn.Module, float8_class: type, plain: type) -> type:
    """The class ``module`` (an instance of ``float8_class``) has once it is a ``plain`` module again: ``plain``
    itself, or FSDP2's class for ``plain`` units (``FSDPLinear``) when FSDP2 gave ``module`` one of its own."""
    cls = type(module)
    if cls is float8_class:
        return plain
    from torch.distributed.fsdp import FSDPModule

    if not (isinstance(module, FSDPModule) and cls.__bases__ == (FSDPModule, float8_class)):
        raise TypeError(f"{cls.__qualname__} is neither {float8_class.__name__} nor FSDP2's unit class of it")
    from torch.distributed.fsdp._fully_shard._fully_shard import get_cls_to_fsdp_cls

    cache = get_cls_to_fsdp_cls()
    if plain not in cache:  # FSDP2 makes one class per module class, once, with the same __deepcopy__ guard
        cache[plain] = type(
            f"FSDP{plain.__name__}", (FSDPModule, plain), {"__deepcopy__": cls.__dict__["__deepcopy__"]}
        )
    return cache[plain]


# -- the checks --------------------------------------------------------------------------------------------------
def _check_wrappers() -> Optional[str]:
    missing = []
    for module_name, class_name, attr in _INNER:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except ImportError:
            continue  # torchao (or that API) not installed: nothing to switch away from
        if f"self.{attr} = " not in inspect.getsource(cls.__init__):
            missing.append(f"{class_name}.{attr}")
    return f"missing: {missing}" if missing else None


def _check_float8_linear() -> Optional[str]:
    if importlib.util.find_spec("torchao") is None:
        return None  # torchao not installed: nothing to switch away from
    cls = getattr(importlib.import_module(FLOAT8_LINEAR[0]), FLOAT8_LINEAR[1])
    source = inspect.getsource(cls)
    missing = [a for a in FLOAT8_LINEAR_ATTRS if f"self.{a} = " not in source]
    if not issubclass(cls, torch.nn.Linear):
        missing.append("no longer a torch.nn.Linear")
    return f"missing: {missing}" if missing else None


def _check_fsdp2_param() -> Optional[str]:
    from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam
    from torch.distributed.fsdp._fully_shard._fully_shard import get_cls_to_fsdp_cls

    source = inspect.getsource(FSDPParam)
    missing = [a for a in FSDP2_PARAM_ATTRS if f"self.{a} = " not in source]
    missing += [] if "self._sharded_param_data = padded_sharded_param.view(-1)" in source else ["the flat shard"]
    missing += [] if isinstance(get_cls_to_fsdp_cls(), dict) else ["get_cls_to_fsdp_cls() is no dict"]
    return f"missing: {missing}" if missing else None


FENCED: Final[tuple[Fenced, ...]] = (
    Fenced(
        FLOAT8_LINEAR[0],
        f"{FLOAT8_LINEAR[1]}: " + ", ".join(FLOAT8_LINEAR_ATTRS),
        why="a Float8Linear becomes a torch.nn.Linear again",
        check=_check_float8_linear,
    ),
    Fenced(
        "torchao",
        "weight wrappers: " + ", ".join(f"{c}.{a}" for _m, c, a in _INNER),
        why="the float32 shard inside torchao's weight wrapper",
        check=_check_wrappers,
    ),
    Fenced(
        "torch.distributed.fsdp._fully_shard",
        "FSDPParam." + ", FSDPParam.".join(FSDP2_PARAM_ATTRS) + ", get_cls_to_fsdp_cls",
        why="take the weight wrapper off FSDP2's sharded parameters in place",
        check=_check_fsdp2_param,
    ),
)
"""Every symbol fenced here (``precision_base.kit.fence.Fenced``), checked by ``tests/test_compat.py``."""

__all__ = [
    "FENCED",
    "FLOAT8_LINEAR",
    "FLOAT8_LINEAR_ATTRS",
    "FSDP2_PARAM_ATTRS",
    "float8_linear_class",
    "fsdp_params",
    "plain_class",
    "sharded_param",
    "unwrap_fsdp_param",
    "wrapped_inner",
]
