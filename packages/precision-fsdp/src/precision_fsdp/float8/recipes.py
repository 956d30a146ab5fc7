"""The low-precision recipes precision-fsdp offers by name: plain data, imports no torch.

Each name, its torchao recipe and the precision the rest of the model follows are declared here once: ``_info.py``
derives ``PluginInfo.extra_precisions`` and ``precision_extras`` from [`FLOAT8`][precision_fsdp.float8.recipes.FLOAT8],
the plugin class its ``extra_precisions``, and [`precision_fsdp.float8.config`][] (torchao) and
[`precision_fsdp.float8.feature`][] (the plugin's hooks) read the tables below. A new torchao recipe is one more
entry in [`FP8_RECIPES`][precision_fsdp.float8.recipes.FP8_RECIPES] or
[`MX_RECIPES`][precision_fsdp.float8.recipes.MX_RECIPES].
"""

from __future__ import annotations

from typing import Final

from precision_base.kit.extra import ExtraPrecisions

FP8_RECIPES: Final[dict[str, str]] = {"fp8-tensorwise": "tensorwise", "fp8-rowwise": "rowwise"}
"""Our fp8 precision name -> torchao's ``Float8LinearRecipeName`` value."""

MX_RECIPES: Final[dict[str, tuple[str, str]]] = {"mxfp8-rceil": ("MXFP8_RCEIL", "MXFP8_EMULATED_RCEIL")}
"""Our MX precision name -> torchao's ``MXFP8TrainingRecipe`` member (on the GPU, and with ``fp8_emulate=True``)."""

RECIPES: Final[dict[str, str]] = {**FP8_RECIPES, **{name: members[0].lower() for name, members in MX_RECIPES.items()}}
"""Every low-precision name (the ``fp8_*`` options apply to all) -> torchao's recipe name."""

MX_BLOCK: Final[int] = 32
"""MXFP8's scaling block: Linear dimensions (and tokens per step) must be multiples of it."""

FLOAT8: Final[ExtraPrecisions] = ExtraPrecisions(
    feature="float8 (torchao, FSDP2 only)",
    bases=tuple((name, "bf16-mixed") for name in RECIPES),
    extra="fp8",  # torchao, from precision-fsdp[fp8]
    imports=("torchao.float8",),  # installed but failing to import (a torchao built for another torch): broken
    # FP8 tensor cores from compute capability 8.9 (Ada, Hopper); MX scaling from 10.0 (Blackwell)
    cuda_capability=(
        *((name, (8, 9)) for name in FP8_RECIPES),
        *((name, (10, 0)) for name in MX_RECIPES),
    ),
    notes=(
        *(
            (
                name,
                "float8 matmuls for large Linear layers (thousands wide), the rest bf16-mixed; slower than "
                "bf16-mixed for small ones",
            )
            for name in FP8_RECIPES
        ),
        *(
            (
                name,
                "MXFP8 matmuls (float8 with a scale per 32 values) for large bias-free Linear layers, the rest "
                "bf16-mixed",
            )
            for name in MX_RECIPES
        ),
    ),
    matmuls="float8",
)
"""The float8 feature's extra precisions: every recipe, based on ``bf16-mixed``, needing the ``fp8`` extra, what
each needs of a GPU and trades (read by ``recommend``), and that their matmuls run in float8 (read by the audit)."""

EXTRA_PRECISIONS: Final[tuple[tuple[str, str], ...]] = FLOAT8.bases
"""The plugin's extra precisions, each with the precision the rest of the model follows."""

__all__ = ["EXTRA_PRECISIONS", "FLOAT8", "FP8_RECIPES", "MX_BLOCK", "MX_RECIPES", "RECIPES"]
