"""FP8 training by name: ``fsdp:fp8-tensorwise`` and ``fsdp:fp8-rowwise`` (torchao's float8 training recipes).

The model's ``torch.nn.Linear`` layers are swapped for torchao's ``Float8Linear`` (``convert_to_float8_training``):
their matmuls take float8 (e4m3) inputs and weights with dynamic scales; everything else runs under ``bf16-mixed``
(float32 parameters, bfloat16 autocast, float32 gradient reduction). Under ``fp8-tensorwise`` FSDP2 all-gathers the
converted weights in float8 (torchao's ``enable_fsdp_float8_all_gather``), half the bytes of bfloat16; torchao's
rowwise recipe does not support float8 all-gather, so ``fp8-rowwise`` all-gathers them in bfloat16.

Which Linear layers are converted (defaults that torchtitan and Accelerate settled on): those whose
``in_features`` and ``out_features`` are multiples of 16 (the float8 matmul needs it), except the first and the
last Linear of the model (embeddings-side and output-side layers are the most sensitive). ``fp8_filter=``
overrides the defaults entirely: qualified-name patterns (as ``keep_fp32``) or a callable ``(module, fqn) -> bool``.

torchao is an optional dependency (``pip install "precision-fsdp[fp8]"``); this module imports it only when a model
is converted. Without a GPU that has FP8 (CUDA compute capability 8.9 or newer, the check torchao uses) the
precisions are refused, unless ``fp8_emulate=True`` asks for torchao's emulation: a test device that runs the same
code path in higher precision, slowly, and is meant for CPU tests, not for training.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Optional, Union

import torch

from precision_base import PrecisionPluginError, PrecisionPluginWarning

RECIPES: Final[dict[str, str]] = {"fp8-tensorwise": "tensorwise", "fp8-rowwise": "rowwise"}
"""Our precision name -> torchao's ``Float8LinearRecipeName`` value."""

EXTRA_PRECISIONS: Final[tuple[tuple[str, str], ...]] = tuple((name, "bf16-mixed") for name in RECIPES)
"""The plugin's extra precisions, each with the precision the rest of the model follows."""

INSTALL_HINT: Final[str] = 'pip install "precision-fsdp[fp8]" (it brings torchao)'
"""The install line from a package index; :func:`install_hint` gives the one for where this copy came from."""


def install_hint() -> str:
    """The command that brings torchao for this installation of precision-fsdp (a checkout, a wheel or an index:
    :func:`precision_base.registry.install_command` reads it from the distribution's ``direct_url.json``)."""
    from precision_base.registry import install_command

    return f"{install_command('precision-fsdp', 'fp8')} (it brings torchao)"


Fp8Filter = Union[Sequence[str], Callable[[torch.nn.Module, str], bool], None]


class Float8UnavailableError(PrecisionPluginError, RuntimeError):
    """An FP8 precision cannot run here: torchao is missing, the GPU has no FP8, or FSDP1 is used."""


def is_fp8(precision: str) -> bool:
    """Whether ``precision`` is one of the FP8 precisions."""
    return precision in RECIPES


def torchao_float8(spec: str) -> Any:
    """The ``torchao.float8`` module.

    Raises:
        Float8UnavailableError: torchao is not installed (the message is the install hint).
    """
    try:
        import torchao.float8 as float8
    except ImportError as exc:
        raise Float8UnavailableError(f"{spec} needs torchao: {install_hint()}. ({exc})") from None
    return float8


def hardware_problem() -> Optional[str]:
    """Why this machine cannot train in FP8 (``None`` when a CUDA GPU of compute capability >= 8.9 is present)."""
    if not torch.cuda.is_available():
        return "no CUDA GPU is available"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        name = torch.cuda.get_device_name()
        return f"{name} has compute capability {major}.{minor}; FP8 matmuls need 8.9 or newer (e.g. L4, H100)"
    return None


def check_can_run(spec: str, emulate: bool) -> None:
    """Raise unless ``spec`` can run here: torchao installed, and FP8 hardware or ``emulate``.

    Raises:
        Float8UnavailableError: torchao is missing, or no FP8 hardware and ``emulate`` is false.
    """
    torchao_float8(spec)
    problem = hardware_problem()
    if problem is not None and not emulate:
        raise Float8UnavailableError(
            f"{spec} needs a GPU with FP8 (CUDA compute capability 8.9 or newer): {problem}. Use 'fsdp:bf16-mixed' "
            "here. (fp8_emulate=True runs torchao's emulation instead: for tests only, slower than bf16-mixed.)"
        )


def _linears(root: torch.nn.Module) -> list[tuple[str, torch.nn.Linear]]:
    return [(name, m) for name, m in root.named_modules() if type(m) is torch.nn.Linear]


def default_filter(root: torch.nn.Module) -> Callable[[torch.nn.Module, str], bool]:
    """The default choice for ``root``: Linear layers with both dimensions multiples of 16, except the first and the
    last Linear of ``root`` (in module order)."""
    linears = _linears(root)
    ends = {linears[0][0], linears[-1][0]} if linears else set()

    def chosen(module: torch.nn.Module, fqn: str) -> bool:
        if fqn in ends or not isinstance(module, torch.nn.Linear):
            return False
        return module.in_features % 16 == 0 and module.out_features % 16 == 0

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
    base = float8.Float8LinearConfig.from_recipe_name(RECIPES[precision])
    return dataclasses.replace(base, emulate=emulate, enable_fsdp_float8_all_gather=precision == "fp8-tensorwise")


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
    float8 = torchao_float8(spec)
    decide = user_filter(chosen) or default_filter(root)
    excluded = {id(m) for e in exclude for m in e.modules()}
    names = [name for name, module in _linears(root) if id(module) not in excluded and decide(module, name)]
    if not names:
        warnings.warn(nothing_converted_message(root, spec, chosen, excluded), PrecisionPluginWarning, stacklevel=2)
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
        else:
            why = f"{module.in_features}x{module.out_features} not multiples of 16"
        reasons.append(f"{name or '<root>'} ({why})")
    shown = ", ".join(reasons[:8]) + (f" and {len(reasons) - 8} more" if len(reasons) > 8 else "")
    return (
        f"{spec}: no Linear layer was chosen for float8, so nothing runs in float8 (the model trains as bf16-mixed, "
        f"slower than asking for it). Linear layers: {shown}. Pass fp8_filter= (module name patterns or a callable) "
        "to choose layers, or use 'fsdp:bf16-mixed'."
    )


def is_converted(root: torch.nn.Module) -> bool:
    """Whether ``root`` holds any of torchao's ``Float8Linear`` layers."""
    return any(type(m).__name__ == "Float8Linear" or "Float8Linear" in type(m).__name__ for m in root.modules())


def describe(precision: str) -> dict[str, str]:
    """What ``precision-plugins show`` prints for an FP8 precision: the dtype of each role."""
    rowwise = precision == "fp8-rowwise"
    return {
        "torchao recipe": RECIPES[precision],
        "converted Linear: matmul inputs and weights": "float8_e4m3fn, "
        + ("one scale per row" if rowwise else "one scale per tensor"),
        "converted Linear: gradient of the output": "float8_e4m3fn" if rowwise else "float8_e5m2",
        "converted Linear: weights all-gathered by FSDP2": "bfloat16" if rowwise else "float8_e4m3fn",
        "converted Linear: stored parameters, reduction": "float32, float32",
        "other modules": "bf16-mixed (float32 parameters, bfloat16 autocast, float32 reduction)",
        "which Linear": "dims multiples of 16, not the first or last Linear (fp8_filter= overrides)",
    }
