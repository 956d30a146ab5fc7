"""Every touch point of a private or undocumented Lightning, torch or DeepSpeed symbol, in one place.

The rest of the package reaches such symbols only through this module. :data:`FENCED` lists each one with the
parameters the package relies on; ``tests/test_compat.py`` checks every entry against the installed releases in
milliseconds and fails with one line naming the symbol that moved. Version-dependent behaviour is chosen here by
feature detection (never by comparing version numbers).

Lightning symbols are looked up in the namespace of the object at hand (``lightning.pytorch`` or
``pytorch_lightning``), so the same code serves both.

Importing this module imports none of torch, Lightning and DeepSpeed; its functions import what they ask about.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Fenced:
    """One private or undocumented symbol the package uses, or a Lightning method it overrides.

    Attributes:
        module: the module that defines it, e.g. ``"lightning.pytorch.strategies.deepspeed"``.
        name: a dotted path inside the module, e.g. ``"DeepSpeedStrategy._format_config"``.
        params: the parameter names the package relies on, in order (``None``: not a callable, only its existence).
        why: what the package does with it.
        optional: absent in some supported releases; the package detects it and takes another branch, so only its
            signature is checked, where it exists.
    """

    module: str
    name: str
    params: Optional[tuple[str, ...]]
    why: str
    optional: bool = False

    def resolve(self) -> Any:
        """The object itself (raises ``ImportError``/``AttributeError`` when it moved)."""
        obj: Any = importlib.import_module(self.module)
        for part in self.name.split("."):
            obj = getattr(obj, part)
        return obj

    def problem(self) -> Optional[str]:
        """``None`` when the symbol exists with the expected parameters, else one line saying what changed."""
        where = f"{self.module}.{self.name}"
        try:
            obj = self.resolve()
        except (ImportError, AttributeError) as exc:
            if self.optional:
                return None
            return f"{where} is gone ({type(exc).__name__}: {exc}); needed for: {self.why}"
        if self.params is None:
            return None
        target: Any = obj.fget if isinstance(obj, property) else obj
        try:
            found = tuple(inspect.signature(target).parameters)
        except (TypeError, ValueError) as exc:
            return f"{where} has no inspectable signature ({exc}); needed for: {self.why}"
        if found[: len(self.params)] != self.params:
            return f"{where} takes {found}, expected {self.params}; needed for: {self.why}"
        return None


_LDS = "lightning.pytorch.strategies.deepspeed"
_LDP = "lightning.pytorch.plugins.precision.deepspeed"
_FDS = "lightning.fabric.strategies.deepspeed"

#: Every fenced symbol. Overridden Lightning methods are listed too, so that a renamed or re-shaped base method
#: fails the compat test (mypy catches it through ``typing_extensions.override`` as well).
FENCED: tuple[Fenced, ...] = (
    # -- Lightning's DeepSpeedStrategy: private methods the CPU strategy overrides or calls ----------------------
    Fenced(_LDS, "DeepSpeedStrategy.setup_environment", ("self",), "CPU strategy: skip the CUDA-only check"),
    Fenced(_LDS, "DeepSpeedStrategy.setup_distributed", ("self",), "CPU strategy: skip the device-index check"),
    Fenced(_LDS, "DeepSpeedStrategy._init_deepspeed_distributed", ("self",), "CPU strategy: start DeepSpeed's group"),
    Fenced(_LDS, "DeepSpeedStrategy.set_world_ranks", ("self",), "CPU strategy: ranks before DeepSpeed's group"),
    Fenced(_LDS, "DeepSpeedStrategy.root_device", None, "CPU strategy: a device index for deepspeed.initialize"),
    Fenced(
        _LDS,
        "DeepSpeedStrategy._setup_model_and_optimizer",
        ("self", "model", "optimizer", "lr_scheduler"),
        "CPU strategy: deepspeed.initialize reads root_device.index",
    ),
    Fenced(
        _LDS,
        "DeepSpeedStrategy._initialize_deepspeed_inference",
        ("self", "model"),
        "CPU strategy: deepspeed.initialize reads root_device.index",
    ),
    Fenced(
        _LDS,
        "DeepSpeedStrategy.load_checkpoint",
        ("self", "checkpoint_path"),  # Lightning >= 2.5.1 adds weights_only; the override passes it through
        "CPU strategy: refuse a checkpoint of another precision mode first",
    ),
    Fenced(_LDS, "DeepSpeedStrategy._format_config", ("self",), "the plugin's section goes in before Lightning's"),
    Fenced(
        _LDS,
        "remove_module_hooks",
        ("model",),
        "CPU strategy: evaluation after fit removes only DeepSpeed's hooks, not the user's (module_hooks_kept)",
    ),
    Fenced(_LDS, "DeepSpeedStrategy._init_config_if_needed", ("self",), "Lightning formats its config once"),
    Fenced(
        _LDS,
        "DeepSpeedStrategy.__init__",
        ("self", "accelerator", "zero_optimization", "stage"),
        "loss-scaling defaults, to tell a user's strategy arguments from Lightning's defaults",
    ),
    # -- Lightning Fabric's DeepSpeedStrategy: private methods the Fabric CPU strategy (fabric.py) overrides or calls
    Fenced(_FDS, "DeepSpeedStrategy._setup_distributed", ("self",), "Fabric CPU strategy: skip the device-index check"),
    Fenced(
        _FDS, "DeepSpeedStrategy._set_world_ranks", ("self",), "Fabric CPU strategy: ranks before DeepSpeed's group"
    ),
    Fenced(
        _FDS, "DeepSpeedStrategy._init_deepspeed_distributed", ("self",), "Fabric CPU strategy: start DeepSpeed's group"
    ),
    Fenced(_FDS, "DeepSpeedStrategy._format_config", ("self",), "Fabric CPU strategy: the plugin's section first"),
    Fenced("lightning.fabric.utilities.seed", "reset_seed", (), "CPU strategy: setup_distributed as Lightning does"),
    Fenced(
        "lightning.fabric.plugins.precision.deepspeed",
        "_PRECISION_INPUT",
        None,
        "Lightning's list of precisions, quoted verbatim in the unsupported-precision error",
    ),
    Fenced(
        "lightning.pytorch.utilities.model_helpers",
        "is_overridden",
        ("method_name", "instance", "parent"),
        "warn when LightningModule.backward is overridden",
    ),
    # -- Lightning's DeepSpeedPrecision: methods the plugin overrides -----------------------------------------
    Fenced(_LDP, "DeepSpeedPrecision.__init__", ("self", "precision"), "the plugin's base class"),
    Fenced(_LDP, "DeepSpeedPrecision.convert_module", ("self", "module"), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.convert_input", ("self", "data"), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.convert_output", ("self", "data"), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.tensor_init_context", ("self",), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.module_init_context", ("self",), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.forward_context", ("self",), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.connect", ("self", "model", "optimizers", "lr_schedulers"), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.backward", ("self", "tensor", "model", "optimizer"), "override"),
    Fenced(_LDP, "DeepSpeedPrecision.optimizer_step", ("self", "optimizer", "model", "closure"), "override"),
    Fenced(
        _LDP,
        "DeepSpeedPrecision.clip_gradients",
        ("self", "optimizer", "clip_val", "gradient_clip_algorithm"),
        "override",
    ),
    Fenced(_LDP, "DeepSpeedPrecision.state_dict", ("self",), "override: records the precision in checkpoints"),
    Fenced(_LDP, "DeepSpeedPrecision.load_state_dict", ("self", "state_dict"), "override: checks the precision"),
    Fenced(_LDP, "DeepSpeedPrecision._after_closure", ("self", "model", "optimizer"), "optimizer_step's hooks"),
    # -- DeepSpeed and torch --------------------------------------------------------------------------------
    Fenced("deepspeed.runtime.constants", "TORCH_AUTOCAST", None, "feature detection: torch_autocast", optional=True),
    Fenced("deepspeed.runtime.constants", "BUFFER_DTYPE", None, "feature detection: buffer dtype", optional=True),
    Fenced(
        "deepspeed.runtime.precision_config",
        "DeepSpeedBF16Config.model_fields",
        None,
        "feature detection: bf16 check_grad_overflow",
        optional=True,
    ),
    Fenced("deepspeed.runtime.engine", "DeepSpeedEngine.was_step_applied", ("self",), "max_skipped_steps"),
    Fenced(
        "deepspeed.runtime.engine",
        "DeepSpeedEngine.is_gradient_accumulation_boundary",
        ("self",),
        "max_skipped_steps counts optimizer steps only",
    ),
    Fenced(
        "deepspeed.runtime.fp16.loss_scaler",
        "DynamicLossScaler.update_scale",
        ("self", "overflow"),
        "an overflow at the lowest loss scale raises MIN_LOSS_SCALE_MESSAGE",
    ),
    Fenced(
        "deepspeed.accelerator.cpu_accelerator",
        "CPU_Accelerator.is_fp16_supported",
        ("self",),
        "refuse fp16 on a CPU before DeepSpeed's engine does",
    ),
    Fenced(
        "deepspeed.runtime.engine",
        "DeepSpeedEngine._get_optimizer_loss_scale",
        ("self",),
        "precision_stats: the current loss scale for PrecisionMonitor",
        optional=True,
    ),
    Fenced("deepspeed.runtime.engine", "DeepSpeedEngine.get_global_grad_norm", ("self",), "precision_stats"),
    Fenced("deepspeed.ops.op_builder.builder", "OpBuilder._loaded_ops", None, "CPU op build notice: loaded already"),
    Fenced("deepspeed.ops", "__compatible_ops__", None, "CPU op build notice: DeepSpeed builds only compatible ops"),
    Fenced("deepspeed.git_version_info", "installed_ops", None, "CPU op build notice: ops installed prebuilt"),
    Fenced("torch.utils.cpp_extension", "_get_build_directory", ("name", "verbose"), "CPU op build notice: its folder"),
)


def fenced_problems() -> list[str]:
    """One line for every fenced symbol that is missing or has other parameters than expected."""
    problems: list[str] = []
    for entry in FENCED:
        problem = entry.problem()
        if problem is not None:
            problems.append(problem)
    return problems


# -- Lightning namespaces ------------------------------------------------------------------------------------
def _root_of(obj: Any) -> str:
    """``"lightning.pytorch"`` or ``"pytorch_lightning"``: the Lightning namespace ``obj``'s class comes from."""
    for cls in type(obj).__mro__:
        module = cls.__module__
        if module.startswith("lightning.pytorch."):
            return "lightning.pytorch"
        if module.startswith("pytorch_lightning."):
            return "pytorch_lightning"
    return "lightning.pytorch"


