"""The fence, torchao part: which of torchao's training API paths the installed torchao has (feature detection).

torchao is optional and imported only when asked. See `precision_fsdp._compat` for the rules.
"""

from __future__ import annotations

import functools
import importlib
from typing import Final

import torch

from precision_fsdp._compat.torch_fsdp import MixedPrecisionPolicy

# torchao has two ways to train in low precision. The module swap (``torchao.float8.convert_to_float8_training`` with
# ``Float8LinearConfig``) replaces Linear layers by ``Float8Linear``; the weight wrapper
# (``torchao.quantization.quantize_`` with ``Float8TrainingOpConfig`` / ``MXFP8TrainingOpConfig`` from
# ``torchao.prototype.moe_training.config``, torchao 0.17+) swaps each weight's data for a tensor subclass that reroutes
# ``linear``/``mm``. MXFP8 training exists only on the weight wrapper. Which one an fp8 recipe takes is decided in
# ``precision_fsdp.float8.config`` from the answers below, which probe what the installed torchao does (never its
# version number).
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
    """Which of torchao's training API paths the installed torchao has (`MODULE_SWAP`, `WEIGHT_WRAPPER`;
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
    "rowwise"), in words a user reads in the dtype table (no field lists or exception text); empty means it covers
    the recipe. Probed on the installed torchao: whether the config has an
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
        gaps.append("its config has no emulate switch, which a CPU run needs")
    try:
        config = config_module.Float8TrainingOpConfig(float8_linear_recipe=recipe)
    except (TypeError, ValueError):
        return (*gaps, f"it has no {recipe} recipe")
    if recipe == "tensorwise":
        weight = tensor_module.Float8TrainingWeightWrapperTensor(torch.ones(16, 16), config)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
        inputs, _meta = weight.fsdp_pre_all_gather(None, weight.size(), weight.stride(), None, policy)
        dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in inputs})
        if not any(t.dtype.itemsize == 1 for t in inputs):
            gaps.append(f"it all-gathers the weight in {', '.join(dtypes)}, not float8")
    return tuple(gaps)


__all__ = [
    "MODULE_SWAP",
    "TORCHAO_WEIGHT_WRAPPER_CONFIG_MODULE",
    "WEIGHT_WRAPPER",
    "torchao_training_paths",
    "weight_wrapper_float8_gaps",
]
