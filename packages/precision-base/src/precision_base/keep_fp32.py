"""Per-module precision shared by the plugins: which modules ``keep_fp32=`` names, and their float32 forward.

``keep_fp32=("lm_head", torch.nn.LayerNorm)`` names *kept* modules by qualified-name pattern or by class. Patterns
match the end of a module's qualified name, dot-separated, with ``fnmatch`` wildcards: ``"lm_head"`` matches
``lm_head`` and ``model.lm_head``; ``"layers.*.norm"`` matches ``model.layers.3.norm``. A class matches its instances
(subclasses too). Inside a kept module (:func:`install_fp32_forward`) ``torch.autocast`` is off and floating inputs
are cast to float32, so it computes in float32. What else a plugin does for kept modules (parameter dtype, sharding,
gradient reduction) is the plugin's: see ``precision_fsdp.keep_fp32`` and ``precision_deepspeed.keep_fp32``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional, Union

import torch

from precision_base.casting import cast_floating

KeepSpec = Union[str, type[torch.nn.Module]]
"""One ``keep_fp32`` entry: a qualified-name pattern or a module class."""

_PENDING = "_precision_keep_fp32_entry"
"""Attribute set by :meth:`KeepFP32.mark` on a kept module found from the model's root (value: the entry)."""

_MARK = "_precision_keep_fp32"
"""Attribute set on a kept module once its hooks are installed (value: the matching entry)."""


class KeepFP32:
    """The parsed ``keep_fp32`` option.

    Args:
        entries: qualified-name patterns (``str``) and/or ``torch.nn.Module`` subclasses; a single one is accepted.

    Raises:
        TypeError: an entry is neither a non-empty string nor a ``torch.nn.Module`` subclass.
    """

    def __init__(self, entries: Union[KeepSpec, Iterable[KeepSpec], None]) -> None:
        if entries is None:
            entries = ()
        elif isinstance(entries, (str, type)):
            entries = (entries,)
        items: list[KeepSpec] = list(entries)
        for item in items:
            ok_str = isinstance(item, str) and item.strip() != ""
            ok_cls = isinstance(item, type) and issubclass(item, torch.nn.Module)
            if not (ok_str or ok_cls):
                raise TypeError(
                    f"keep_fp32 entries must be module name patterns (non-empty str, e.g. 'lm_head' or "
                    f"'layers.*.norm') or torch.nn.Module subclasses (e.g. torch.nn.LayerNorm); got {item!r}"
                )
        self.patterns: tuple[str, ...] = tuple(i.strip() for i in items if isinstance(i, str))
        self.classes: tuple[type[torch.nn.Module], ...] = tuple(i for i in items if isinstance(i, type))

    def __bool__(self) -> bool:
        return bool(self.patterns or self.classes)

    def describe(self) -> list[str]:
        """The entries as text: patterns quoted, classes by qualified name."""
        return [repr(p) for p in self.patterns] + [f"{c.__module__}.{c.__qualname__}" for c in self.classes]

    def facts(self, *, reduction: str, outputs: str) -> dict[str, str]:
        """What ``precision-plugins show`` says about the kept modules: names and the dtype of each role."""
        return {
            "modules": ", ".join(self.describe()),
            "parameters": "float32",
            "compute": "float32 (autocast off inside, floating inputs cast to float32)",
            "reduction": reduction,
            "outputs": outputs,
        }

    def match(self, name: str, module: torch.nn.Module) -> Optional[str]:
        """The entry that makes ``module`` (qualified name ``name``) kept, as text, or ``None``. A module marked by
        :meth:`mark` is kept whatever name it is seen under later."""
        marked: Optional[str] = getattr(module, _PENDING, None)
        if marked is not None:
            return marked
        for cls in self.classes:
            if isinstance(module, cls):
                return f"{cls.__module__}.{cls.__qualname__}"
        if name:
            for pattern in self.patterns:
                if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, "*." + pattern):
                    return repr(pattern)
        return None

    def mark(self, root: torch.nn.Module) -> None:
        """Match names relative to ``root`` (the whole model) now and remember the kept modules, so that a kept
        module later handed to ``fully_shard`` on its own (with no name around it) is still recognised."""
        for _name, module, entry in self.kept(root):
            setattr(module, _PENDING, entry)

    def kept(
        self, root: torch.nn.Module, skip: Callable[[torch.nn.Module], bool] = lambda m: False
    ) -> list[tuple[str, torch.nn.Module, str]]:
        """The outermost kept modules under and including ``root``: ``(name, module, entry)``, innermost-first order
        does not matter since none contains another. Subtrees for which ``skip(module)`` is true are not entered."""
        found: list[tuple[str, torch.nn.Module, str]] = []

        def visit(name: str, module: torch.nn.Module) -> None:
            if module is not root and skip(module):
                return
            entry = self.match(name, module)
            if entry is not None:
                found.append((name, module, entry))
                return
            for child_name, child in module.named_children():
                visit(f"{name}.{child_name}" if name else child_name, child)

        visit("", root)
        return found


def is_kept(module: torch.nn.Module) -> bool:
    """Whether the plugin already made ``module`` a kept (float32) module."""
    return getattr(module, _MARK, None) is not None


def install_fp32_forward(
    module: torch.nn.Module, entry: str, device_type: Callable[[], str], out_dtype: Optional[torch.dtype]
) -> None:
    """Make ``module``'s forward run without autocast on float32 inputs; cast floating outputs to ``out_dtype``
    (``None``: leave them float32). Idempotent."""
    if is_kept(module):
        return
    setattr(module, _MARK, entry)
    entered: list[Any] = []

    def before(mod: torch.nn.Module, args: Any, kwargs: Any) -> tuple[Any, Any]:
        context = torch.autocast(device_type(), enabled=False)
        context.__enter__()  # type: ignore[no-untyped-call]
        entered.append(context)
        return cast_floating(args, torch.float32), cast_floating(kwargs, torch.float32)

    def after(mod: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> Any:
        if entered:
            entered.pop().__exit__(None, None, None)
        return None if out_dtype is None else cast_floating(output, out_dtype)

    module.register_forward_pre_hook(before, with_kwargs=True)
    module.register_forward_hook(after, with_kwargs=True, always_call=True)


def iter_kept(module: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    """``(name, module)`` of every kept module under ``module`` (those the plugin installed its hooks on)."""
    for name, sub in module.named_modules():
        if is_kept(sub):
            yield name, sub