def lightning_namespace(obj: Any) -> str:
    """``"lightning.pytorch"`` or ``"pytorch_lightning"``: the Lightning namespace ``obj``'s class comes from."""
    return _root_of(obj)


def _fabric_of(namespace: str) -> str:
    return "lightning.fabric" if namespace == "lightning.pytorch" else "lightning_fabric"


def base_method(obj: Any, class_name: str, method: str) -> Callable[..., Any]:
    """``method`` of the first class in ``obj``'s MRO *after* the Lightning class called ``class_name``, bound to obj.

    The CPU strategy uses it to skip one override of Lightning's ``DeepSpeedStrategy`` (e.g. its CUDA check) in
    whichever Lightning namespace the strategy was built for.
    """
    mro = type(obj).__mro__
    for index, cls in enumerate(mro):
        if cls.__name__ == class_name and cls.__module__.split(".")[0] in ("lightning", "pytorch_lightning"):
            return getattr(super(mro[index], obj), method)  # type: ignore[no-any-return]
    raise TypeError(f"{type(obj).__qualname__} does not derive from Lightning's {class_name}")


def reset_seed(strategy: Any) -> None:
    """Lightning's ``reset_seed()`` of the strategy's namespace (re-seeds from ``PL_GLOBAL_SEED``, if set)."""
    module = importlib.import_module(_fabric_of(_root_of(strategy)) + ".utilities.seed")
    module.reset_seed()


