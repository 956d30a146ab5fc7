"""Every error precision-base raises, in one place.

All of them derive from :class:`PrecisionPluginError`, and each also derives from the builtin a caller would
naturally catch (``ValueError`` for bad input, ``LookupError`` for a missing backend, ``ImportError`` for a
plugin that cannot be loaded), so ``except ValueError`` keeps working for code written against Lightning.
"""

from __future__ import annotations


class PrecisionPluginError(Exception):
    """Base class of every error raised by precision-base and its plugins."""


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
    """A plugin's info object does not match the schema of :class:`precision_base.PluginInfo`."""


class TrainerConfigurationError(PrecisionPluginError, ValueError):
    """The Trainer's arguments cannot work together with the requested precision plugin."""
