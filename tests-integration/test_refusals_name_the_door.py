"""Every refusal of both plugins, met at both doors, names the door the user came in by (issue 30, item 2).

``REFUSALS`` is the table: each row is one place in the code that refuses (``where``), and what a user of a door does
to meet it: build the door's plugin class with the argument it refuses (``precision_base.get_plugin_class(backend,
door=...)``, the class ``resolve`` / ``resolve_fabric`` build), pass a name or a strategy to the door itself
(``precision_base.Trainer(...)`` / ``precision_base.Fabric(...)``: the plugin's ``configure_strategy`` refuses before
Lightning sees anything), or call the hook Lightning calls when it sets the model up (``convert_module``, in a real
one-rank process group where FSDP2 must have sharded the model first). Nothing trains.

For every row, the message met at the Fabric door names nothing of the Trainer (no ``Trainer(``, no
``trainer.precision_plugin``, the word not at all); where the Trainer's message names the Trainer's call (``Trainer(``),
the Fabric message names Fabric's (``Fabric(``), and the row says which text each door's message holds; where the
two doors share the refusal's code, the rest of the two messages is the same text.
Rows whose refusal cannot happen on this machine (a CPU that runs DeepSpeed's fp16, a torch with FSDP2 on CPU, no
torchao) are skipped with the reason.

Left out, each for a reason: refusals in the training-step hooks of the Trainer classes only (DeepSpeed's LBFGS,
skipped backward, clipping by value; FSDP's clipping), which Fabric's own loop never calls; ``WrongDoorError`` (its
message is about the two doors: ``tests-integration/test_fabric_doors.py``); refusals that need a launched strategy
or a GPU (a DeepSpeed strategy's loss-scaling arguments against the plugin, ZeRO-3 parameters, FSDP2Strategy's
tensor-parallel mesh, fp8 hardware).
"""

from __future__ import annotations

import re
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Union

import lightning.fabric as lf
import lightning.pytorch as pl
import pytest
import torch
from _fsdp_helpers import fsdp2_cpu_skip_reason
from torch import nn

import precision_base
from precision_base import PrecisionPluginError, PrecisionPluginWarning, TrainerConfigurationError, get_plugin_class
from precision_base.doors.table import Door
from precision_testsupport.launch import process_group

precision_fsdp = pytest.importorskip("precision_fsdp")
precision_deepspeed = pytest.importorskip("precision_deepspeed")

from precision_deepspeed.errors import DeepSpeedConfigConflictError  # noqa: E402
from precision_deepspeed.errors import KeepFP32Error as DeepSpeedKeepFP32Error  # noqa: E402
from precision_fsdp.errors import Float8UnavailableError  # noqa: E402
from precision_fsdp.errors import KeepFP32Error as FSDPKeepFP32Error  # noqa: E402

DOORS: tuple[Door, Door] = ("Trainer", "Fabric")
SCALER = torch.amp.GradScaler("cpu")
"""One scaler for both doors: the refusal shows it, so both messages show the same one."""


@dataclass(frozen=True)
class Refusal:
    """One refusal, as a user of either door meets it.

    Attributes:
        name: the test id.
        where: the code that refuses.
        raised: what it raises (at both doors).
        meet: what the user of ``door`` does; it raises ``raised``.
        names: ``(at the Trainer, at Fabric)``: the call the Trainer's message names, and what the Fabric message
            names instead; ``None`` for a message that names no door.
        same: apart from ``names``, the two messages are the same text (``False`` where each door's message
            names that door's own strategies or classes).
        needs: why the refusal cannot happen on this machine, or ``None``.
    """

    name: str
    where: str
    raised: type[BaseException]
    meet: Callable[[Door], Any]
    names: Optional[tuple[str, str]] = None
    same: bool = True
    needs: Callable[[], Optional[str]] = lambda: None


def build(backend: str, precision: Any, **options: Any) -> Callable[[Door], Any]:
    """Build the door's plugin class for ``backend`` with ``precision`` and ``options``."""
    return lambda door: get_plugin_class(backend, door=door)(precision, **options)


def at_door(
    spec: str, strategy: Union[str, Callable[[Door], Any]] = "auto", accelerator: str = "cpu"
) -> Callable[[Door], Any]:
    """Open the door with ``precision_plugin=spec`` and ``strategy`` (a name, or the door's strategy instance)."""

    def meet(door: Door) -> Any:
        chosen = strategy if isinstance(strategy, str) else strategy(door)
        opened = precision_base.Trainer if door == "Trainer" else precision_base.Fabric
        return opened(precision_plugin=spec, strategy=chosen, accelerator=accelerator, devices=1)

    return meet