def init_deepspeed_distributed(strategy: Any) -> None:
    """Lightning's ``DeepSpeedStrategy._init_deepspeed_distributed``: start DeepSpeed's process group."""
    strategy._init_deepspeed_distributed()


#: ``torch.nn.Module``'s private tables of per-module hooks, and the side tables keyed by the same handle ids.
_HOOK_TABLES = (
    ("_forward_pre_hooks", ("_forward_pre_hooks_with_kwargs",)),
    ("_forward_hooks", ("_forward_hooks_with_kwargs", "_forward_hooks_always_called")),
    ("_backward_pre_hooks", ()),
    ("_backward_hooks", ()),
    ("_state_dict_pre_hooks", ()),
    ("_state_dict_hooks", ()),
    ("_load_state_dict_pre_hooks", ()),
    ("_load_state_dict_post_hooks", ()),
)


def _defined_in_deepspeed(hook: Any) -> bool:
    """Whether ``hook`` (a function, bound method, ``functools.partial`` or torch's hook wrapper) is DeepSpeed's."""
    for _ in range(8):  # unwrap partials / torch's _WrappedHook / bound methods, a few levels at most
        inner = getattr(hook, "func", None) or getattr(hook, "hook", None) or getattr(hook, "__func__", None)
        if inner is None or inner is hook:
            break
        hook = inner
    module = getattr(hook, "__module__", None) or type(hook).__module__
    return isinstance(module, str) and (module == "deepspeed" or module.startswith("deepspeed."))


