"""``FSDPPrecision``: Lightning's FSDP precision plugin for FSDP1 and FSDP2, with the built-in's defects fixed.

The class keeps Lightning's name and derives from Lightning's ``FSDPPrecision``, so ``FSDPStrategy`` accepts it and
checkpoints written by either class resume with the other (Lightning files the plugin state under the class's
``__qualname__``; the state is the loss scaler's, with the same keys in both). Its code lives in
[`FSDPPrecisionImpl`][precision_fsdp.implementation.FSDPPrecisionImpl]; this class names the bases and documents the
arguments, so that
``precision_base.namespaces.for_namespace(FSDPPrecision, "pytorch_lightning")`` builds the same plugin for
``pytorch_lightning.Trainer``.
"""

from __future__ import annotations

import lightning.pytorch as pl

from precision_fsdp.implementation import FSDPPrecisionImpl


class FSDPPrecision(FSDPPrecisionImpl, pl.plugins.precision.FSDPPrecision):  # type: ignore[misc]  # str vs Literal
    """Precision plugin for Fully Sharded Data Parallel, for ``lightning.pytorch``: FSDP1 (``FSDPStrategy``) and
    FSDP2 (``fully_shard`` under ``ModelParallelStrategy`` or [`FSDP2Strategy`][precision_fsdp.FSDP2Strategy]).

    Dtypes (``dtypes()`` gives the full table for FSDP1 and FSDP2):

    | precision | sharded params | compute | gradient reduction (default) | autocast |
    |---|---|---|---|---|
    | 32-true | fp32 | fp32 | fp32 | off |
    | 16-true | fp16 | fp16 | fp16 | off |
    | bf16-true | bf16 | bf16 | bf16 | off |
    | 16-mixed | fp32 | fp16 | fp32 | fp16 |
    | bf16-mixed | fp32 | bf16 | fp32 | bf16 |

    Args:
        precision: ``"32-true"``, ``"16-true"``, ``"bf16-true"``, ``"16-mixed"`` or ``"bf16-mixed"`` (Lightning's
            aliases ``"32"``, ``"16"``, ``"bf16"``, ``32``, ``16`` are accepted too).
        scaler: for ``16-mixed`` only: a ``torch.amp.GradScaler`` (FSDP2) or ``ShardedGradScaler`` (FSDP1) to use.
            ``None`` builds the right kind for the FSDP version and device when the plugin is connected.
        reduce_dtype: dtype gradients are reduce-scattered in (``torch.float32``/``"fp32"``, ``"bf16"``,
            ``"fp16"``). Default: fp32 for ``*-mixed`` and ``32-true``, the parameter dtype for ``*-true``.
        init_scale: the default ``16-mixed`` scaler's starting scale. This and the three settings below are
            reachable by name through ``precision_base.resolve("fsdp:16-mixed", init_scale=...)``.
        growth_factor: factor the default scaler multiplies its scale by after ``growth_interval`` clean steps.
        backoff_factor: factor the default scaler multiplies its scale by after a step with inf/NaN gradients.
        growth_interval: number of consecutive clean steps before the default scaler grows its scale.
        max_skipped_steps: stop training with [`OverflowStormError`][precision_base.errors.OverflowStormError] after
            this many
            optimizer steps in a row were skipped for inf/NaN gradients (default 50; ``None`` never stops); a
            warning is given at half that count. Applies to ``16-mixed`` (the scaler skips such steps) and to the
            other precisions with ``check_finite_grads=True``.
        check_finite_grads: precisions other than ``16-mixed``: skip, on every rank, an optimizer step whose
            gradients hold inf/NaN on any rank (as DeepSpeed's bf16 ``check_grad_overflow``), counted against
            ``max_skipped_steps``. Costs one all-reduce of a flag per step. Default ``False``.
        fp8_emulate: ``fp8-*`` only: run torchao's float8 emulation where the hardware has no FP8 (a test device:
            CPU tests; slower than ``bf16-mixed``). Default ``False``: no FP8 hardware is an error.
        fp8_filter: ``fp8-*`` only: which Linear layers to convert, as qualified-name patterns or a callable
            ``(module, fqn) -> bool``; replaces the defaults (dims multiples of 16, not the first or last Linear).
            See [`precision_fsdp.float8.config`][].
        keep_fp32: modules that keep float32 parameters and compute in float32 while the rest follows the
            precision: qualified-name patterns (``"lm_head"``, ``"layers.*.norm"``) and/or module classes
            (``torch.nn.LayerNorm``). FSDP2 only: each is sharded as its own unit with a float32
            ``MixedPrecisionPolicy``, autocast is off inside it. See [`precision_fsdp.keep_fp32`][].
        keep_fp32_defaults: FSDP2: also keep in float32, without naming them, (1) under ``*-mixed``, every layer
            whose running statistics are float buffers (BatchNorm, SyncBatchNorm, InstanceNorm with
            ``track_running_stats``), whose fp16/bf16 weight would otherwise meet float32 statistics ("expected
            scalar type BFloat16 but found Float"), and (2) Hugging Face models' ``_keep_in_fp32_modules`` (float16
            precisions) and ``_keep_in_fp32_modules_strict`` (float16 and bfloat16), as transformers does. Default
            ``True``; ``False`` keeps only ``keep_fp32``. ``dtypes()`` notes say which rules are on.

    Raises:
        ValueError: unsupported ``precision`` (Lightning's message first); a scaler or scaler options for a
            precision that does not scale; an unsupported ``reduce_dtype``.
    """
