"""Lightning's private symbols, held here: namespaces, the strategy's config and seed helpers, hook removal.

Lightning symbols are looked up in the namespace of the object at hand (``lightning.pytorch`` or
``pytorch_lightning``, and Fabric's ``lightning.fabric`` or ``lightning_fabric``), so the same code serves both.
Importing this module imports no Lightning module; its functions import what they ask about.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any


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
        if cls.__name__ == class_name and cls.__module__.split(".")[0] in _LIGHTNING_ROOTS:
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
    empties *every* hook table of every module) removes only DeepSpeed's hooks (`remove_deepspeed_hooks`), in
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
def _loss_scaling_defaults(strategy: Any) -> dict[str, Any]:
    """The loss-scaling defaults of the Lightning ``DeepSpeedStrategy`` ``strategy`` derives from (Trainer's or
    Fabric's, of its namespace; ``lightning.pytorch``'s for anything else)."""
    base: Any = None
    for cls in type(strategy).__mro__:
        if cls.__name__ == "DeepSpeedStrategy" and cls.__module__.split(".")[0] in _LIGHTNING_ROOTS:
            base = cls
            break
    if base is None:
        base = importlib.import_module("lightning.pytorch.strategies").DeepSpeedStrategy
    params = inspect.signature(base.__init__).parameters
    return {name: params[name].default for name in _LOSS_SCALING_ATTRIBUTES}


_LIGHTNING_ROOTS = ("lightning", "pytorch_lightning", "lightning_fabric")


_LOSS_SCALING_ATTRIBUTES = ("loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale")


def strategy_loss_scaling(strategy: Any) -> dict[str, Any]:
    """The fp16 loss-scaling arguments the user gave Lightning's ``DeepSpeedStrategy`` (only non-default ones)."""
    defaults = _loss_scaling_defaults(strategy)
    given = {name: getattr(strategy, name, defaults[name]) for name in _LOSS_SCALING_ATTRIBUTES}
    return {name: value for name, value in given.items() if value != defaults[name]}


#: The key Lightning's ``_format_config`` always adds first (and refuses in a user's config): every key that comes
#: after it in the (insertion-ordered) config dict was added by Lightning's formatting, not written by the user.
FORMAT_MARKER = "gradient_accumulation_steps"


def lightning_written_keys(strategy: Any) -> frozenset[str]:
    """Top-level keys of ``strategy.config`` that Lightning's ``_format_config`` added, not the user.

    Before Lightning formats the config there are none. Lightning's formatting adds `FORMAT_MARKER` first
    (and refuses it in a user's config), then writes the batch size, ``gradient_clipping`` and the ``fp16``/``bf16``
    section only where the user's config has none: so the keys from the marker on are Lightning's, and the keys
    before it are the user's. ``tests/test_compat.py`` checks this against Lightning's real ``_format_config``.
    """
    config = strategy.config
    if not config_formatted(strategy) or not isinstance(config, Mapping) or FORMAT_MARKER not in config:
        return frozenset()
    keys = list(config)
    return frozenset(keys[keys.index(FORMAT_MARKER) :])


def registry_init_params(registry: Any, name: str) -> dict[str, Any]:
    """The keyword arguments a name in Lightning's strategy registry builds its strategy with."""
    return dict(registry[name]["init_params"])


def strategy_registry(namespace: str) -> Any:
    """The strategy registry of a Lightning namespace: the Trainer's ``StrategyRegistry``, Fabric's
    ``STRATEGY_REGISTRY``; each maps a name to ``{"strategy": class, "init_params": {...}}``."""
    strategies = importlib.import_module(f"{namespace}.strategies")
    registry = getattr(strategies, "StrategyRegistry", None)
    return registry if registry is not None else strategies.STRATEGY_REGISTRY


def registered_class(registry: Any, name: str) -> Any:
    """The strategy class ``name`` builds in ``registry`` (see `strategy_registry`)."""
    return registry[name]["strategy"]


def set_world_ranks(strategy: Any) -> None:
    """Lightning's rank setup of a DeepSpeed strategy: the Trainer's ``set_world_ranks``, Fabric's
    ``_set_world_ranks``."""
    setter = getattr(strategy, "set_world_ranks", None)
    (setter if setter is not None else strategy._set_world_ranks)()


def format_config_once(strategy: Any) -> None:
    """What Fabric's ``DeepSpeedStrategy._setup_distributed`` ends with: ``_format_config`` once, then marked."""
    if not config_formatted(strategy):
        strategy._format_config()
        strategy._config_initialized = True


def after_closure(plugin: Any, model: Any, optimizer: Any) -> None:
    """Lightning's ``Precision._after_closure``: the hooks a Trainer's ``optimizer_step`` runs after the closure
    (``on_before_optimizer_step``, gradient clipping)."""
    plugin._after_closure(model, optimizer)


def keep_module_hooks_in_evaluation(strategy: Any) -> None:
    """Make a Lightning ``DeepSpeedStrategy`` instance build its evaluation engine under `module_hooks_kept`:
    wraps the instance's ``_initialize_deepspeed_inference`` (Lightning's class is untouched)."""
    build = strategy._initialize_deepspeed_inference

    def _initialize_deepspeed_inference(model: Any) -> None:
        with module_hooks_kept(strategy):
            build(model)

    strategy._initialize_deepspeed_inference = _initialize_deepspeed_inference