def remove_deepspeed_hooks(model: Any) -> int:
    """Remove, from every module in ``model``, the hooks DeepSpeed registered (those whose function is defined in a
    ``deepspeed`` module: the engine's forward prologue/epilogue, ZeRO-3's gather/release and leaf-module hooks,
    the dataloader check) and keep every other hook (the user's, Hugging Face's output recorders, the plugin's
    keep_fp32 forward). Touches torch's private per-module hook tables. Returns how many hooks were removed."""
    removed = 0
    for module in model.modules():
        for table_name, side_names in _HOOK_TABLES:
            table = getattr(module, table_name, None)
            if not table:
                continue
            for key in [k for k, hook in table.items() if _defined_in_deepspeed(hook)]:
                del table[key]
                for side_name in side_names:
                    getattr(module, side_name, {}).pop(key, None)
                removed += 1
        if not getattr(module, "_backward_hooks", None):
            module._is_full_backward_hook = None
    return removed


@contextlib.contextmanager
def module_hooks_kept(strategy: Any) -> Iterator[None]:
    """Within the block, Lightning's ``remove_module_hooks`` (which
    ``DeepSpeedStrategy._initialize_deepspeed_inference`` calls before it builds the evaluation engine, and which
    empties *every* hook table of every module) removes only DeepSpeed's hooks (:func:`remove_deepspeed_hooks`), in
    the strategy's Lightning namespace."""
    module: Any = importlib.import_module(_root_of(strategy) + ".strategies.deepspeed")
    original = module.remove_module_hooks
    module.remove_module_hooks = remove_deepspeed_hooks
    try:
        yield
    finally:
        module.remove_module_hooks = original


def config_formatted(strategy: Any) -> bool:
    """Whether Lightning's ``DeepSpeedStrategy`` has already run ``_format_config`` on its config."""
    return bool(getattr(strategy, "_config_initialized", False))


