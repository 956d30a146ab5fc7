"""FP8 training by name: ``fsdp:fp8-tensorwise``, ``fsdp:fp8-rowwise`` and ``fsdp:mxfp8-rceil`` (torchao's recipes).

The model's ``torch.nn.Linear`` layers are swapped for torchao's ``Float8Linear`` (``convert_to_float8_training``):
their matmuls take float8 (e4m3) inputs and weights with dynamic scales; everything else runs under ``bf16-mixed``
(float32 parameters, bfloat16 autocast, float32 gradient reduction). Under ``fp8-tensorwise`` FSDP2 all-gathers the
converted weights in float8 (torchao's ``enable_fsdp_float8_all_gather``), half the bytes of bfloat16; torchao's
rowwise recipe does not support float8 all-gather, so ``fp8-rowwise`` all-gathers them in bfloat16.

Which Linear layers are converted by default: those whose ``in_features`` and ``out_features`` are multiples of 16
(the float8 matmul needs it; torchtitan's filter checks the same), except the first and the last Linear of the model
(embeddings-side and output-side layers are the most sensitive; Accelerate leaves both out, torchtitan's examples the
output layer). ``fp8_filter=``
overrides the defaults entirely: qualified-name patterns (as ``keep_fp32``) or a callable ``(module, fqn) -> bool``.

torchao is an optional dependency (``pip install "precision-fsdp[fp8]"``); this module imports it only when a model
is converted. Without a GPU that has FP8 (CUDA compute capability 8.9 or newer, the check torchao uses) the
precisions are refused, unless ``fp8_emulate=True`` asks for torchao's emulation: a test device that runs the same
code path in higher precision, slowly, and is meant for CPU tests, not for training.

``mxfp8-rceil`` is torchao's MXFP8 recipe (float8 e4m3 with one power-of-two e8m0 scale per 32 elements, scales
rounded up: torchao's ``MXFP8TrainingRecipe.MXFP8_RCEIL``). Only bias-free Linear layers are converted: torchao's
``MXFP8TrainingWeightWrapperTensor`` (0.17, 0.18) computes ``linear`` without its bias argument (measured: a bias of
100 vanished from the output and got no gradient). It exists only on torchao's weight-wrapper API
(``quantize_`` with ``MXFP8TrainingOpConfig``), needs compute capability 10.0 (Blackwell) and both Linear dimensions
and the number of tokens per step multiples of 32; ``fp8_emulate=True`` runs torchao's emulated MXFP8 recipe
(``MXFP8_EMULATED_RCEIL``, pure PyTorch), which trains on CPU. Its weights are all-gathered in bfloat16.

Which torchao API path a recipe takes ([`api_path`][precision_fsdp.float8.config.api_path]) is decided from what the
installed torchao does
(``_compat.torchao_training_paths`` and ``_compat.weight_wrapper_float8_gaps``): the weight wrapper where it covers
the recipe, else the module swap. With torchao 0.17 and 0.18 the fp8 recipes stay on the module swap: the weight
wrapper's ``Float8TrainingOpConfig`` has no ``emulate`` switch (0.17's takes no dense recipe at all), and its weights
are all-gathered in the policy's param dtype (``fsdp_pre_all_gather`` casts to ``mp_policy.param_dtype``), so
tensorwise would lose float8 all-gather.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Optional, Union

import torch

from precision_base import PrecisionPluginWarning
from precision_fsdp.errors import Float8UnavailableError
from precision_fsdp.float8.recipes import FP8_RECIPES, MX_BLOCK, MX_RECIPES, RECIPES

INSTALL_HINT: Final[str] = 'pip install "precision-fsdp[fp8]" (it brings torchao)'
"""The install line from a package index; [`install_hint`][precision_fsdp.float8.config.install_hint] gives the one for
where this copy came from."""


def install_hint() -> str:
    """The command that brings torchao for this installation of precision-fsdp (a checkout, a wheel or an index:
    [`precision_base.registry.statuses.install_command`][] reads it from the distribution's ``direct_url.json``)."""
    from precision_base.registry.statuses import install_command

    return f"{install_command('precision-fsdp', 'fp8')} (it brings torchao)"


Fp8Filter = Union[Sequence[str], Callable[[torch.nn.Module, str], bool], None]


def is_fp8(precision: str) -> bool:
    """Whether ``precision`` is one of the low-precision (fp8 or MXFP8) precisions."""
    return precision in RECIPES


def is_mx(precision: str) -> bool:
    """Whether ``precision`` is an MX (microscaling) precision."""
    return precision in MX_RECIPES


def api_path(spec: str, precision: str) -> str:
    """Which torchao training API ``precision`` runs on here: ``_compat.WEIGHT_WRAPPER`` where the installed
    torchao has it and it covers the recipe, else ``_compat.MODULE_SWAP``.

    Raises:
        Float8UnavailableError: torchao is missing, or (MXFP8) it has no weight-wrapper API.
    """
    from precision_fsdp import _compat

    torchao_float8(spec)
    paths = _compat.torchao_training_paths()
    if is_mx(precision):
        if _compat.WEIGHT_WRAPPER not in paths:
            raise Float8UnavailableError(
                f"{spec} needs torchao's MXFP8 training ({_compat.TORCHAO_WEIGHT_WRAPPER_CONFIG_MODULE}."
                f"MXFP8TrainingOpConfig, torchao 0.17 or newer), which the installed torchao does not have: "
                f"{install_hint()}. Use 'fsdp:fp8-rowwise' or 'fsdp:bf16-mixed' here."
            )
        return _compat.WEIGHT_WRAPPER
    if _compat.WEIGHT_WRAPPER in paths and not _compat.weight_wrapper_float8_gaps(FP8_RECIPES[precision]):
        return _compat.WEIGHT_WRAPPER
    return _compat.MODULE_SWAP


def torchao_float8(spec: str) -> Any:
    """The ``torchao.float8`` module.

    Raises:
        Float8UnavailableError: torchao is not installed (the message is the install hint), or it is installed but
            ``torchao.float8`` fails to import (the error and the torch and torchao versions; no install hint).
    """
    from precision_base.registry.requirements import installed_version

    try:
        import torchao.float8 as float8
    except Exception as exc:  # a torchao built for another torch fails in many ways, not only with ImportError
        if installed_version("torchao") is None:
            raise Float8UnavailableError(f"{spec} needs torchao: {install_hint()}. ({exc})") from None
        raise Float8UnavailableError(
            f"{spec} cannot use the installed torchao {installed_version('torchao') or '(version unknown)'} with torch "
            f"{torch.__version__}: `import torchao.float8` fails: {type(exc).__name__}: {exc}. Install a torchao "
            "release that works with this torch; installing precision-fsdp's fp8 extra again changes nothing while "
            "these versions stay"
        ) from exc
    return float8


def needed_capability(precision: str = "fp8-tensorwise") -> tuple[int, int]:
    """The CUDA compute capability ``precision`` needs: 8.9 for fp8 (torchao's ``is_sm_at_least_89``), 10.0 for
    MXFP8 (``is_sm_at_least_100``, which gates torchao's MXFP8 kernels)."""
    return (10, 0) if is_mx(precision) else (8, 9)


def hardware_problem(precision: str = "fp8-tensorwise") -> Optional[str]:
    """Why this machine cannot train in ``precision`` (``None`` when a CUDA GPU of the needed compute capability,
    [`needed_capability`][precision_fsdp.float8.config.needed_capability], is present)."""
    if not torch.cuda.is_available():
        return "no CUDA GPU is available"
    major, minor = torch.cuda.get_device_capability()
    need = needed_capability(precision)
    if (major, minor) < need:
        name = torch.cuda.get_device_name()
        kind, examples = ("MXFP8", "B200, GB200") if is_mx(precision) else ("FP8", "L4, H100")
        return (
            f"{name} has compute capability {major}.{minor}; {kind} matmuls need {need[0]}.{need[1]} or newer "
            f"(e.g. {examples})"
        )
    return None


def check_can_run(spec: str, emulate: bool) -> None:
    """Raise unless ``spec`` can run here: torchao installed, and FP8 hardware or ``emulate``.

    Raises:
        Float8UnavailableError: torchao is missing, or no FP8 hardware and ``emulate`` is false.
    """
    precision = spec.rsplit(":", 1)[-1]
    if precision not in RECIPES:
        precision = "fp8-tensorwise"
    api_path(spec, precision)
    problem = hardware_problem(precision)
    if problem is not None and not emulate:
        if is_mx(precision):
            raise Float8UnavailableError(
                f"{spec} needs a GPU with MXFP8 (CUDA compute capability 10.0 or newer, Blackwell): {problem}. "
                "torchao's MXFP8 kernels (CUDA/Triton quantization, CUTLASS and torch._scaled_mm with e8m0 scales) "
                "run only there; without one they fail with \"AssertionError: needs triton\". Use 'fsdp:fp8-rowwise' "
                "(8.9+) or 'fsdp:bf16-mixed' here. (fp8_emulate=True runs torchao's emulated MXFP8 recipe instead: "
                "for tests only, slower than bf16-mixed.)"
            )
        raise Float8UnavailableError(
            f"{spec} needs a GPU with FP8 (CUDA compute capability 8.9 or newer): {problem}. Use 'fsdp:bf16-mixed' "
            "here. (fp8_emulate=True runs torchao's emulation instead: for tests only, slower than bf16-mixed.)"
        )


def _linears(root: torch.nn.Module) -> list[tuple[str, torch.nn.Linear]]:
    return [(name, m) for name, m in root.named_modules() if type(m) is torch.nn.Linear]


def default_filter(root: torch.nn.Module, multiple: int = 16) -> Callable[[torch.nn.Module, str], bool]:
    """The default choice for ``root``: Linear layers with both dimensions multiples of ``multiple`` (16; 32 for
    MXFP8), except the first and the last Linear of ``root`` (in module order)."""
    linears = _linears(root)
    ends = {linears[0][0], linears[-1][0]} if linears else set()

    def chosen(module: torch.nn.Module, fqn: str) -> bool:
        if fqn in ends or not isinstance(module, torch.nn.Linear):
            return False
        return module.in_features % multiple == 0 and module.out_features % multiple == 0

    return chosen


def user_filter(spec: Fp8Filter) -> Optional[Callable[[torch.nn.Module, str], bool]]:
    """``fp8_filter=`` as torchao's ``module_filter_fn``; ``None`` means the defaults.

    Raises:
        TypeError: ``spec`` is neither patterns nor a callable.
    """
    if spec is None:
        return None
    if callable(spec):
        return spec
    if isinstance(spec, str) or not isinstance(spec, Iterable) or not all(isinstance(p, str) and p for p in spec):
        raise TypeError(
            "fp8_filter must be module name patterns (e.g. ('layers.*.mlp.*',)) or a callable (module, fqn) -> bool, "
            f"got {spec!r}"
        )
    patterns = tuple(spec)
    return lambda module, fqn: any(fnmatch.fnmatchcase(fqn, p) or fnmatch.fnmatchcase(fqn, "*." + p) for p in patterns)


def config(spec: str, precision: str, emulate: bool) -> Any:
    """torchao's ``Float8LinearConfig`` for ``precision`` (float8 all-gather where the recipe allows it)."""
    import dataclasses

    float8 = torchao_float8(spec)
    base = float8.Float8LinearConfig.from_recipe_name(FP8_RECIPES[precision])
    return dataclasses.replace(base, emulate=emulate, enable_fsdp_float8_all_gather=precision == "fp8-tensorwise")


def training_op_config(precision: str, emulate: bool) -> Any:
    """torchao's weight-wrapper config for ``precision``: ``MXFP8TrainingOpConfig`` (MXFP8, emulated when
    ``emulate``) or ``Float8TrainingOpConfig`` (fp8, used only where [`api_path`][precision_fsdp.float8.config.api_path]
    chose the weight wrapper)."""
    import importlib

    from precision_fsdp import _compat

    configs = importlib.import_module(_compat.TORCHAO_WEIGHT_WRAPPER_CONFIG_MODULE)
    if is_mx(precision):
        member = MX_RECIPES[precision][1 if emulate else 0]
        return configs.MXFP8TrainingOpConfig.from_recipe(getattr(configs.MXFP8TrainingRecipe, member))
    op_config = configs.Float8TrainingOpConfig(float8_linear_recipe=FP8_RECIPES[precision])
    if emulate:
        import dataclasses

        op_config = dataclasses.replace(op_config, emulate=True)
    return op_config


def convert(
    root: torch.nn.Module,
    spec: str,
    precision: str,
    emulate: bool,
    chosen: Fp8Filter,
    exclude: Iterable[torch.nn.Module] = (),
) -> list[str]:
    """Swap the chosen Linear layers of ``root`` for ``Float8Linear``, in place; return their qualified names.
    Modules in ``exclude`` (and everything inside them, e.g. ``keep_fp32`` modules) are never converted."""
    from precision_fsdp import _compat

    float8 = torchao_float8(spec)
    decide = user_filter(chosen) or default_filter(root, MX_BLOCK if is_mx(precision) else 16)
    excluded = {id(m) for e in exclude for m in e.modules()}
    names = [name for name, module in _linears(root) if id(module) not in excluded and decide(module, name)]
    if is_mx(precision):
        biased = [name for name, module in _linears(root) if name in names and module.bias is not None]
        names = [name for name in names if name not in biased]
        if biased and chosen is not None:
            warnings.warn(
                f"{spec}: Linear layers with a bias are not converted to MXFP8 ({', '.join(biased[:8])}): torchao's "
                "MXFP8 weight wrapper computes the matmul without the bias (it drops it: the output misses the bias "
                "and the bias gets no gradient). Use bias=False layers for MXFP8, or 'fsdp:fp8-rowwise'.",
                PrecisionPluginWarning,
                stacklevel=2,
            )
    if not names:
        warnings.warn(nothing_converted_message(root, spec, chosen, excluded), PrecisionPluginWarning, stacklevel=2)
    if api_path(spec, precision) == _compat.WEIGHT_WRAPPER:
        from torchao.quantization import quantize_

        allow_weight_wrapper_checkpoints()
        chosen_ids = {id(m) for name, m in _linears(root) if name in names}
        quantize_(root, training_op_config(precision, emulate), filter_fn=lambda m, fqn: id(m) in chosen_ids)
        return names
    float8.convert_to_float8_training(
        root, module_filter_fn=lambda m, fqn: fqn in names, config=config(spec, precision, emulate)
    )
    return names


def nothing_converted_message(root: torch.nn.Module, spec: str, chosen: Fp8Filter, excluded: set[int]) -> str:
    """Why no Linear layer of ``root`` was chosen for float8: each Linear with its reason (the model would train
    in bf16-mixed under an fp8 name)."""
    linears = _linears(root)
    if not linears:
        return f"{spec}: the model has no torch.nn.Linear layer, so nothing runs in float8 (it trains as bf16-mixed)."
    ends = {linears[0][0], linears[-1][0]}
    reasons = []
    for name, module in linears:
        if id(module) in excluded:
            why = "keep_fp32"
        elif chosen is not None:
            why = "fp8_filter did not choose it"
        elif name in ends:
            why = "first or last Linear"
        elif is_mx(spec.rsplit(":", 1)[-1]) and module.bias is not None:
            why = "has a bias, which torchao's MXFP8 weight wrapper drops"
        else:
            multiple = MX_BLOCK if is_mx(spec.rsplit(":", 1)[-1]) else 16
            why = f"{module.in_features}x{module.out_features} not multiples of {multiple}"
        reasons.append(f"{name or '<root>'} ({why})")
    shown = ", ".join(reasons[:8]) + (f" and {len(reasons) - 8} more" if len(reasons) > 8 else "")
    return (
        f"{spec}: no Linear layer was chosen for float8, so nothing runs in float8 (the model trains as bf16-mixed, "
        f"slower than asking for it). Linear layers: {shown}. Pass fp8_filter= (module name patterns or a callable) "
        "to choose layers, or use 'fsdp:bf16-mixed'."
    )


def allow_weight_wrapper_checkpoints() -> None:
    """Let ``torch.load(weights_only=True)`` (distributed checkpoint loads, Lightning's resume) read the weight
    wrapper's tensors and configs, as ``torchao.float8`` does for its own classes: torchao 0.18 registers none of
    them, and resuming an MXFP8 run failed with "Unsupported global: GLOBAL torchao.prototype.moe_training.tensor.
    MXFP8TrainingWeightWrapperTensor was not an allowed global by default"."""
    import importlib

    from precision_fsdp import _compat

    configs = importlib.import_module(_compat.TORCHAO_WEIGHT_WRAPPER_CONFIG_MODULE)
    tensors = importlib.import_module("torchao.prototype.moe_training.tensor")
    allowed = [
        getattr(tensors, "Float8TrainingWeightWrapperTensor", None),
        getattr(tensors, "MXFP8TrainingWeightWrapperTensor", None),
        getattr(configs, "Float8TrainingOpConfig", None),
        getattr(configs, "MXFP8TrainingOpConfig", None),
        getattr(configs, "KernelPreference", None),
        getattr(configs, "ScaleCalculationMode", None),
    ]
    torch.serialization.add_safe_globals([a for a in allowed if a is not None])


def _wrapped(tensor: torch.Tensor) -> bool:
    from precision_fsdp import _compat

    local = _compat.local_tensor(tensor)  # a DTensor once sharded
    return type(local).__name__.endswith("TrainingWeightWrapperTensor")


def is_converted(root: torch.nn.Module) -> bool:
    """Whether ``root`` holds any of torchao's ``Float8Linear`` layers (module swap) or weight-wrapper weights."""
    if any("Float8Linear" in type(m).__name__ for m in root.modules()):
        return True
    return any(_wrapped(p.data) for p in root.parameters())


def describe_path(precision: str) -> str:
    """Which torchao API path ``precision`` takes here, with the reason (without importing torchao when it is
    missing: then the precision is unavailable anyway)."""
    from precision_fsdp import _compat

    paths = _compat.torchao_training_paths()
    if not paths:
        return "torchao is not installed"
    if is_mx(precision):
        return _compat.WEIGHT_WRAPPER if _compat.WEIGHT_WRAPPER in paths else "none: torchao has no MXFP8 training"
    if _compat.WEIGHT_WRAPPER not in paths:
        return f"{_compat.MODULE_SWAP}: torchao has no weight-wrapper training API"
    gaps = _compat.weight_wrapper_float8_gaps(FP8_RECIPES[precision])
    if not gaps:
        return _compat.WEIGHT_WRAPPER
    return f"{_compat.MODULE_SWAP}, as torchao's weight wrapper does not cover it here: {'; '.join(gaps)}"


def describe(precision: str) -> dict[str, str]:
    """What ``precision-plugins show`` prints for an FP8 precision: the dtype of each role."""
    if is_mx(precision):
        return {
            "torchao recipe": f"{MX_RECIPES[precision][0]} ({MX_RECIPES[precision][1]} with fp8_emulate=True)",
            "torchao API path": describe_path(precision),
            "converted Linear: matmul inputs and weights": "float8_e4m3fn, one e8m0 scale per 32 elements",
            "converted Linear: gradient of the output": "float8_e4m3fn, one e8m0 scale per 32 elements",
            "converted Linear: weights all-gathered by FSDP2": "bfloat16 (the policy's param dtype; no MX all-gather)",
            "converted Linear: stored parameters, reduction": "float32, float32",
            "other modules": "bf16-mixed (float32 parameters, bfloat16 autocast, float32 reduction)",
            "which Linear": "bias-free, dims multiples of 32, not the first or last Linear (fp8_filter= overrides "
            "all but the bias rule); tokens per step a multiple of 32",
        }
    rowwise = precision == "fp8-rowwise"
    return {
        "torchao recipe": RECIPES[precision],
        "torchao API path": describe_path(precision),
        "converted Linear: matmul inputs and weights": "float8_e4m3fn, "
        + ("one scale per row" if rowwise else "one scale per tensor"),
        "converted Linear: gradient of the output": "float8_e4m3fn" if rowwise else "float8_e5m2",
        "converted Linear: weights all-gathered by FSDP2": "bfloat16" if rowwise else "float8_e4m3fn",
        "converted Linear: stored parameters, reduction": "float32, float32",
        "other modules": "bf16-mixed (float32 parameters, bfloat16 autocast, float32 reduction)",
        "which Linear": "dims multiples of 16, not the first or last Linear (fp8_filter= overrides)",
    }
