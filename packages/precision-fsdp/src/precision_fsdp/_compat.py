"""The fence: every touch point of a private or undocumented torch / Lightning symbol, and every version switch.

Nothing else in ``precision_fsdp`` names an underscore attribute of torch or Lightning, imports from a private
module, or asks which version is installed. Each entry below says what it touches and why; ``FENCED`` lists them
all, and ``tests/test_compat.py`` checks in milliseconds that each still exists with the shape used here, so that a
release that moves one fails with a one-line message naming it instead of a broken training run.

Version switches are chosen by feature detection (does the module have the name?), never by version numbers.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Optional

import torch
import torch.distributed.fsdp as _torch_fsdp

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

# -- torchao's training API (feature detection; torchao is optional and imported only when asked) --------------------
# torchao has two ways to train in low precision. The module swap (``torchao.float8.convert_to_float8_training`` with
# ``Float8LinearConfig``) replaces Linear layers by ``Float8Linear``; the weight wrapper
# (``torchao.quantization.quantize_`` with ``Float8TrainingOpConfig`` / ``MXFP8TrainingOpConfig`` from
# ``torchao.prototype.moe_training.config``, torchao 0.18) swaps each weight's data for a tensor subclass that reroutes
# ``linear``/``mm``. MXFP8 training exists only on the weight wrapper. Which one an fp8 recipe takes is decided in
# ``precision_fsdp.float8`` from the answers below, which probe what the installed torchao does (never its version
# number).
MODULE_SWAP: Final[str] = "module swap (torchao.float8.convert_to_float8_training)"
WEIGHT_WRAPPER: Final[str] = "weight wrapper (torchao.quantization.quantize_ with a TrainingOpConfig)"
TORCHAO_WEIGHT_WRAPPER_CONFIG_MODULE: Final[str] = "torchao.prototype.moe_training.config"


def _attrs(module_name: str, *names: str) -> bool:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False
    return all(hasattr(module, n) for n in names)


@functools.cache
def torchao_training_paths() -> tuple[str, ...]:
    """Which of torchao's training API paths the installed torchao has (:data:`MODULE_SWAP`, :data:`WEIGHT_WRAPPER`;
    empty without torchao), found by probing the names each path needs."""
    paths = []
    if _attrs("torchao.float8", "convert_to_float8_training", "Float8LinearConfig"):
        paths.append(MODULE_SWAP)
    if _attrs("torchao.quantization", "quantize_") and _attrs(
        TORCHAO_WEIGHT_WRAPPER_CONFIG_MODULE,
        "Float8TrainingOpConfig",
        "MXFP8TrainingOpConfig",
        "MXFP8TrainingRecipe",
    ):
        paths.append(WEIGHT_WRAPPER)
    return tuple(paths)


@functools.cache
def weight_wrapper_float8_gaps(recipe: str) -> tuple[str, ...]:
    """What the weight wrapper's ``Float8TrainingOpConfig`` lacks for our float8 ``recipe`` ("tensorwise" or
    "rowwise"); empty means it covers the recipe. Probed on the installed torchao: whether the config has an
    ``emulate`` switch (``fp8_emulate=True``), whether it accepts the recipe, and (tensorwise) whether the wrapped
    weight is all-gathered by FSDP2 in float8 (its ``fsdp_pre_all_gather`` output dtype under a bfloat16 policy)."""
    if WEIGHT_WRAPPER not in torchao_training_paths():
        return ("torchao has no weight-wrapper training API",)
    import dataclasses

    config_module = importlib.import_module(TORCHAO_WEIGHT_WRAPPER_CONFIG_MODULE)
    tensor_module = importlib.import_module("torchao.prototype.moe_training.tensor")
    gaps = []
    fields = {f.name for f in dataclasses.fields(config_module.Float8TrainingOpConfig)}
    if "emulate" not in fields:
        gaps.append(f"Float8TrainingOpConfig has no 'emulate' field (fields: {sorted(fields)})")
    try:
        config = config_module.Float8TrainingOpConfig(float8_linear_recipe=recipe)
    except (TypeError, ValueError) as exc:
        return (*gaps, f"Float8TrainingOpConfig does not accept recipe {recipe!r} ({exc})")
    if recipe == "tensorwise":
        weight = tensor_module.Float8TrainingWeightWrapperTensor(torch.ones(16, 16), config)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
        inputs, _meta = weight.fsdp_pre_all_gather(None, weight.size(), weight.stride(), None, policy)
        dtypes = sorted({str(t.dtype) for t in inputs})
        if not any(t.dtype.itemsize == 1 for t in inputs):
            gaps.append(f"its weight is all-gathered by FSDP2 in {', '.join(dtypes)}, not float8")
    return tuple(gaps)


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
    """FSDP1's ``ShardedGradScaler`` (undocumented module :data:`SHARDED_GRAD_SCALER_MODULE`)."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler


def scaler_device(scaler: torch.amp.GradScaler) -> str:
    """The device type a ``GradScaler`` was made for. torch keeps it in the private attribute ``_device``."""
    return str(scaler._device)


# -- Lightning: private or undocumented -----------------------------------------------------------------------------
INPUT_DTYPE_ATTR: Final = "_desired_input_dtype"
"""Private attribute of Lightning's ``FSDPPrecision``: the dtype its ``convert_input`` casts to. Set for code that
reads it from Lightning's built-in class."""