def overrides_backward(model: Any) -> bool:
    """Whether the LightningModule ``model`` overrides ``LightningModule.backward`` (Lightning's own check)."""
    namespace = _root_of(model)
    helpers = importlib.import_module(namespace + ".utilities.model_helpers")
    return bool(helpers.is_overridden("backward", model))


def trainer_of(model: Any) -> Any:
    """The Trainer a LightningModule is attached to, or ``None`` (no error when detached)."""
    return getattr(model, "_trainer", None)


def lightning_precisions() -> tuple[str, ...]:
    """Lightning's own tuple of DeepSpeed precisions (``get_args(_PRECISION_INPUT)``), for its error message."""
    from typing import get_args

    from lightning.fabric.plugins.precision.deepspeed import _PRECISION_INPUT

    return tuple(get_args(_PRECISION_INPUT))


# -- telling Lightning's defaults from the user's DeepSpeed config --------------------------------------------
def _loss_scaling_defaults() -> dict[str, Any]:
    from lightning.pytorch.strategies import DeepSpeedStrategy

    params = inspect.signature(DeepSpeedStrategy.__init__).parameters
    return {name: params[name].default for name in _LOSS_SCALING_ATTRIBUTES}


_LOSS_SCALING_ATTRIBUTES = ("loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale")


def strategy_loss_scaling(strategy: Any) -> dict[str, Any]:
    """The fp16 loss-scaling arguments the user gave Lightning's ``DeepSpeedStrategy`` (only non-default ones)."""
    defaults = _loss_scaling_defaults()
    given = {name: getattr(strategy, name, defaults[name]) for name in _LOSS_SCALING_ATTRIBUTES}
    return {name: value for name, value in given.items() if value != defaults[name]}


#: The key Lightning's ``_format_config`` always adds first (and refuses in a user's config): every key that comes
#: after it in the (insertion-ordered) config dict was added by Lightning's formatting, not written by the user.
FORMAT_MARKER = "gradient_accumulation_steps"


def lightning_written_keys(strategy: Any) -> frozenset[str]:
    """Top-level keys of ``strategy.config`` that Lightning's ``_format_config`` added, not the user.

    Before Lightning formats the config there are none. Lightning's formatting adds :data:`FORMAT_MARKER` first
    (and refuses it in a user's config), then writes the batch size, ``gradient_clipping`` and the ``fp16``/``bf16``
    section only where the user's config has none: so the keys from the marker on are Lightning's, and the keys
    before it are the user's. ``tests/test_compat.py`` checks this against Lightning's real ``_format_config``.
    """
    config = strategy.config
    if not config_formatted(strategy) or not isinstance(config, Mapping) or FORMAT_MARKER not in config:
        return frozenset()
    keys = list(config)
    return frozenset(keys[keys.index(FORMAT_MARKER) :])


# -- DeepSpeed and torch feature detection -------------------------------------------------------------------
@functools.cache
def _deepspeed_constants() -> frozenset[str]:
    """Names defined in ``deepspeed.runtime.constants``: which config sections the installed DeepSpeed knows."""
    from deepspeed.runtime import constants

    return frozenset(dir(constants))


def deepspeed_has_torch_autocast() -> bool:
    """Whether the installed DeepSpeed reads a ``torch_autocast`` config section."""
    return "TORCH_AUTOCAST" in _deepspeed_constants()


def deepspeed_keeps_buffer_dtype() -> bool:
    """Whether the installed DeepSpeed leaves buffers in their dtype when it casts a module to fp16/bf16.

    Releases that know ``data_types.buffer_dtype`` cast parameters only; older ones cast the whole module.
    """
    return "BUFFER_DTYPE" in _deepspeed_constants()