def lightning_of(door: Door) -> Any:
    """The Lightning package of the door: ``lightning.pytorch`` or ``lightning.fabric``."""
    return pl if door == "Trainer" else lf


def deepspeed_cpu_strategy(door: Door, **kwargs: Any) -> Any:
    """The door's DeepSpeed CPU strategy: ``precision_deepspeed.DeepSpeedCPUStrategy`` or its Fabric twin."""
    module = precision_deepspeed if door == "Trainer" else precision_deepspeed.fabric
    return module.DeepSpeedCPUStrategy(**kwargs)


def fp16_config() -> dict[str, Any]:
    """A DeepSpeed config that contradicts a bf16 plugin (a new one each time: a strategy keeps the dict it got)."""
    return {"fp16": {"enabled": True}, "train_micro_batch_size_per_gpu": 1}


def fsdp1_mixed_precision(door: Door) -> Any:
    from torch.distributed.fsdp import MixedPrecision

    return lightning_of(door).strategies.FSDPStrategy(mixed_precision=MixedPrecision(param_dtype=torch.float16))


def kept_module_sharded_elsewhere(door: Door) -> None:
    """``keep_fp32="lm_head"`` on a model torch's ``fully_shard`` sharded as one unit before the plugin saw it."""
    from precision_fsdp._compat import fully_shard

    with process_group():
        model = nn.Sequential(OrderedDict(embed=nn.Linear(4, 8), norm=nn.LayerNorm(8), lm_head=nn.Linear(8, 2)))
        fully_shard(model)
        get_plugin_class("fsdp", door=door)("bf16-mixed", keep_fp32="lm_head").convert_module(model)


def default_kept_module_sharded_elsewhere(door: Door) -> None:
    """A BatchNorm (kept in float32 by default under ``*-mixed``) inside a bf16 unit torch sharded: a warning, met
    here as an error."""
    from precision_fsdp._compat import MixedPrecisionPolicy, fully_shard

    with process_group():
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
        fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
        plugin = get_plugin_class("fsdp", door=door)("bf16-mixed")
        with warnings.catch_warnings():
            warnings.simplefilter("error", PrecisionPluginWarning)
            plugin.convert_module(model)


def nothing_converted_to_float8(door: Door) -> None:
    """Two Linear layers: the default fp8 filter skips the first and the last, so none is converted."""
    plugin = get_plugin_class("fsdp", door=door)("fp8-tensorwise", fp8_emulate=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrecisionPluginWarning)  # "no Linear layer was chosen", before the refusal
        plugin.convert_module(nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32)))


def cpu_runs_deepspeed_fp16() -> Optional[str]:
    from precision_deepspeed import _compat

    return "DeepSpeed runs fp16 on this CPU" if _compat.cpu_supports_fp16() else None


def fsdp2_runs_on_cpu() -> Optional[str]:
    return None if fsdp2_cpu_skip_reason() is not None else "this torch runs FSDP2 on CPU"


def no_torchao() -> Optional[str]:
    try:
        import torchao.float8  # noqa: F401
    except ImportError as exc:
        return f"torchao's float8 training is not installed ({exc})"
    return None


def _deepspeed_precision(precision: Any) -> tuple[str, str]:
    call = f"(strategy='deepspeed', precision={precision!r})` is not supported."
    return f"`Trainer{call}", f"`Fabric{call}"


