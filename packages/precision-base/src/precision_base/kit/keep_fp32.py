"""Per-module precision shared by the plugins: which modules ``keep_fp32=`` names, and their float32 forward.

``keep_fp32=("lm_head", torch.nn.LayerNorm)`` names *kept* modules by qualified-name pattern or by class. Patterns
match the end of a module's qualified name, dot-separated, with ``fnmatch`` wildcards: ``"lm_head"`` matches
``lm_head`` and ``model.lm_head``; ``"layers.*.norm"`` matches ``model.layers.3.norm``. A class matches its instances
(subclasses too). Inside a kept module ([`install_fp32_forward`][precision_base.kit.keep_fp32.install_fp32_forward])
``torch.autocast`` is off and floating inputs
are cast to float32, so it computes in float32. What else a plugin does for kept modules (parameter dtype, sharding,
gradient reduction) is the plugin's: see ``precision_fsdp.keep_fp32`` and ``precision_deepspeed.keep_fp32``.

Besides the user's entries, two **default rules** (each off unless the plugin turns it on) make modules kept:

* ``running_stats=True``: every layer whose running statistics are float buffers of its own
  ([`has_float_running_stats`][precision_base.kit.keep_fp32.has_float_running_stats]: ``BatchNorm1d/2d/3d``,
  ``SyncBatchNorm``, the lazy variants, ``InstanceNorm*``
  with ``track_running_stats=True``, and any module built like them). Under ``*-mixed`` their weight would be
  all-gathered or cast to fp16/bf16 while the running statistics stay float32, and the first forward fails with
  ``RuntimeError: expected scalar type BFloat16 but found Float``; kept, they run in float32 with float32 stats.
* ``hf_dtype=torch.float16`` / ``torch.bfloat16``: Hugging Face models' declared float32 modules
  ([`hf_keep_in_fp32`][precision_base.kit.keep_fp32.hf_keep_in_fp32]): ``_keep_in_fp32_modules`` when the low dtype is
  float16 and
  ``_keep_in_fp32_modules_strict`` for float16 and bfloat16, as transformers itself applies them when it loads a
  model in that dtype. Their names are matched like patterns, relative to the model that declares them (``"wo"``
  matches ``encoder.block.0.layer.1.DenseReluDense.wo`` of a T5 model held as ``self.net``).
"""

from __future__ import annotations

import fnmatch
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional, Union

import torch

from precision_base.kit.casting import cast_floating

KeepSpec = Union[str, type[torch.nn.Module]]
"""One ``keep_fp32`` entry: a qualified-name pattern or a module class."""

_PENDING = "_precision_keep_fp32_entry"
"""Attribute set by [`KeepFP32.mark`][precision_base.kit.keep_fp32.KeepFP32.mark] on a kept module found from the
model's root (value: the entry)."""

_MARK = "_precision_keep_fp32"
"""Attribute set on a kept module once its hooks are installed (value: the matching entry)."""


