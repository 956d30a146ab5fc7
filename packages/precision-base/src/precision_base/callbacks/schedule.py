"""``PrecisionSchedule``: a Lightning callback that changes the run's precision at given optimizer steps.

A schedule maps when to what: an ``int`` key is an optimizer step (``trainer.global_step``), a ``float`` key in
``[0, 1)`` a fraction of ``Trainer(max_steps=...)``; each value is a plugin name of the Trainer's backend. The
first key is ``0`` and names the precision the Trainer starts with::

    schedule = PrecisionSchedule({0: "fsdp:bf16-mixed", 0.9: "fsdp:32-true"})  # an fp32 tail: the last 10%
    trainer = precision_base.Trainer(precision_plugin="fsdp:bf16-mixed", max_steps=1000, callbacks=[schedule])

The entry at step ``k`` is in effect from the ``k``-th optimizer step on (steps are counted from 0): the callback
switches after the optimizer step that makes ``global_step == k``, through the plugin's ``switch_precision``
(precision-fsdp: [`precision_fsdp.schedule`][]). Everything is checked at ``setup``, before any step: the first
entry against the Trainer's plugin, the backend of every entry, the steps against ``max_steps``, and every switch
against the plugin (``precision_switch_problem``), so a schedule that cannot run fails before training.

Resume-safe: `state_dict` records the schedule (keys, specs, resolved steps) and its position; resuming a
checkpoint written after a switch switches the plugin back to that precision while the callbacks are restored,
which Lightning does before the precision plugin's own state (``on_load_checkpoint``), so the plugin sees the
precision it saved. Resuming with another schedule than the checkpoint's is an error.

Written once as [`PrecisionScheduleImpl`][precision_base.callbacks.schedule.PrecisionScheduleImpl] (no Lightning base)
and built per namespace: ``precision_base.PrecisionSchedule`` for ``lightning.pytorch``,
``precision_base.pytorch_lightning.PrecisionSchedule`` for ``pytorch_lightning``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import lightning.pytorch as pl
from typing_extensions import override

from precision_base.errors import PrecisionPluginError, PrecisionScheduleError
from precision_base.spec import PluginSpec, parse_spec

if TYPE_CHECKING:
    _CallbackBase = pl.Callback
else:
    _CallbackBase = object

Key = Union[int, float]
"""An optimizer step (``int``) or a fraction of ``max_steps`` (``float`` in ``[0, 1)``)."""

_EXAMPLE = '{0: "fsdp:bf16-mixed", 0.9: "fsdp:32-true"}'


@dataclass(frozen=True)
class Switch:
    """One entry of a resolved schedule: from optimizer step ``step`` on, the plugin runs ``spec``."""

    key: Key
    spec: PluginSpec
    step: int


def parse(schedule: object) -> tuple[tuple[Key, PluginSpec], ...]:
    """Check a schedule's shape and names (nothing about the Trainer) and return its entries in order.

    Raises:
        PrecisionScheduleError: not a non-empty mapping; a key that is no step or fraction; no key 0; keys that do
            not increase (in the order written); a value that is no plugin name; entries of several backends; two
            neighbours with the same precision.
    """
    if not isinstance(schedule, Mapping) or not schedule:
        raise PrecisionScheduleError(
            f"a precision schedule is a non-empty mapping from optimizer step (int) or fraction of max_steps (float "
            f"in [0, 1)) to a plugin name, e.g. {_EXAMPLE}; got {schedule!r}"
        )
    entries: list[tuple[Key, PluginSpec]] = []
    for key, value in schedule.items():
        is_step = isinstance(key, int) and not isinstance(key, bool) and key >= 0
        is_fraction = isinstance(key, float) and 0.0 <= key < 1.0
        if not (is_step or is_fraction):
            raise PrecisionScheduleError(
                f"precision schedule key {key!r} is neither an optimizer step (an int >= 0) nor a fraction of "
                f"max_steps (a float in [0, 1)), e.g. {_EXAMPLE}"
            )
        try:
            spec = parse_spec(value)
        except PrecisionPluginError as exc:
            raise PrecisionScheduleError(f"precision schedule entry {key!r}: {exc}") from None
        entries.append((key, spec))
    first_key = entries[0][0]
    if first_key != 0:
        raise PrecisionScheduleError(
            f"a precision schedule starts at step 0 with the precision the Trainer starts with: its first key is "
            f"{first_key!r}; add 0: '<the Trainer's precision_plugin>' first, e.g. {_EXAMPLE}"
        )
    backends = sorted({spec.backend for _, spec in entries})
    if len(backends) > 1:
        raise PrecisionScheduleError(
            f"a precision schedule changes the precision of one backend, but it names {backends}: write every "
            f"entry for the backend of the Trainer's precision_plugin"
        )
    for (key, spec), (next_key, next_spec) in itertools.pairwise(entries):
        if spec.precision == next_spec.precision:
            raise PrecisionScheduleError(
                f"precision schedule entries {key!r} and {next_key!r} both name {str(spec)!r}; remove {next_key!r}"
            )
    return tuple(entries)


def _fraction_step(fraction: float, max_steps: int) -> int:
    return math.floor(fraction * max_steps + 1e-9)


def resolve(entries: tuple[tuple[Key, PluginSpec], ...], max_steps: int) -> tuple[Switch, ...]:
    """The optimizer step of each entry, given ``Trainer(max_steps=...)`` (``-1``: not set).

    Raises:
        PrecisionScheduleError: a fraction without ``max_steps``; steps that do not strictly increase; a switch at or
            after ``max_steps`` (it would never run).
    """
    switches: list[Switch] = []
    for key, spec in entries:
        if isinstance(key, float):
            if max_steps is None or max_steps < 1:
                raise PrecisionScheduleError(
                    f"precision schedule key {key!r} is a fraction of max_steps, but the Trainer has max_steps="
                    f"{max_steps}: pass Trainer(max_steps=N), or write the key as an optimizer step (an int)"
                )
            step = _fraction_step(key, max_steps)
        else:
            step = key
        switches.append(Switch(key, spec, step))
    for before, after in itertools.pairwise(switches):
        if after.step <= before.step:
            raise PrecisionScheduleError(
                f"precision schedule keys must increase: {after.key!r} (step {after.step}) comes after {before.key!r} "
                f"(step {before.step}); order the entries by step, each at a later step than the one before"
            )
    late = [s for s in switches[1:] if max_steps is not None and 0 < max_steps <= s.step]
    if late:
        raise PrecisionScheduleError(
            f"precision schedule key {late[0].key!r} is step {late[0].step}, but the run ends at max_steps="
            f"{max_steps}: the switch would never happen; use a step below {max_steps}"
        )
    return tuple(switches)


class PrecisionScheduleImpl(_CallbackBase):
    """Change the Trainer's precision at given optimizer steps (see the module docstring).

    Args:
        schedule: ``{step or fraction of max_steps: plugin name}``, the first key 0, e.g. ``{0: "fsdp:bf16-mixed",
            0.9: "fsdp:32-true"}``.

    Attributes:
        position: index of the schedule entry in effect (0 before the first switch).
        switched_at: ``{step: spec}`` of the switches this callback made in this process.

    Raises:
        PrecisionScheduleError: here for the schedule's shape ([`parse`][precision_base.callbacks.schedule.parse]); at
            ``setup`` for everything that depends on the Trainer: the first entry is not the Trainer's plugin, another
            backend, fractions without ``max_steps``, steps that do not increase or come too late, a precision the
            plugin does not offer, a plugin without precision switches, or a switch the plugin refuses (its reason is
            quoted); when a checkpoint with another schedule is resumed.
    """

    def __init__(self, schedule: Mapping[Key, str]) -> None:
        super().__init__()
        self.entries = parse(schedule)
        self.switches: tuple[Switch, ...] = ()
        self.position = 0
        self.switched_at: dict[int, str] = {}
        self._trainer: Any = None

    @property
    def precision(self) -> str:
        """The plugin name of the entry in effect."""
        return str(self.entries[self.position][1])

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """``fit``: check the schedule against the Trainer and its plugin (see the class's Raises)."""
        if stage != "fit":
            return
        plugin = trainer.strategy.precision_plugin
        spec = str(getattr(plugin, "spec", type(plugin).__name__))
        first = self.entries[0][1]
        backend = getattr(plugin, "backend", None)
        if first.backend != backend:
            raise PrecisionScheduleError(
                f"the precision schedule names backend {first.backend!r}, but the Trainer's precision plugin is "
                f"{spec!r}: write the schedule for {backend!r} or pass precision_plugin={str(first)!r}"
            )
        if self.position == 0 and str(first) != spec:
            raise PrecisionScheduleError(
                f"the precision schedule starts with {str(first)!r}, but the Trainer's precision plugin is {spec!r}: "
                f"pass precision_plugin={str(first)!r} to the Trainer, or start the schedule with 0: {spec!r}"
            )
        self.switches = resolve(self.entries, int(trainer.max_steps))
        asks = getattr(plugin, "precision_switch_problem", None)
        for before, after in itertools.pairwise(self.switches):
            try:
                target = plugin.canonical_precision(after.spec.precision)
            except ValueError as exc:
                raise PrecisionScheduleError(f"precision schedule entry {after.key!r}: {exc}") from None
            reason = None if asks is None else asks(target, trainer.strategy, before.spec.precision)
            if asks is None:
                reason = f"{type(plugin).__name__} has no precision switch (precision_switch_problem/switch_precision)"
            if reason is not None:
                raise PrecisionScheduleError(
                    f"precision schedule entry {after.key!r} (step {after.step}): cannot switch {str(before.spec)!r} "
                    f"-> {str(after.spec)!r} during a run: {reason}"
                )
        self._trainer = trainer
        if self.position > 0:  # state loaded before setup (a custom loop): switch now, before the model is sharded
            self._switch(trainer, self.position)

    @override
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After the optimizer step that reaches a scheduled step: switch, so that the next step runs the entry."""
        self._advance(trainer, int(trainer.global_step))

    def _advance(self, trainer: Any, step: int) -> None:
        while self.position + 1 < len(self.switches) and self.switches[self.position + 1].step <= step:
            target = self.switches[self.position + 1]
            self._switch(trainer, self.position + 1)
            self.switched_at[step] = str(target.spec)
            self._say(trainer, f"PrecisionSchedule: from step {step} on, {target.spec} (entry {target.key!r})")

    def _switch(self, trainer: Any, position: int) -> None:
        plugin = trainer.strategy.precision_plugin
        plugin.switch_precision(self.entries[position][1].precision, trainer.lightning_module)
        self.position = position

    def _say(self, trainer: Any, text: str) -> None:
        from precision_base.namespaces import lightning_root, namespace_of

        lightning_root(namespace_of(trainer) or "lightning.pytorch").utilities.rank_zero_info(text)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The schedule as written (keys and specs), its resolved steps and the position in effect."""
        return {
            "schedule": [[key, str(spec)] for key, spec in self.entries],
            "steps": [s.step for s in self.switches],
            "position": self.position,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume: check that the checkpoint's schedule is this one, then switch to the precision it had reached.

        Raises:
            PrecisionScheduleError: the checkpoint was written under another schedule (or the same keys resolved
                to other steps, e.g. fractions with another ``max_steps``).
        """
        mine = self.state_dict()
        theirs = {"schedule": [list(e) for e in state_dict.get("schedule", [])], "steps": state_dict.get("steps")}
        if theirs["schedule"] != mine["schedule"] or (self.switches and theirs["steps"] != mine["steps"]):
            raise PrecisionScheduleError(
                f"the checkpoint was written under precision schedule {theirs['schedule']} (steps {theirs['steps']}), "
                f"but this run has {mine['schedule']} (steps {mine['steps']}): resume with the checkpoint's schedule, "
                "or start a new run (load only the weights) for another one"
            )
        position = int(state_dict.get("position", 0))
        if position != self.position and self._trainer is not None:
            self._switch(self._trainer, position)
            self._say(self._trainer, f"PrecisionSchedule: resumed under {self.precision} (entry {position})")
        self.position = position


class PrecisionSchedule(PrecisionScheduleImpl, pl.Callback):
    """[`PrecisionScheduleImpl`][precision_base.callbacks.schedule.PrecisionScheduleImpl] for
    ``lightning.pytorch.Trainer`` (``precision_base.PrecisionSchedule``).

    Example::

        schedule = PrecisionSchedule({0: "fsdp:bf16-mixed", 0.9: "fsdp:32-true"})
        trainer = precision_base.Trainer(precision_plugin="fsdp:bf16-mixed", max_steps=1000, callbacks=[schedule])
    """


__all__ = ["Key", "PrecisionSchedule", "PrecisionScheduleImpl", "Switch", "parse", "resolve"]