REFUSALS: list[Refusal] = [
    # -- DeepSpeed: building the class (precision_deepspeed.implementation.DeepSpeedPrecisionImpl.__init__) --------
    *(
        Refusal(
            f"deepspeed-precision-{precision}",
            "precision_base.contract.PrecisionPlugin.canonical_precision (DeepSpeed's lightning_precision_error)",
            ValueError,
            build("deepspeed", precision),
            names=_deepspeed_precision(precision),
        )
        for precision in ("64-true", 64, "fp8-tensorwise")
    ),
    Refusal(
        "deepspeed-max-skipped-steps",
        "precision_base.kit.overflow.check_limit",
        ValueError,
        build("deepspeed", "16-mixed", max_skipped_steps=0),
    ),
    Refusal(
        "deepspeed-loss-scale",
        "precision_deepspeed.config.LossScaling.__post_init__",
        ValueError,
        build("deepspeed", "16-mixed", loss_scale=-1.0),
    ),
    Refusal(
        "deepspeed-fp16-knobs-under-bf16",
        "precision_deepspeed.config.check_precision_options",
        ValueError,
        build("deepspeed", "bf16-mixed", hysteresis=4),
    ),
    Refusal(
        "deepspeed-torch-autocast-under-true",
        "precision_deepspeed.config.check_precision_options",
        ValueError,
        build("deepspeed", "bf16-true", torch_autocast=True),
    ),
    Refusal(
        "deepspeed-torch-autocast-fp16",
        "precision_deepspeed.config.check_precision_options (errors.autocast_fp16_refusal, or no torch_autocast here)",
        ValueError,
        build("deepspeed", "16-mixed", torch_autocast=True),
    ),
    Refusal(
        "deepspeed-safe-modules-without-autocast",
        "precision_deepspeed.config.check_precision_options",
        ValueError,
        build("deepspeed", "bf16-mixed", autocast_lower_precision_safe_modules=["torch.nn.Linear"]),
    ),
    Refusal(
        "deepspeed-keep-fp32-bad-entry",
        "precision_base.kit.keep_fp32.KeepFP32",
        TypeError,
        build("deepspeed", "bf16-mixed", keep_fp32=[3]),
    ),
    Refusal(
        "deepspeed-keep-fp32-under-32-true",
        "precision_deepspeed.keep_fp32.parse_keep_fp32",
        DeepSpeedKeepFP32Error,
        build("deepspeed", "32-true", keep_fp32=["0"]),
    ),
    Refusal(
        "deepspeed-keep-fp32-native-mode",
        "precision_deepspeed.keep_fp32.parse_keep_fp32",
        DeepSpeedKeepFP32Error,
        build("deepspeed", "bf16-mixed", keep_fp32=["0"]),
    ),
    Refusal(
        "deepspeed-keep-fp32-also-lower-precision-safe",
        "precision_deepspeed.keep_fp32.parse_keep_fp32 (or no torch_autocast here)",
        ValueError,
        build(
            "deepspeed",
            "bf16-mixed",
            torch_autocast=True,
            keep_fp32=[nn.Linear],
            autocast_lower_precision_safe_modules=["torch.nn.Linear"],
        ),
    ),
    # -- DeepSpeed: the door (precision_deepspeed.selection.resolve_strategy) --------------------------------------
    Refusal(
        "deepspeed-name-64-true",
        "precision_base.spec.parse_spec",
        PrecisionPluginError,
        at_door("deepspeed:64-true"),
    ),
    Refusal(
        "deepspeed-strategy-name",
        "precision_deepspeed.selection.resolve_strategy (wrong_strategy_error)",
        TrainerConfigurationError,
        at_door("deepspeed:bf16-mixed", "ddp"),
        same=False,
    ),
    Refusal(
        "deepspeed-strategy-instance",
        "precision_deepspeed.selection.resolve_strategy (wrong_strategy_error)",
        TrainerConfigurationError,
        at_door("deepspeed:bf16-mixed", lambda door: lightning_of(door).strategies.DDPStrategy()),
        same=False,
    ),
    Refusal(
        "deepspeed-lightnings-strategy-on-cpu",
        "precision_deepspeed.selection.resolve_strategy (wrong_strategy_error)",
        TrainerConfigurationError,
        at_door("deepspeed:bf16-mixed", lambda door: lightning_of(door).strategies.DeepSpeedStrategy()),
        same=False,
    ),
    Refusal(
        "deepspeed-fp16-on-this-cpu",
        "precision_deepspeed.selection.resolve_strategy (errors.cpu_fp16_refusal)",
        TrainerConfigurationError,
        at_door("deepspeed:16-mixed"),
        same=False,
        needs=cpu_runs_deepspeed_fp16,
    ),
    Refusal(
        "deepspeed-config-conflict",
        "precision_deepspeed.selection.resolve_strategy (config.conflict_message)",
        DeepSpeedConfigConflictError,
        at_door("deepspeed:bf16-mixed", lambda door: deepspeed_cpu_strategy(door, config=fp16_config())),
        same=False,
    ),
    # -- FSDP: building the class (precision_fsdp.implementation.FSDPPrecisionImpl.__init__) -----------------------
    *(
        Refusal(
            f"fsdp-precision-{precision}",
            "precision_base.contract.PrecisionPlugin.canonical_precision (Lightning's FSDP message names no door)",
            ValueError,
            build("fsdp", precision),
        )
        for precision in ("64-true", 64, "fp8-bogus")
    ),
    Refusal(
        "fsdp-keep-fp32-bad-entry",
        "precision_base.kit.keep_fp32.KeepFP32",
        TypeError,
        build("fsdp", "bf16-mixed", keep_fp32=[3]),
    ),
    Refusal(
        "fsdp-fp8-options-off-fp8",
        "precision_fsdp.float8.feature.check_options",
        ValueError,
        build("fsdp", "bf16-mixed", fp8_emulate=True),
    ),
    Refusal(
        "fsdp-fp8-filter-type",
        "precision_fsdp.float8.config.user_filter",
        TypeError,
        build("fsdp", "fp8-tensorwise", fp8_filter=3),
    ),
    Refusal(
        "fsdp-scaler-off-16-mixed",
        "precision_fsdp.scaler.check_scaler_options",
        ValueError,
        build("fsdp", "bf16-mixed", scaler=SCALER),
    ),
    Refusal(
        "fsdp-scaler-options-off-16-mixed",
        "precision_fsdp.scaler.check_scaler_options",
        ValueError,
        build("fsdp", "bf16-mixed", init_scale=8.0),
    ),
    Refusal(
        "fsdp-scaler-type",
        "precision_fsdp.scaler.check_scaler_options",
        TypeError,
        build("fsdp", "16-mixed", scaler=object()),
    ),
    Refusal(
        "fsdp-scaler-and-options",
        "precision_fsdp.scaler.check_scaler_options",
        ValueError,
        build("fsdp", "16-mixed", scaler=SCALER, init_scale=8.0),
    ),
    Refusal(
        "fsdp-scaler-option-range",
        "precision_fsdp.scaler.check_scaler_options",
        ValueError,
        build("fsdp", "16-mixed", growth_factor=0.5),
    ),
    Refusal(
        "fsdp-reduce-dtype",
        "precision_fsdp.policy.parse_dtype",
        ValueError,
        build("fsdp", "bf16-mixed", reduce_dtype="int8"),
    ),
    Refusal(
        "fsdp-check-finite-grads-under-16-mixed",
        "precision_fsdp.implementation.FSDPPrecisionImpl.__init__",
        ValueError,
        build("fsdp", "16-mixed", check_finite_grads=True),
    ),
    Refusal(
        "fsdp-max-skipped-steps",
        "precision_base.kit.overflow.check_limit",
        ValueError,
        build("fsdp", "16-mixed", max_skipped_steps=0),
    ),
    # -- FSDP: the door (precision_fsdp.selection._choose, each door's DoorChoice texts) ---------------------------
    Refusal(
        "fsdp-name-64-true",
        "precision_base.spec.parse_spec",
        PrecisionPluginError,
        at_door("fsdp:64-true"),
    ),
    Refusal(
        "fsdp-strategy-name",
        "precision_fsdp.selection._choose (DoorChoice.other)",
        TrainerConfigurationError,
        at_door("fsdp:bf16-mixed", "ddp"),
        same=False,
    ),
    Refusal(
        "fsdp-fsdp1-name-on-cpu",
        "precision_fsdp.selection._choose (DoorChoice.fsdp1_on_cpu)",
        TrainerConfigurationError,
        at_door("fsdp:bf16-mixed", "fsdp"),
        same=False,
    ),
    Refusal(
        "fsdp-fsdp1-instance-on-cpu",
        "precision_fsdp.selection._choose (DoorChoice.fsdp1_on_cpu)",
        TrainerConfigurationError,
        at_door("fsdp:bf16-mixed", lambda door: lightning_of(door).strategies.FSDPStrategy()),
        same=False,
    ),
    Refusal(
        "fsdp-fsdp1-mixed-precision",
        "precision_fsdp.selection._choose (DoorChoice.fsdp1_mixed_precision)",
        TrainerConfigurationError,
        at_door("fsdp:bf16-mixed", fsdp1_mixed_precision, accelerator="cuda"),  # refused before CUDA is looked for
        same=False,
    ),
    Refusal(
        "fsdp-fsdp2-on-this-cpu",
        "precision_fsdp.selection._choose (DoorChoice.fsdp2_not_on_cpu)",
        TrainerConfigurationError,
        at_door("fsdp:bf16-mixed"),
        same=False,
        needs=fsdp2_runs_on_cpu,
    ),
    # -- FSDP: setting the model up (convert_module, which Lightning calls at both doors) -------------------------
    Refusal(
        "fsdp-keep-fp32-module-sharded-elsewhere",
        "precision_fsdp.sharding.model._convert_with_kept",
        FSDPKeepFP32Error,
        kept_module_sharded_elsewhere,
        names=(
            "trainer.precision_plugin.fully_shard(...) and call trainer.precision_plugin.mark_keep_fp32(self) first "
            "in configure_model",
            "plugin.fully_shard(...) and call plugin.mark_keep_fp32(model) first in the parallelize_fn",
        ),
        needs=fsdp2_cpu_skip_reason,
    ),
    Refusal(
        "fsdp-default-kept-module-sharded-elsewhere-warning",
        "precision_fsdp.sharding.model._warn_default_not_kept",
        PrecisionPluginWarning,
        default_kept_module_sharded_elsewhere,
        names=(
            "trainer.precision_plugin.fully_shard(...) after trainer.precision_plugin.mark_keep_fp32(self)",
            "plugin.fully_shard(...) after plugin.mark_keep_fp32(model)",
        ),
        needs=fsdp2_cpu_skip_reason,
    ),
    Refusal(
        "fsdp-fp8-nothing-converted",
        "precision_fsdp.float8.feature.Float8Feature.check_model",
        Float8UnavailableError,
        nothing_converted_to_float8,
        names=("self.trainer.precision_plugin.prepare_for_sharding(self)", "plugin.prepare_for_sharding(model)"),
        same=False,
        needs=no_torchao,
    ),
]


