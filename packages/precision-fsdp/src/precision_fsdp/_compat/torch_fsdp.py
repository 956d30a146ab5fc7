"""The fence, torch part: FSDP1/FSDP2 and DTensor locations by version, FSDP2's private fields, the scaler.

See `precision_fsdp._compat` for the rules; `FENCED` lists this module's entries.
"""

from __future__ import annotations

import inspect
from typing import Any, Final, Optional

import torch
import torch.distributed.fsdp as _torch_fsdp

from precision_base.kit.fence import Fenced, missing_params

# -- version switches -----------------------------------------------------------------------------------------------
# FSDP2 is public in ``torch.distributed.fsdp`` since torch 2.6; torch 2.4 and 2.5 have it in a private module.
if hasattr(_torch_fsdp, "fully_shard"):
    FSDP2_MODULE: str = "torch.distributed.fsdp"
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
else:  # pragma: no cover - torch < 2.6
    FSDP2_MODULE = "torch.distributed._composable.fsdp"
    from torch.distributed._composable.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard  # type: ignore

# DTensor is public in ``torch.distributed.tensor`` since torch 2.5; torch 2.4 has it in ``torch.distributed._tensor``.
try:
    from torch.distributed.tensor import DTensor

    DTENSOR_MODULE: str = "torch.distributed.tensor"
except ImportError:  # pragma: no cover - torch < 2.5
    from torch.distributed._tensor import DTensor  # type: ignore[no-redef,attr-defined]

    DTENSOR_MODULE = "torch.distributed._tensor"

from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision  # public, every version


def policy_reduce_dtype(policy: MixedPrecisionPolicy) -> Optional[torch.dtype]:
    """The dtype FSDP2 reduce-scatters gradients in under ``policy``. torch 2.4's ``MixedPrecisionPolicy`` stores
    ``reduce_dtype=None`` when it equals ``param_dtype`` (None meaning "as param_dtype"); later versions keep it."""
    return policy.reduce_dtype if policy.reduce_dtype is not None else policy.param_dtype


def _fsdp2_comm_context_source() -> str:
    """Source of FSDP2's private ``FSDPCommContext`` (its module moved in torch 2.6)."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group as group
    except ImportError:  # pragma: no cover - torch < 2.6
        from torch.distributed._composable.fsdp import _fsdp_param_group as group  # type: ignore[no-redef,attr-defined]
    return inspect.getsource(group.FSDPCommContext)


def fsdp2_cpu_problem() -> Optional[str]:
    """Why FSDP2 cannot run on a CPU with the installed torch, or ``None`` when it can (GPUs are unaffected).

    Feature detection of the two failures seen on older torch: torch 2.4-2.5 create CUDA streams unconditionally
    (``RuntimeError: FSDP requires CUDA for streams`` or a CUDA driver error), and torch 2.6's CPU stream has no
    ``record_event``, which FSDP2's collectives call (``AttributeError: 'Stream' object has no attribute
    'record_event'``). ``tests/test_compat.py`` checks the answer against a real FSDP2 step on CPU.
    """
    version = torch.__version__
    source = _fsdp2_comm_context_source()
    if "requires CUDA for streams" in source or "torch.cuda.Stream(" in source:
        return f"torch {version}'s FSDP2 creates CUDA streams unconditionally (FSDPCommContext)"
    if not hasattr(torch.cpu.Stream, "record_event"):
        return (
            f"torch {version}'s CPU stream has no record_event, which FSDP2 calls "
            "(AttributeError: 'Stream' object has no attribute 'record_event')"
        )
    return None


# -- torch: undocumented or private ---------------------------------------------------------------------------------
SHARDED_GRAD_SCALER_MODULE: Final = "torch.distributed.fsdp.sharded_grad_scaler"
"""Undocumented module of FSDP1's ``ShardedGradScaler`` (Lightning imports it from here too)."""


