"""Recording the collectives a backend issues, by wrapping ``torch.distributed`` functions while an audit runs.

Which callables are wrapped, and why there (each is restored by
[`CollectiveTap.remove`][precision_base.audit.collectives.CollectiveTap.remove]):

* the functions of ``torch.distributed`` (FSDP2 calls them as ``dist.all_gather_single(...)``,
  ``dist.reduce_scatter_single(...)``, ``dist.all_reduce(...)`` through the module attribute, and older torch
  releases as ``dist.all_gather_into_tensor`` / ``dist.reduce_scatter_tensor``);
* the same functions of ``torch.distributed.distributed_c10d`` (DeepSpeed's comm layer calls some of them there);
* the references to those functions a backend's engine keeps elsewhere, as its plugin names them
  ([`audit_collectives`][precision_base.contract.PrecisionPlugin.audit_collectives]: DeepSpeed's comm layer caches
  ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` when it starts, so wrapping the module attribute alone
  would miss ZeRO's all-gathers).

A call made while another recorded call is running (a wrapper calling a wrapped function) is recorded once, at the
outermost level. Collectives issued from C++ (DDP's ``Reducer``) do not pass through Python and are not seen.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import torch

REDUCTIONS: Final[tuple[str, ...]] = (
    "all_reduce",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "all_reduce_coalesced",
)
"""Collectives that reduce (their floating tensors are compared with the table's ``reduction``)."""

GATHERS: Final[tuple[str, ...]] = (
    "all_gather",
    "all_gather_single",
    "all_gather_into_tensor",
    "_all_gather_base",
    "broadcast",
    "all_to_all_single",
)
"""Collectives that move values without reducing (compared with the dtype of the parameters' forward copy)."""

_MARK: Final[str] = "__precision_audit_wrapper__"


@dataclass(frozen=True)
class Collective:
    """One recorded call: its name, the dtype of its payload, the payload's bytes on this rank and its elements."""

    name: str
    dtype: torch.dtype
    nbytes: int
    numel: int

    @property
    def kind(self) -> str:
        """``"reduction"`` or ``"gathering"``."""
        return "reduction" if self.name in REDUCTIONS else "gathering"


def _payload(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors a call sends: the input of ``*_single``/``*_tensor``/``_base`` forms, the tensor of in-place
    forms, and the list of the list forms."""
    values = list(args) + list(kwargs.values())
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    lists = [v for v in values if isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v)]
    if name in ("all_reduce", "reduce", "broadcast"):
        return tensors[:1]
    if name == "all_reduce_coalesced":
        return list(lists[0]) if lists else []
    if name in ("all_gather", "reduce_scatter"):
        return tensors[:1] if name == "all_gather" else [t for t in (lists[-1] if lists else [])]
    # output first, input second (all_gather_single, reduce_scatter_single, *_tensor, *_base, all_to_all_single)
    named = kwargs.get("input") if "input" in kwargs else kwargs.get("input_tensor")
    if isinstance(named, torch.Tensor):
        return [named]
    return tensors[1:2] if len(tensors) >= 2 else tensors[:1]


class CollectiveTap:
    """Wraps the collectives while installed; `calls` holds what was recorded, in call order."""

    def __init__(self) -> None:
        self.calls: list[Collective] = []
        self._saved: list[tuple[Any, str, Any]] = []
        self._local = threading.local()
        self.recording = True

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        tap = self

        def recorded(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(tap._local, "depth", 0)
            if depth == 0 and tap.recording:
                for tensor in _payload(name, args, kwargs):
                    size = tensor.numel()
                    tap.calls.append(Collective(name, tensor.dtype, size * tensor.element_size(), size))
            tap._local.depth = depth + 1
            try:
                return original(*args, **kwargs)
            finally:
                tap._local.depth = depth

        recorded.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(recorded, _MARK, True)
        recorded.__name__ = getattr(original, "__name__", name)
        return recorded

    def _patch(self, owner: Any, attribute: str, name: str) -> None:
        original = getattr(owner, attribute, None)
        if original is None or getattr(original, _MARK, False):
            return  # absent here, or already wrapped (by this tap or another audit running at the same time)
        self._saved.append((owner, attribute, original))
        setattr(owner, attribute, self._wrap(name, original))

    def install(self, elsewhere: Iterable[tuple[Any, str, str]] = ()) -> None:
        """Wrap every collective named in [`REDUCTIONS`][precision_base.audit.collectives.REDUCTIONS] and
        [`GATHERS`][precision_base.audit.collectives.GATHERS] that exists here, and each reference ``elsewhere``
        names (``(owner, attribute, collective)``, from the plugin's
        [`audit_collectives`][precision_base.contract.PrecisionPlugin.audit_collectives])."""
        references = list(elsewhere)
        unknown = [name for _, _, name in references if name not in REDUCTIONS + GATHERS]
        if unknown:  # checked before anything is wrapped
            raise ValueError(f"audit_collectives names {unknown[0]!r}, which is not one of {REDUCTIONS + GATHERS}")
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        for name in REDUCTIONS + GATHERS:
            for owner in (dist, c10d):
                if hasattr(owner, name):
                    self._patch(owner, name, name)
        for owner, attribute, name in references:
            if callable(getattr(owner, attribute, None)):
                self._patch(owner, attribute, name)

    def remove(self) -> None:
        """Put every wrapped callable back (in reverse order, so a doubly saved one ends as the original)."""
        while self._saved:
            owner, attribute, original = self._saved.pop()
            setattr(owner, attribute, original)


__all__ = ["GATHERS", "REDUCTIONS", "Collective", "CollectiveTap"]