def met(refusal: Refusal, door: Door) -> str:
    """The message a user of ``door`` reads."""
    with pytest.raises(refusal.raised) as info:
        refusal.meet(door)
    return str(info.value)


@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda refusal: refusal.name)
def test_each_refusal_names_the_door_it_is_met_at(refusal: Refusal) -> None:
    reason = refusal.needs()
    if reason is not None:
        pytest.skip(reason)
    trainer, fabric = (met(refusal, door) for door in DOORS)
    assert not re.search("trainer", fabric, re.IGNORECASE), f"{refusal.where} names the Trainer at Fabric: {fabric}"
    if "Trainer(" in trainer:  # the Trainer's message names the Trainer's call: Fabric's names Fabric's
        assert "Fabric(" in fabric, f"{refusal.where}: {fabric}"
        assert refusal.names is not None, f"{refusal.where}: the table says what the Fabric message names instead"
    if refusal.names is not None:
        at_trainer, at_fabric = refusal.names
        assert at_trainer in trainer
        assert at_fabric in fabric
    if refusal.same:
        expected = trainer if refusal.names is None else trainer.replace(*refusal.names)
        assert fabric == expected, "the two doors' messages differ only where they name the door"


def test_the_audit_refusing_a_plugin_without_a_table_names_the_door() -> None:
    """The audit's refusal of a precision plugin without ``dtypes()`` (Lightning's own): ``PrecisionAudit`` and
    ``Trainer(...)`` for a Trainer's plugin, ``audit_fabric_steps`` and ``Fabric(...)`` for a Fabric's."""
    from precision_base.audit import audit_fabric_steps
    from precision_base.audit.core import plugin_table

    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False)
    with pytest.raises(TypeError) as at_trainer:
        plugin_table(trainer.precision_plugin)
    fabric = lf.Fabric(accelerator="cpu", devices=1)
    with pytest.raises(TypeError) as at_fabric, audit_fabric_steps(fabric, nn.Linear(2, 2)):
        pass
    assert str(at_trainer.value).startswith("PrecisionAudit compares a run")
    assert "e.g. Trainer(precision_plugin='fsdp:bf16-mixed')" in str(at_trainer.value)
    assert str(at_fabric.value) == (
        str(at_trainer.value)
        .replace("PrecisionAudit", "audit_fabric_steps")
        .replace("Trainer(precision_plugin=", "Fabric(precision_plugin=")
    )
    assert not re.search("trainer", str(at_fabric.value), re.IGNORECASE)
