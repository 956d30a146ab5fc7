"""One shape for the fence of every plugin: a private or undocumented Lightning / torch / DeepSpeed symbol it uses.

Each plugin keeps every such touch point in its own ``_compat`` and lists them there as a tuple of
[`Fenced`][precision_base.kit.fence.Fenced]
(``FENCED``); its ``tests/test_compat.py`` checks each entry against the installed releases in milliseconds and
fails with one line naming the symbol that moved. An entry is checked in one of two ways:

* by name: ``module`` is imported and the dotted ``name`` looked up in it; with ``params``, the callable's (or
  property getter's) first parameters must be those, in order;
* by a ``check`` callable, for what a lookup cannot tell (a private attribute read from source, a behaviour relied
  on): it returns ``None`` when all is as expected, else one line saying what changed.

Pure Python: importing this module imports none of torch, Lightning and DeepSpeed; a check imports what it asks
about when it runs.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Optional

CHECK_ERRORS: tuple[type[Exception], ...] = (AttributeError, ImportError, TypeError, ValueError, OSError)
"""What a ``check`` may raise when the symbol moved; [`Fenced.problem`][precision_base.kit.fence.Fenced.problem] turns
it into the problem line."""


@dataclass(frozen=True)
class Fenced:
    """One private or undocumented symbol a plugin uses, or a Lightning method it overrides.

    Attributes:
        module: the module that defines it, e.g. ``"lightning.pytorch.strategies.deepspeed"``.
        name: a dotted path inside the module, e.g. ``"DeepSpeedStrategy._format_config"`` (with ``check``, any
            text naming what is checked, e.g. ``"FSDPPrecision.pre_backward/optimizer_step use self.scaler"``).
        params: the parameter names the plugin relies on, in order (``None``: not a callable, only its existence).
        why: what the plugin does with it (shown after a problem as ``needed for: ...``).
        optional: absent in some supported releases; the plugin detects it and takes another branch, so only its
            signature is checked, where it exists.
        check: instead of the lookup by name: returns ``None`` when the symbol is as expected, else one line saying
            what changed (an exception in [`CHECK_ERRORS`][precision_base.kit.fence.CHECK_ERRORS] counts as that line).
    """

    module: str
    name: str
    params: Optional[tuple[str, ...]] = None
    why: str = ""
    optional: bool = False
    check: Optional[Callable[[], Optional[str]]] = None

    @property
    def where(self) -> str:
        """``module.name``: how messages and test ids name the entry."""
        return f"{self.module}.{self.name}"

    def resolve(self) -> Any:
        """The object itself (raises ``ImportError``/``AttributeError`` when it moved)."""
        obj: Any = importlib.import_module(self.module)
        for part in self.name.split("."):
            obj = getattr(obj, part)
        return obj

    def problem(self) -> Optional[str]:
        """``None`` when the symbol is as expected, else one line naming it and saying what changed."""
        needed = f"; needed for: {self.why}" if self.why else ""
        if self.check is not None:
            try:
                found = self.check()
            except CHECK_ERRORS as exc:
                found = f"{type(exc).__name__}: {exc}"
            return None if found is None else f"{self.where}: {found}{needed}"
        try:
            obj = self.resolve()
        except (ImportError, AttributeError) as exc:
            if self.optional:
                return None
            return f"{self.where} is gone ({type(exc).__name__}: {exc}){needed}"
        if self.params is None:
            return None
        target: Any = obj.fget if isinstance(obj, property) else obj
        try:
            found_params = tuple(inspect.signature(target).parameters)
        except (TypeError, ValueError) as exc:
            return f"{self.where} has no inspectable signature ({exc}){needed}"
        if found_params[: len(self.params)] != self.params:
            return f"{self.where} takes {found_params}, expected {self.params}{needed}"
        return None


def fenced_problems(entries: Iterable[Fenced]) -> list[str]:
    """One line for every entry of ``entries`` that is missing or not as expected."""
    return [problem for problem in (entry.problem() for entry in entries) if problem is not None]


def missing_params(func: Any, *names: str) -> Optional[str]:
    """For a ``check``: ``None`` when ``func`` takes every parameter in ``names`` (in any order), else one line
    naming the missing ones and the signature found."""
    signature = inspect.signature(func)
    missing = [n for n in names if n not in signature.parameters]
    return f"parameters {missing} missing from signature {signature}" if missing else None


__all__ = ["CHECK_ERRORS", "Fenced", "fenced_problems", "missing_params"]