def deepspeed_checks_bf16_overflow() -> bool:
    """Whether the installed DeepSpeed's bf16 mode skips steps with non-finite gradients (``check_grad_overflow``)."""
    try:
        from deepspeed.runtime.precision_config import DeepSpeedBF16Config
    except ImportError:  # older releases keep the bf16 config elsewhere, without the check
        return False
    return "check_grad_overflow" in DeepSpeedBF16Config.model_fields


def deepspeed_bf16_overflow_check_default() -> bool:
    """Whether the installed DeepSpeed's bf16 mode checks for non-finite gradients without being asked (the default
    of ``bf16.check_grad_overflow``: ``False`` from 0.17 up to 0.19.0, ``True`` in 0.19.8; ``False`` where the option
    does not exist)."""
    if not deepspeed_checks_bf16_overflow():
        return False
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config

    return bool(DeepSpeedBF16Config.model_fields["check_grad_overflow"].default)


def deepspeed_version() -> str:
    """The installed DeepSpeed's version, for messages (read from its distribution's metadata)."""
    from importlib import metadata

    try:
        return metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def cpu_supports_fp16() -> bool:
    """Whether DeepSpeed's CPU accelerator accepts fp16 here: its own answer, which its engine checks at start-up
    ("Type fp16 is not supported on your device."). DeepSpeed up to 0.16.7 always says no; 0.16.8 and later ask
    oneDNN (AVX512-FP16 or AMX-FP16). Imports DeepSpeed."""
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    return bool(CPU_Accelerator().is_fp16_supported())  # None (not False) where oneDNN says no, in some releases


#: The start of the exception DeepSpeed's dynamic loss scaler raises when a step overflows at the lowest scale.
MIN_LOSS_SCALE_MESSAGE = "Current loss scale already at minimum - cannot decrease scale anymore."


def engine_loss_scale(engine: Any) -> Optional[float]:
    """The loss scale the DeepSpeed engine multiplies the loss by, or ``None`` when it has none.

    In its torch_autocast float16 mode DeepSpeed scales the loss with a ``torch.amp.GradScaler`` (the instance
    attribute ``torch_autocast_gradscaler`` of its ZeRO optimizer, ``torch_autocast_z0_gradscaler`` of the engine
    without ZeRO) while its optimizer's own loss scale stays 1.0: the GradScaler's scale is the one applied.
    Otherwise the optimizer's loss scale.
    """
    for owner, attribute in ((getattr(engine, "optimizer", None), "torch_autocast_gradscaler"),
                             (engine, "torch_autocast_z0_gradscaler")):  # fmt: skip
        scaler = getattr(owner, attribute, None)
        if scaler is not None and hasattr(scaler, "get_scale"):
            return float(scaler.get_scale())
    getter = getattr(engine, "_get_optimizer_loss_scale", None)  # DeepSpeed >= 0.18.6
    # older releases: the fp16 optimizers carry cur_scale themselves
    scale = getter() if getter is not None else getattr(getattr(engine, "optimizer", None), "cur_scale", None)
    return None if scale is None else float(scale)


def engine_skipped_steps(engine: Any) -> int:
    """Optimizer steps the engine skipped for non-finite gradients so far (its ``skipped_steps`` attribute)."""
    return int(getattr(engine, "skipped_steps", 0))


def optimizer_loss_scale(optimizer: Any) -> Optional[float]:
    """The loss scale DeepSpeed's own optimizer (ZeRO, fp16) applies: its torch_autocast ``GradScaler``'s where it
    has one, else its loss scaler's (``loss_scale_config.cur_scale``, or ``cur_scale`` in older releases)."""
    scaler = getattr(optimizer, "torch_autocast_gradscaler", None)
    if scaler is not None and hasattr(scaler, "get_scale"):
        return float(scaler.get_scale())
    config = getattr(optimizer, "loss_scale_config", None)
    scale = getattr(config, "cur_scale", None) if config is not None else getattr(optimizer, "cur_scale", None)
    return None if scale is None else float(scale)


