"""``DeepSpeedPrecision``: Lightning's DeepSpeed precision plugin, with a plugin-owned DeepSpeed config section.

The class keeps Lightning's name and public API, so Lightning's ``DeepSpeedStrategy`` accepts it and checkpoints
stay portable between this plugin and Lightning's built-in. What it adds:

* the precision section of DeepSpeed's config is the plugin's ([`precision_deepspeed.config`][]): fp16 with
  dynamic loss scaling and all its knobs, bf16, or torch autocast inside the engine; a user config that
  contradicts it is an error naming both, never silently overridden;
* the Trainer's ``gradient_clip_val`` reaches DeepSpeed's ``gradient_clipping``, and a contradiction is an error;
* ``precision_base.Trainer(precision_plugin="deepspeed:...", accelerator="cpu")`` picks a DeepSpeed strategy that
  runs on DeepSpeed's CPU accelerator ([`DeepSpeedCPUStrategy`][precision_deepspeed.strategy.DeepSpeedCPUStrategy]);
* ``convert_output`` returns floating outputs in the default dtype;
* Lightning's own ``DeepSpeedStrategy`` (what GPU users pass) gets the plugin's section with every option: the
  defaults Lightning writes first are told apart from the user's config;
* the same code serves ``lightning.pytorch`` and ``pytorch_lightning``: everything lives in
  [`DeepSpeedPrecisionImpl`][precision_deepspeed.implementation.DeepSpeedPrecisionImpl], and
  ``precision_base.namespaces.for_namespace(DeepSpeedPrecision,
  "pytorch_lightning")`` builds the class for the other namespace;
* [`DeepSpeedPrecision.dtypes`][precision_deepspeed.implementation.DeepSpeedPrecisionImpl.dtypes] states the dtype of
  each thing the plugin governs.
"""

from __future__ import annotations

import lightning.pytorch as pl

from precision_deepspeed.implementation import DeepSpeedPrecisionImpl


class DeepSpeedPrecision(DeepSpeedPrecisionImpl, pl.plugins.precision.DeepSpeedPrecision):  # type: ignore[misc]
    """Precision plugin for DeepSpeed: the engine runs the model in the precision's dtype.

    Dtypes under the default (DeepSpeed-native) mode, for ``16-*``/``bf16-*`` with ``half`` = fp16/bf16:

    * parameters: fp32 master copy in DeepSpeed's optimizer; the module's working copy is ``half``
      (cast by ``deepspeed.initialize``; ``*-true`` casts it already in ``convert_module``);
    * compute: ``half``; gradients are reduced in ``half`` (DeepSpeed's ``communication_data_type``);
    * inputs: floating inputs are cast to ``half`` by ``convert_input``; outputs back to the default dtype;
    * no ``torch.autocast``.

    With ``torch_autocast=True`` (``bf16-mixed``, DeepSpeed releases with a ``torch_autocast`` section) the module
    stays fp32, inputs stay fp32, and forward runs under ``torch.autocast`` in bf16. ``16-mixed`` with
    ``torch_autocast=True`` is refused ([`autocast_fp16_refusal`][precision_deepspeed.errors.autocast_fp16_refusal] says
    why).

    Args:
        precision: ``"32-true"``, ``"16-true"``, ``"bf16-true"``, ``"16-mixed"`` or ``"bf16-mixed"`` (or Lightning's
            aliases ``"32"``, ``"16"``, ``"bf16"``, ``32``, ``16``).
        loss_scale: fp16 only: ``0`` for dynamic loss scaling (default), otherwise a static scale.
        initial_scale_power: fp16 only: dynamic scaling starts at ``2 ** initial_scale_power``.
        loss_scale_window: fp16 only: steps without overflow before the scale is raised.
        hysteresis: fp16 only: overflows tolerated before the scale is lowered.
        consecutive_hysteresis: fp16 only: refill the hysteresis budget after each step without overflow.
        min_loss_scale: fp16 only: the lowest loss scale.
        torch_autocast: run the engine's forward under ``torch.autocast`` and keep fp32 parameters (mixed only).
        autocast_lower_precision_safe_modules: with ``torch_autocast``, ``"package.Class"`` names of modules whose
            parameters DeepSpeed communicates in the autocast dtype.
        max_skipped_steps: stop with [`precision_base.OverflowStormError`][] (here
            [`DeepSpeedOverflowStormError`][precision_deepspeed.errors.DeepSpeedOverflowStormError], also a
            [`DeepSpeedPrecisionError`][precision_deepspeed.errors.DeepSpeedPrecisionError]) after this many optimizer
            steps in a row that DeepSpeed skipped for non-finite gradients (``engine.was_step_applied()`` false: fp16
            overflows; bf16 with DeepSpeed's ``check_grad_overflow``, on by default in 0.19.8 and turned on by the
            plugin where it is off by default; DeepSpeed before 0.17 never skips a bf16 step), warning
            (``RuntimeWarning``) at half of it. Default 50, the FSDP plugin's too; ``None`` never stops.
        keep_fp32: with ``torch_autocast=True``: modules (qualified-name patterns relative to the LightningModule,
            and/or ``torch.nn.Module`` classes) that compute in float32 with autocast off inside; see
            [`precision_deepspeed.keep_fp32`][]. Refused without ``torch_autocast`` (DeepSpeed's native modes cast
            the whole module).
        keep_fp32_defaults: also keep in float32, without naming them (the FSDP plugin's rule): under ``*-mixed``
            every layer whose running statistics are float buffers (BatchNorm, SyncBatchNorm, InstanceNorm with
            ``track_running_stats``), whose fp16/bf16 weight would otherwise meet float32 statistics ("expected
            scalar type BFloat16 but found Float"), and Hugging Face models' ``_keep_in_fp32_modules`` (fp16) and
            ``_keep_in_fp32_modules_strict`` (fp16 and bf16). In DeepSpeed's native mode they compute in float32
            from float32 copies of their fp16/bf16 parameters. Default ``True``; ``dtypes()`` notes say which.

    Raises:
        ValueError: an unsupported ``precision``, fp16 knobs under a non-fp16 precision, ``torch_autocast`` under a
            ``*-true`` precision, under ``16-mixed`` or with a DeepSpeed that has no ``torch_autocast`` section, or a
            ``max_skipped_steps`` that is not a positive int or ``None``.
        precision_deepspeed.errors.KeepFP32Error: ``keep_fp32`` without ``torch_autocast=True``, or a class both
            in ``keep_fp32`` and in ``autocast_lower_precision_safe_modules``.
    """


__all__ = ["DeepSpeedPrecision"]
