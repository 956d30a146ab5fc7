"""Every error and warning precision-base defines, in one place.

All of them derive from [`PrecisionPluginError`][precision_base.errors.PrecisionPluginError], and each also derives from
the builtin a caller would
naturally catch (``ValueError`` for bad input, ``LookupError`` for a missing backend, ``ImportError`` for a
plugin that cannot be loaded), so ``except ValueError`` keeps working for code written against Lightning.
The one exception is [`LaunchError`][precision_base.errors.LaunchError], raised by the conformance kit's launcher
([`precision_base.testing.ranks`][]), a plain ``RuntimeError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from precision_base.doors.table import Door

MAX_SHOWN = 80
"""The most characters of a user's input that an error message repeats (longer input is shortened)."""


class PrecisionPluginError(Exception):
    """Base class of every error raised by precision-base and its plugins."""


def shorten(text: str, limit: int = MAX_SHOWN) -> str:
    """``repr`` of ``text`` cut to about ``limit`` characters, saying how long the whole was.

    ``text`` may be a ``str`` subclass with hostile methods: only ``str``'s own methods are used on it.
    """
    plain = str.__str__(text)  # a true str copy; a subclass's methods never run
    if len(plain) <= limit:
        return repr(plain)
    return f"{plain[: limit - 20]!r}... ({len(plain)} characters)"


def describe(value: object, limit: int = MAX_SHOWN) -> str:
    """A bounded description of any object for an error message, without running the object's own code.

    Strings (and subclasses) and ints show their value, shortened; other builtin scalars their ``repr``;
    anything else its type name, since its ``__repr__`` may raise, hang or return megabytes.
    """
    kind = type(value)
    if issubclass(kind, str):
        return shorten(value, limit)  # type: ignore[arg-type]
    if issubclass(kind, int):
        number = int.__index__(value)  # type: ignore[arg-type]
        if number.bit_length() > 200:
            return f"an int of about {int(number.bit_length() * 0.30103) + 1} digits"
        return repr(number)
    if kind in (float, complex, bytes, type(None)):
        text = repr(value)
        return text if len(text) <= limit else text[: limit - 3] + "..."
    return f"an object of type {type_name(value)}"


def type_name(value: object) -> str:
    """The (shortened) name of ``value``'s type; never raises."""
    try:
        name = type.__dict__["__qualname__"].__get__(type(value))
    except Exception:  # a metaclass that breaks even type's own descriptor
        return "<unnamed type>"
    name = str.__str__(name) if isinstance(name, str) else "<unnamed type>"
    return name if len(name) <= 60 else name[:57] + "..."


class PrecisionPluginWarning(UserWarning):
    """A warning about the plugin set-up (for example, one registration replacing another)."""


class InvalidSpecError(PrecisionPluginError, ValueError):
    """A plugin name does not follow the ``"<backend>:<precision>"`` grammar."""


class SpecTypeError(PrecisionPluginError, TypeError):
    """A plugin name or precision was given as something other than a string (or an int alias)."""


class UnknownBackendError(PrecisionPluginError, LookupError):
    """No installed plugin distribution registers the requested backend."""

    def __str__(self) -> str:  # LookupError would otherwise repr() a single argument like KeyError does
        return str(self.args[0]) if self.args else ""


class BackendDisabledError(UnknownBackendError):
    """The backend is installed but disabled through the ``PRECISION_PLUGINS_DISABLE`` variable."""


class RegistrationError(PrecisionPluginError, ValueError):
    """An in-process registration was refused (for example, it claimed an installed distribution's name)."""


class UnsupportedPrecisionError(PrecisionPluginError, ValueError):
    """The backend exists but does not offer the requested precision."""


class DuplicateBackendError(PrecisionPluginError, RuntimeError):
    """Two distributions register the same backend name; neither wins silently."""


class PluginLoadError(PrecisionPluginError, ImportError):
    """A plugin's code (or its info object) failed to import; the original exception is chained."""


class PluginRequirementError(PrecisionPluginError, ImportError):
    """A plugin's declared requirements are not met by the installed environment."""


class ContractVersionError(PrecisionPluginError, ImportError):
    """A plugin was built for a contract version this precision-base does not speak."""


class InvalidPluginInfoError(PrecisionPluginError, TypeError):
    """A plugin's info object does not match the schema of [`precision_base.PluginInfo`][]."""


class TrainerConfigurationError(PrecisionPluginError, ValueError):
    """The Trainer's arguments cannot work together with the requested precision plugin."""


class FabricNotSupportedError(PrecisionPluginError, ValueError):
    """The backend is installed but registers no Fabric class (its ``PluginInfo.fabric_class`` is empty)."""


class PrecisionAuditError(PrecisionPluginError, RuntimeError):
    """A strict [`precision_base.PrecisionAudit`][] found dtypes that differ from the plugin's table (raised on
    every rank); the message lists the rows that differ."""


class OverflowStormError(PrecisionPluginError, RuntimeError):
    """Too many optimizer steps in a row were skipped because the gradients held inf or NaN.

    Raised by both plugins (``precision_fsdp``, ``precision_deepspeed``) once ``max_skipped_steps`` is reached.
    """


class PrecisionScheduleError(PrecisionPluginError, ValueError):
    """A precision schedule that cannot run: the message names what was wrong and what would be right."""


class PrecisionAuditWarning(PrecisionPluginWarning):
    """The audit found dtypes that differ from the plugin's table (``strict=False``)."""


class WrongDoorError(TrainerConfigurationError):
    """A plugin instance built for a Trainer was handed to Fabric, or one built for Fabric to a Trainer.

    Attributes:
        plugin: the instance that was refused.
        door: ``"Trainer"`` or ``"Fabric"``, the door it was handed to.
    """

    def __init__(self, message: str, *, plugin: Any, door: Door) -> None:
        super().__init__(message)
        self.plugin = plugin
        self.door = door


class StaleOptimizerError(PrecisionPluginError, RuntimeError):
    """An optimizer holds parameters that the strategy replaced when it set the model up (e.g. FSDP2's
    ``fully_shard``): stepping it would change tensors the model no longer uses, and the loss would stay flat."""


class TuneTargetError(PrecisionPluginError, ValueError):
    """A precision search ([`precision_base.tune_precision`][precision_base.tune.search.tune_precision]) cannot
    measure the model: its factory cannot be imported or raises, or the ``32-true`` reference cannot train it."""


class NoGradientWarning(PrecisionPluginWarning):
    """After a backward, no trainable parameter of the optimizers has a gradient: the step changes nothing."""


class LaunchError(RuntimeError):
    """A rank failed, timed out or wrote no result; the message carries the tail of every rank's log."""