class KeepFP32:
    """The parsed ``keep_fp32`` option.

    Args:
        entries: qualified-name patterns (``str``) and/or ``torch.nn.Module`` subclasses; a single one is accepted.

    Raises:
        TypeError: an entry is neither a non-empty string nor a ``torch.nn.Module`` subclass.
    """

    def __init__(
        self,
        entries: Union[KeepSpec, Iterable[KeepSpec], None],
        *,
        running_stats: bool = False,
        hf_dtype: Optional[torch.dtype] = None,
    ) -> None:
        self.running_stats = running_stats
        """Default rule: modules with float running-statistics buffers are kept
        ([`has_float_running_stats`][precision_base.kit.keep_fp32.has_float_running_stats])."""
        self.hf_dtype = hf_dtype
        """Default rule: Hugging Face ``_keep_in_fp32_modules(_strict)`` for this low dtype (``None``: off)."""
        self._default_entries: set[str] = set()
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
        """Whether the user named any module (the default rules do not count)."""
        return bool(self.patterns or self.classes)

    @property
    def active(self) -> bool:
        """Whether anything can be kept: user entries or a default rule that is on."""
        return bool(self) or self.running_stats or self.hf_dtype in (torch.float16, torch.bfloat16)

    def is_default(self, entry: str) -> bool:
        """Whether ``entry`` (as [`kept`][precision_base.kit.keep_fp32.KeepFP32.kept] reports it) comes from a default
        rule, not from the user's entries."""
        return entry in self._default_entries

    def describe_defaults(self) -> list[str]:
        """The default rules that are on, as text (for dtype tables and ``precision-plugins show``)."""
        rules = []
        if self.running_stats:
            rules.append(RUNNING_STATS_RULE)
        if self.hf_dtype in (torch.float16, torch.bfloat16):
            rules.append(_hf_rule(self.hf_dtype))
        return rules

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
        [`mark`][precision_base.kit.keep_fp32.KeepFP32.mark] is kept whatever name it is seen under later."""
        marked: Optional[str] = getattr(module, _PENDING, None)
        if marked is not None:
            return marked
        for cls in self.classes:
            if isinstance(module, cls):
                return f"{cls.__module__}.{cls.__qualname__}"
        if name:
            for pattern in self.patterns:
                if _name_matches(name, pattern):
                    return repr(pattern)
        if self.running_stats and has_float_running_stats(module):
            return self._default(f"{type(module).__name__} (float running-statistics buffers)")
        return None

    def _default(self, entry: str) -> str:
        self._default_entries.add(entry)
        return entry

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

        def visit(name: str, module: torch.nn.Module, scopes: tuple[tuple[str, str, tuple[str, ...]], ...]) -> None:
            if module is not root and skip(module):
                return
            declared = hf_keep_in_fp32(module, self.hf_dtype)
            if declared:
                scopes = (*scopes, (name, type(module).__name__, declared))
            entry = self.match(name, module)
            if entry is None:
                entry = self._match_declared(name, scopes)
            if entry is not None:
                found.append((name, module, entry))
                return
            for child_name, child in module.named_children():
                visit(f"{name}.{child_name}" if name else child_name, child, scopes)

        visit("", root, ())
        return found

    def _match_declared(self, name: str, scopes: tuple[tuple[str, str, tuple[str, ...]], ...]) -> Optional[str]:
        for prefix, owner, patterns in scopes:
            relative = name[len(prefix) + 1 :] if prefix else name
            if not relative or (prefix and not name.startswith(prefix + ".")):
                continue
            for pattern in patterns:
                if _name_matches(relative, pattern):
                    return self._default(f"{owner}._keep_in_fp32_modules {pattern!r}")
        return None


RUNNING_STATS_RULE = (
    "layers whose running statistics are float buffers (BatchNorm1d/2d/3d, SyncBatchNorm, InstanceNorm with "
    "track_running_stats=True) are kept float32: float32 weight and running statistics, autocast off inside"
)
"""The running-statistics default rule, as the dtype tables state it."""


def _hf_rule(dtype: torch.dtype) -> str:
    which = (
        "_keep_in_fp32_modules and _keep_in_fp32_modules_strict"
        if dtype == torch.float16
        else "_keep_in_fp32_modules_strict (transformers applies _keep_in_fp32_modules for float16 only)"
    )
    return f"Hugging Face models' {which} are kept float32, names relative to the model that declares them"


def _name_matches(name: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, "*." + pattern)


def has_float_running_stats(module: torch.nn.Module) -> bool:
    """Whether ``module`` tracks running statistics in float buffers of its own: ``track_running_stats`` is true and
    its ``running_mean`` or ``running_var`` buffer is a floating tensor (torch's BatchNorm, SyncBatchNorm and
    InstanceNorm classes and their lazy variants, once they track statistics)."""
    if not getattr(module, "track_running_stats", False):
        return False
    own = dict(module.named_buffers(recurse=False))
    return any(own.get(n) is not None and own[n].is_floating_point() for n in ("running_mean", "running_var"))


def hf_keep_in_fp32(module: torch.nn.Module, dtype: Optional[torch.dtype]) -> tuple[str, ...]:
    """The module-name patterns a Hugging Face ``PreTrainedModel`` declares float32 for the low ``dtype``:
    ``_keep_in_fp32_modules`` for float16, ``_keep_in_fp32_modules_strict`` for float16 and bfloat16 (as
    transformers applies them when loading in that dtype); empty for other modules and dtypes."""
    if dtype not in (torch.float16, torch.bfloat16) or not hasattr(module, "_keep_in_fp32_modules"):
        return ()
    names: list[str] = []
    for attr in ("_keep_in_fp32_modules_strict",) + (("_keep_in_fp32_modules",) if dtype == torch.float16 else ()):
        declared = getattr(module, attr, None) or ()
        names.extend([declared] if isinstance(declared, str) else [str(n) for n in declared])
    return tuple(sorted(set(n for n in names if n)))


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


#: Callbacks of :func:`watch_forward_parameters`, by handle number.
_FORWARD_PARAMETER_WATCHERS: dict[int, Callable[[torch.nn.Module], None]] = {}
_WATCH_KEYS = itertools.count(1)


def watch_forward_parameters(callback: Callable[[torch.nn.Module], None]) -> Callable[[], None]:
    """Have ``callback(module)`` called from inside the ``forward`` of every module whose forward runs with other
    tensors in place of its own parameters (a plugin that computes a kept module in float32 from float32 copies of
    half-precision parameters, e.g. DeepSpeed's native mode): called after the swap, while
    ``module.parameters(recurse=False)`` yields the tensors the forward really uses. A forward pre-hook cannot see
    them (it runs before the swap). Returns the function that stops the watch. For observers such as
    [`precision_base.PrecisionAudit`][]."""
    key = next(_WATCH_KEYS)
    _FORWARD_PARAMETER_WATCHERS[key] = callback

    def stop() -> None:
        _FORWARD_PARAMETER_WATCHERS.pop(key, None)

    return stop


def forward_parameters_swapped(module: torch.nn.Module) -> None:
    """Tell every [`watch_forward_parameters`][precision_base.kit.keep_fp32.watch_forward_parameters] callback that
    ``module``'s forward now holds the parameters it
    computes with; call it inside ``forward``, right after the swap."""
    for callback in list(_FORWARD_PARAMETER_WATCHERS.values()):
        callback(module)


def iter_kept(module: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    """``(name, module)`` of every kept module under ``module`` (those the plugin installed its hooks on)."""
    for name, sub in module.named_modules():
        if is_kept(sub):
            yield name, sub
