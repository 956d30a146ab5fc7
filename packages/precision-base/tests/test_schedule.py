"""``PrecisionSchedule``'s parsing and step resolution (no Trainer): every error names what was wrong and the fix.

The switch itself runs in real fits: packages/precision-fsdp/tests/test_schedule_setup.py (setup-time errors, one
process) and tests-integration/test_precision_schedule.py (2-process FSDP2 fits, resume).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from precision_base import PrecisionScheduleError
from precision_base.callbacks.schedule import PrecisionSchedule, parse, resolve
from precision_base.spec import PluginSpec

EXAMPLE = '{0: "fsdp:bf16-mixed", 0.9: "fsdp:32-true"}'


def test_parse_keeps_the_order_and_normalises_the_names() -> None:
    assert parse({0: "fsdp:bf16", 0.9: " fsdp:32 "}) == (
        (0, PluginSpec("fsdp", "bf16-mixed")),
        (0.9, PluginSpec("fsdp", "32-true")),
    )


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ({}, "a precision schedule is a non-empty mapping from optimizer step (int) or fraction of max_steps (float "
         f"in [0, 1)) to a plugin name, e.g. {EXAMPLE}; got {{}}"),
        ({-1: "fsdp:bf16-mixed"}, "precision schedule key -1 is neither an optimizer step (an int >= 0) nor a "
         f"fraction of max_steps (a float in [0, 1)), e.g. {EXAMPLE}"),
        ({True: "fsdp:bf16-mixed"}, "precision schedule key True is neither an optimizer step (an int >= 0) nor a "
         f"fraction of max_steps (a float in [0, 1)), e.g. {EXAMPLE}"),
        ({0: "fsdp:bf16-mixed", 1.5: "fsdp:32-true"}, "precision schedule key 1.5 is neither an optimizer step (an "
         f"int >= 0) nor a fraction of max_steps (a float in [0, 1)), e.g. {EXAMPLE}"),
        ({2: "fsdp:bf16-mixed"}, "a precision schedule starts at step 0 with the precision the Trainer starts with: "
         f"its first key is 2; add 0: '<the Trainer's precision_plugin>' first, e.g. {EXAMPLE}"),
        ({0: "fsdp:bf16-mixed", 2: "deepspeed:32-true"}, "a precision schedule changes the precision of one backend, "
         "but it names ['deepspeed', 'fsdp']: write every entry for the backend of the Trainer's precision_plugin"),
        ({0: "fsdp:bf16-mixed", 2: "fsdp:bf16"}, "precision schedule entries 0 and 2 both name 'fsdp:bf16-mixed'; "
         "remove 2"),
    ],
)  # fmt: skip
def test_parse_errors(schedule: object, message: str) -> None:
    with pytest.raises(PrecisionScheduleError) as caught:
        parse(schedule)
    assert str(caught.value) == message


def test_a_name_that_is_no_plugin_name_is_reported_with_its_key() -> None:
    with pytest.raises(PrecisionScheduleError, match=r"^precision schedule entry 2: precision plugin name 'fsdp' "):
        PrecisionSchedule({0: "fsdp:bf16-mixed", 2: "fsdp"})


def test_fractions_resolve_against_max_steps() -> None:
    entries = parse({0: "fsdp:bf16-mixed", 0.9: "fsdp:32-true"})
    assert [s.step for s in resolve(entries, 1000)] == [0, 900]
    assert [s.step for s in resolve(parse({0: "fsdp:bf16-mixed", 0.7: "fsdp:32-true"}), 10)] == [0, 7]


@pytest.mark.parametrize(
    ("schedule", "max_steps", "message"),
    [
        ({0: "fsdp:bf16-mixed", 0.5: "fsdp:32-true"}, -1, "precision schedule key 0.5 is a fraction of max_steps, "
         "but the Trainer has max_steps=-1: pass Trainer(max_steps=N), or write the key as an optimizer step (an "
         "int)"),
        ({0: "fsdp:bf16-mixed", 4: "fsdp:32-true", 0.25: "fsdp:bf16-mixed"}, 8, "precision schedule keys must "
         "increase: 0.25 (step 2) comes after 4 (step 4); order the entries by step, each at a later step than the "
         "one before"),
        ({0: "fsdp:bf16-mixed", 0.01: "fsdp:32-true"}, 50, "precision schedule keys must increase: 0.01 (step 0) "
         "comes after 0 (step 0); order the entries by step, each at a later step than the one before"),
        ({0: "fsdp:bf16-mixed", 10: "fsdp:32-true"}, 4, "precision schedule key 10 is step 10, but the run ends at "
         "max_steps=4: the switch would never happen; use a step below 4"),
    ],
)  # fmt: skip
def test_resolve_errors(schedule: dict[object, str], max_steps: int, message: str) -> None:
    with pytest.raises(PrecisionScheduleError) as caught:
        resolve(parse(schedule), max_steps)
    assert str(caught.value) == message


def test_state_dict_records_the_schedule_and_its_position() -> None:
    schedule = PrecisionSchedule({0: "fsdp:bf16-mixed", 0.5: "fsdp:32-true"})
    schedule.switches = resolve(schedule.entries, 8)
    assert schedule.state_dict() == {
        "schedule": [[0, "fsdp:bf16-mixed"], [0.5, "fsdp:32-true"]],
        "steps": [0, 4],
        "position": 0,
    }


def test_a_checkpoint_of_another_schedule_is_refused() -> None:
    schedule = PrecisionSchedule({0: "fsdp:bf16-mixed", 0.5: "fsdp:32-true"})
    with pytest.raises(PrecisionScheduleError) as caught:
        schedule.load_state_dict({"schedule": [[0, "fsdp:bf16-mixed"], [3, "fsdp:32-true"]], "steps": [0, 3],
                                  "position": 1})  # fmt: skip
    assert str(caught.value) == (
        "the checkpoint was written under precision schedule [[0, 'fsdp:bf16-mixed'], [3, 'fsdp:32-true']] (steps "
        "[0, 3]), but this run has [[0, 'fsdp:bf16-mixed'], [0.5, 'fsdp:32-true']] (steps []): resume with the "
        "checkpoint's schedule, or start a new run (load only the weights) for another one"
    )


def test_both_namespaces_and_a_lazy_export() -> None:
    import lightning.pytorch
    import pytorch_lightning

    from precision_base.pytorch_lightning import PrecisionSchedule as ForPytorchLightning

    assert issubclass(PrecisionSchedule, lightning.pytorch.Callback)
    assert issubclass(ForPytorchLightning, pytorch_lightning.Callback)
    code = (
        "import sys, precision_base; assert 'torch' not in sys.modules; precision_base.PrecisionSchedule; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