def sharded_grad_scaler_class() -> type[torch.amp.GradScaler]:
    """FSDP1's ``ShardedGradScaler`` (undocumented module `SHARDED_GRAD_SCALER_MODULE`)."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler


def scaler_device(scaler: torch.amp.GradScaler) -> str:
    """The device type a ``GradScaler`` was made for. torch keeps it in the private attribute ``_device``."""
    return str(scaler._device)


def local_tensor(tensor: Any) -> Any:
    """The tensor a DTensor holds on this rank (its private ``_local_tensor``, without ``to_local()``'s autograd
    view), or ``tensor`` itself when it is not a DTensor."""
    return getattr(tensor, "_local_tensor", tensor)


# -- FSDP2's mixed-precision policy after fully_shard (precision schedules, precision_fsdp.schedule) ----------------
# torch has no public way to change a sharded module's MixedPrecisionPolicy. FSDP2 keeps it in three places: the
# module's state (``FSDPModule._get_fsdp_state()._mp_policy``: the forward-input and output casts), its parameter
# group (``state._fsdp_param_group.mp_policy``) and each ``FSDPParam.mp_policy``, from which
# ``FSDPParamGroup._init_mp_dtypes`` derives ``param_dtype`` / ``reduce_dtype`` (all-gather and reduce-scatter
# dtypes). Each FSDPParam also keeps its all-gather output buffers (``all_gather_outputs``) and the unsharded
# parameter viewing them (``_unsharded_param``) from its first all-gather, in the old param dtype: both are dropped,
# so the next all-gather allocates them in the new one. Only while every parameter is sharded (between steps).
FSDP2_POLICY_ATTRS: Final = (
    "FSDPModule._get_fsdp_state",
    "FSDPState._mp_policy",
    "FSDPState._fsdp_param_group",
    "FSDPParamGroup.mp_policy/fsdp_params/is_sharded/_init_mp_dtypes",
    "FSDPParam.mp_policy/all_gather_outputs/_unsharded_param/_init_extensions",
)


def fsdp2_policy(module: Any) -> MixedPrecisionPolicy:
    """The ``MixedPrecisionPolicy`` an FSDP2-sharded ``module`` (an ``FSDPModule``) runs under."""
    policy: MixedPrecisionPolicy = module._get_fsdp_state()._mp_policy
    return policy


def set_fsdp2_policy(module: Any, policy: MixedPrecisionPolicy) -> None:
    """Make the FSDP2-sharded ``module`` (an ``FSDPModule``) run under ``policy`` from its next forward on.

    Raises:
        RuntimeError: a parameter of the unit is unsharded (called inside forward/backward, not between steps).
    """
    state = module._get_fsdp_state()
    group = state._fsdp_param_group
    if group is not None and not group.is_sharded:
        raise RuntimeError(
            f"cannot change the mixed-precision policy of {type(module).__name__} while its parameters are "
            "unsharded; change it between optimizer steps"
        )
    state._mp_policy = policy
    if group is None:
        return
    group.mp_policy = policy
    for param in group.fsdp_params:
        param.mp_policy = policy
        param.all_gather_outputs = []
        if hasattr(param, "_unsharded_param"):
            del param._unsharded_param
        param._init_extensions()
    group._init_mp_dtypes()


# -- the entries the compat test walks ----------------------------------------------------------------------------
def _check_fsdp2() -> Optional[str]:
    return missing_params(fully_shard, "module", "mesh", "mp_policy", "reshard_after_forward")


def _check_policy() -> Optional[str]:
    return missing_params(MixedPrecisionPolicy, "param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs")


def _check_fsdp1_mp() -> Optional[str]:
    return missing_params(MixedPrecision, "param_dtype", "reduce_dtype", "buffer_dtype")


def _check_fsdp1_clip() -> Optional[str]:
    return missing_params(FullyShardedDataParallel.clip_grad_norm_, "max_norm")


def _check_sharded_scaler() -> Optional[str]:
    cls = sharded_grad_scaler_class()
    if not issubclass(cls, torch.amp.GradScaler):
        return "is no longer a torch.amp.GradScaler"
    return missing_params(cls, "device", "init_scale", "growth_factor", "backoff_factor", "growth_interval")


def _check_scaler_device() -> Optional[str]:
    try:
        return None if scaler_device(torch.amp.GradScaler("cpu")) == "cpu" else "does not hold the device type"
    except AttributeError:
        return "attribute is gone"


def _check_fsdp2_cpu_probe() -> Optional[str]:
    source = _fsdp2_comm_context_source()
    return None if "class FSDPCommContext" in source else "FSDPCommContext is gone"


def _check_local_tensor() -> Optional[str]:
    slots = getattr(DTensor, "__slots__", ())
    return None if "_local_tensor" in slots else f"DTensor's slots are {list(slots)}, without _local_tensor"


def _check_fsdp2_policy_attrs() -> Optional[str]:
    from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
    from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

    missing = [name for name in ("_get_fsdp_state",) if not hasattr(FSDPModule, name)]
    missing += [f"FSDPParamGroup.{n}" for n in ("is_sharded", "_init_mp_dtypes") if not hasattr(FSDPParamGroup, n)]
    missing += [f"FSDPParam.{n}" for n in ("init_dtype_attrs", "_init_extensions") if not hasattr(FSDPParam, n)]
    sources = {
        "FSDPState": (inspect.getsource(FSDPState), ("self._mp_policy", "self._fsdp_param_group")),
        "FSDPParamGroup": (inspect.getsource(FSDPParamGroup), ("self.mp_policy", "self.fsdp_params")),
        "FSDPParam": (inspect.getsource(FSDPParam), ("self.mp_policy", "self.all_gather_outputs", "_unsharded_param")),
    }
    missing += [f"{cls}: {attr}" for cls, (src, attrs) in sources.items() for attr in attrs if attr not in src]
    return f"missing: {missing}" if missing else None


FENCED: Final[tuple[Fenced, ...]] = (
    Fenced(FSDP2_MODULE, "fully_shard", why="FSDP2 sharding with the plugin's policy", check=_check_fsdp2),
    Fenced(FSDP2_MODULE, "MixedPrecisionPolicy", why="FSDP2 dtypes", check=_check_policy),
    Fenced("torch.distributed.fsdp", "MixedPrecision", why="FSDP1 dtypes", check=_check_fsdp1_mp),
    Fenced(
        "torch.distributed.fsdp",
        "FullyShardedDataParallel.clip_grad_norm_",
        why="FSDP1 clip-by-norm",
        check=_check_fsdp1_clip,
    ),
    Fenced(SHARDED_GRAD_SCALER_MODULE, "ShardedGradScaler", why="FSDP1 16-mixed scaler", check=_check_sharded_scaler),
    Fenced(
        "torch.distributed.fsdp._fully_shard._fsdp_param_group",
        "FSDPCommContext",
        why="fsdp2_cpu_problem",
        check=_check_fsdp2_cpu_probe,
    ),
    Fenced("torch.amp", "GradScaler._device", why="the scaler's device type", check=_check_scaler_device),
    Fenced(
        DTENSOR_MODULE,
        "DTensor._local_tensor",
        why="float8.config.is_converted on a sharded weight",
        check=_check_local_tensor,
    ),
    Fenced(
        "torch.distributed.fsdp._fully_shard",
        ", ".join(FSDP2_POLICY_ATTRS),
        why="precision schedules and inner units' input casts: set_fsdp2_policy",
        check=_check_fsdp2_policy_attrs,
    ),
)
"""This module's fenced symbols."""

__all__ = [
    "DTENSOR_MODULE",
    "FENCED",
    "FSDP2_MODULE",
    "FSDP2_POLICY_ATTRS",
    "SHARDED_GRAD_SCALER_MODULE",
    "DTensor",
    "FSDPModule",
    "FullyShardedDataParallel",
    "MixedPrecision",
    "MixedPrecisionPolicy",
    "fsdp2_cpu_problem",
    "fsdp2_policy",
    "fully_shard",
    "local_tensor",
    "policy_reduce_dtype",
    "scaler_device",
    "set_fsdp2_policy",
    "sharded_grad_scaler_class",
]