LIGHTNING_SCALER_METHODS: Final = ("pre_backward", "optimizer_step")
"""Undocumented behaviour relied on: these methods of Lightning's ``FSDPPrecision`` scale the loss, unscale, step and
update with whatever ``self.scaler`` holds (or skip scaling when it is ``None``). The plugin sets ``self.scaler`` to
the scaler it builds (``torch.amp.GradScaler`` for FSDP2, ``ShardedGradScaler`` for FSDP1) and calls them through
``super()``."""


def set_lightning_input_dtype(plugin: Any, dtype: torch.dtype) -> None:
    """Set :data:`INPUT_DTYPE_ATTR` on ``plugin``."""
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
    nothing else shards the model). When :class:`~precision_fsdp.fsdp2_strategy.FSDP2Strategy` has sharded the
    model itself, it runs Lightning's ``setup`` inside this block. Undocumented behaviour used: ``is_overridden``
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


# -- FSDP2's mixed-precision policy after fully_shard (precision schedules, precision_fsdp.switch) -------------------
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


# -- the list the compat test walks ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fenced:
    """One fenced symbol.

    Attributes:
        name: what the message names, e.g. ``"torch.amp.GradScaler._device"``.
        check: returns ``None`` when the symbol is as this module expects, else one line saying what changed.
    """

    name: str
    check: Callable[[], Optional[str]]


def _has_params(func: Any, *names: str) -> Optional[str]:
    params = inspect.signature(func).parameters
    missing = [n for n in names if n not in params]
    return f"parameters {missing} missing from signature {inspect.signature(func)}" if missing else None


def _check_fsdp2() -> Optional[str]:
    return _has_params(fully_shard, "module", "mesh", "mp_policy", "reshard_after_forward")


def _check_policy() -> Optional[str]:
    return _has_params(MixedPrecisionPolicy, "param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs")


def _check_fsdp1_mp() -> Optional[str]:
    return _has_params(MixedPrecision, "param_dtype", "reduce_dtype", "buffer_dtype")


def _check_fsdp1_clip() -> Optional[str]:
    return _has_params(FullyShardedDataParallel.clip_grad_norm_, "max_norm")


def _check_sharded_scaler() -> Optional[str]:
    cls = sharded_grad_scaler_class()
    if not issubclass(cls, torch.amp.GradScaler):
        return "is no longer a torch.amp.GradScaler"
    return _has_params(cls, "device", "init_scale", "growth_factor", "backoff_factor", "growth_interval")


def _check_scaler_device() -> Optional[str]:
    try:
        return None if scaler_device(torch.amp.GradScaler("cpu")) == "cpu" else "does not hold the device type"
    except AttributeError:
        return "attribute is gone"


def _check_lightning_scaler_use() -> Optional[str]:
    cls = _lightning_fsdp_precision()
    uses = [name for name in LIGHTNING_SCALER_METHODS if "self.scaler" in inspect.getsource(getattr(cls, name))]
    missing = sorted(set(LIGHTNING_SCALER_METHODS) - set(uses))
    return f"{missing} no longer use self.scaler" if missing else None


def _check_fsdp2_cpu_probe() -> Optional[str]:
    source = _fsdp2_comm_context_source()
    return None if "class FSDPCommContext" in source else "FSDPCommContext is gone"


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
    Fenced(f"{FSDP2_MODULE}.fully_shard", _check_fsdp2),
    Fenced(f"{FSDP2_MODULE}.MixedPrecisionPolicy", _check_policy),
    Fenced("torch.distributed.fsdp.MixedPrecision", _check_fsdp1_mp),
    Fenced("torch.distributed.fsdp.FullyShardedDataParallel.clip_grad_norm_", _check_fsdp1_clip),
    Fenced(f"{SHARDED_GRAD_SCALER_MODULE}.ShardedGradScaler", _check_sharded_scaler),
    Fenced("torch.distributed.fsdp._fully_shard._fsdp_param_group.FSDPCommContext", _check_fsdp2_cpu_probe),
    Fenced("torch.amp.GradScaler._device", _check_scaler_device),
    Fenced(
        "lightning.pytorch.plugins.precision.FSDPPrecision.pre_backward/optimizer_step use self.scaler",
        _check_lightning_scaler_use,
    ),
    Fenced(f"lightning.pytorch.plugins.precision.FSDPPrecision.{INPUT_DTYPE_ATTR}", _check_input_dtype_attr),
    Fenced(
        "lightning.pytorch.strategies.ModelParallelStrategy." + "/".join(MODEL_PARALLEL_SIZE_ATTRS),
        _check_mesh_sizes,
    ),
    Fenced(
        "lightning.pytorch.utilities.model_helpers.is_overridden('configure_model')",
        _check_configure_model_override,
    ),
    Fenced(f"lightning.pytorch.callbacks.throughput_monitor.{THROUGHPUT_DTYPE_FUNCTION}", _check_throughput_function),
    Fenced(
        f"lightning.pytorch.trainer.connectors.accelerator_connector._AcceleratorConnector.{FSDP_ON_CPU_CHECK}",
        _check_fsdp_on_cpu_message,
    ),
    Fenced("torch.distributed.fsdp._fully_shard: " + ", ".join(FSDP2_POLICY_ATTRS), _check_fsdp2_policy_attrs),
)
"""Every fenced symbol, checked by ``tests/test_compat.py``."""

__all__ = [
    "DTENSOR_MODULE",
    "DTensor",
    "FENCED",
    "FSDP2_MODULE",
    "FSDPModule",
    "FullyShardedDataParallel",
    "MixedPrecision",
    "MixedPrecisionPolicy",
    "fully_shard",
]