def optimizer_overflowed(optimizer: Any) -> bool:
    """Whether DeepSpeed's fp16/bf16/ZeRO optimizer skipped its last ``step()`` for non-finite gradients: its
    ``overflow`` attribute, which the engine itself reads to count ``skipped_steps`` (``False`` where absent).

    Lightning Fabric steps this optimizer, not the engine, so ``engine.was_step_applied()`` is not updated there.
    """
    return bool(getattr(optimizer, "overflow", False))


def is_min_loss_scale_error(exc: BaseException) -> bool:
    """Whether ``exc`` is DeepSpeed's "overflow at the lowest loss scale" exception (a plain ``Exception``)."""
    return type(exc) is Exception and str(exc).startswith(MIN_LOSS_SCALE_MESSAGE)


#: Set on a module whose ``forward`` runs with float32 copies of its parameters (value ``True``).
FP32_PARAMETERS_MARK = "_precision_deepspeed_fp32_parameters"


def _forward_with_fp32_parameters(self: Any, *args: Any, **kwargs: Any) -> Any:
    """The class's ``forward`` with each floating, non-float32 parameter of ``self`` replaced by a float32 copy.

    Touches torch's private ``Module._parameters`` table for the call only (what ``torch.func.functional_call``
    does, without calling the module again, so DeepSpeed's hooks run once): autograd takes each copy's gradient
    back to the parameter, and the table holds the parameters again when ``forward`` returns or raises.
    """
    import torch

    from precision_base.keep_fp32 import forward_parameters_swapped

    table = self._parameters
    saved = {n: p for n, p in table.items() if p is not None and p.is_floating_point() and p.dtype != torch.float32}
    for name, param in saved.items():
        table[name] = param.float()
    try:
        forward_parameters_swapped(self)  # observers (the audit) see the float32 copies the forward computes with
        return type(self).forward(self, *args, **kwargs)
    finally:
        table.update(saved)


def forward_with_fp32_parameters(module: Any) -> None:
    """Make ``module.forward`` run with float32 copies of its own floating parameters (an instance attribute bound
    to the module, so ``copy.deepcopy`` binds it to the copy). Idempotent."""
    import types

    if getattr(module, FP32_PARAMETERS_MARK, False):
        return
    module.forward = types.MethodType(_forward_with_fp32_parameters, module)
    setattr(module, FP32_PARAMETERS_MARK, True)


def registry_init_params(registry: Any, name: str) -> dict[str, Any]:
    """The keyword arguments a name in Lightning's ``StrategyRegistry`` builds its strategy with."""
    return dict(registry[name]["init_params"])


# -- DeepSpeed's CPU communication op --------------------------------------------------------------------------
#: The op builder ``deepspeed.init_distributed`` loads on DeepSpeed's CPU accelerator (``deepspeed.comm.torch``).
CPU_COMM_OP_BUILDER = "ShareMemCommBuilder"


def cpu_comm_op_build() -> Optional[tuple[str, str]]:
    """``(op name, build folder)`` when ``deepspeed.init_distributed`` is about to JIT-compile DeepSpeed's CPU
    communication op (a minute or two); ``None`` when it will not: no such op on this accelerator, DeepSpeed would
    not build it here, it was installed prebuilt, this process loaded it already, or the build folder
    (``TORCH_EXTENSIONS_DIR`` or torch's default) already holds the built library, which later runs reuse."""
    import os

    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.op_builder.builder import OpBuilder
    from torch.utils.cpp_extension import _get_build_directory

    builder = get_accelerator().create_op_builder(CPU_COMM_OP_BUILDER)
    if builder is None:
        return None
    name = str(builder.NAME)
    if not deepspeed.ops.__compatible_ops__.get(name, False) or installed_ops.get(name, False):
        return None
    if name in OpBuilder._loaded_ops:
        return None
    folder = str(_get_build_directory(name, verbose=False))
    if os.path.isfile(os.path.join(folder, f"{name}.so")):
        return None
    return name, folder
