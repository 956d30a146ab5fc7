"""Every private Lightning symbol precision-base touches, in one place.

Each is looked up in the Lightning namespace in use (``lightning.pytorch`` or ``pytorch_lightning``) when called.
``tests/test_compat.py`` checks that each exists with the expected signature.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argparse import Namespace


def parse_env_variables(namespace: str, cls: type) -> Namespace:
    """Lightning's reader of ``PL_<CLASS>_<ARGUMENT>`` environment defaults for ``cls``.

    Private in Lightning: ``<namespace>.utilities.argparse._parse_env_variables(cls)``. It reads one variable per
    parameter of ``inspect.signature(cls)``, skips unset and empty ones, and turns values into Python literals
    with ``ast.literal_eval`` where they parse (else keeps the string).
    """
    module: Any = importlib.import_module(f"{namespace}.utilities.argparse")
    return module._parse_env_variables(cls)  # type: ignore[no-any-return]


def torch_dispatch_mode() -> type:
    """torch's base class of Python dispatch modes, for the audit's float8 watch ([`precision_base.audit`][]).

    Private in torch: ``torch.utils._python_dispatch.TorchDispatchMode`` (public in spirit: its docs teach subclassing
    it; ``__torch_dispatch__(func, types, args, kwargs)`` sees every aten op below autograd while it is entered).
    """
    module: Any = importlib.import_module("torch.utils._python_dispatch")
    return module.TorchDispatchMode  # type: ignore[no-any-return]


def cpu_native_half() -> tuple[bool, bool]:
    """Whether this CPU computes bfloat16 and float16 natively (``(bf16, fp16)``), for ``precision-plugins recommend``.

    Private in torch: ``torch.cpu._is_avx512_bf16_supported()``, ``torch.cpu._is_amx_tile_supported()`` and
    ``torch.cpu._is_amx_fp16_supported()`` (x86 CPUID checks; ``False`` on other CPUs). bfloat16: AVX512-BF16 or AMX;
    float16: AMX-FP16. A function that this torch lacks counts as ``False``. Imports torch.
    """
    import torch

    def ask(name: str) -> bool:
        check = getattr(torch.cpu, name, None)
        return bool(check()) if callable(check) else False

    return ask("_is_avx512_bf16_supported") or ask("_is_amx_tile_supported"), ask("_is_amx_fp16_supported")


def caller_frames(skip: int, limit: int) -> list[tuple[str, str]]:
    """``(module name, function name)`` of up to ``limit`` frames on the call stack, starting ``skip`` frames above
    the caller of this function (``skip=0``: that caller itself), innermost first.

    Private in CPython: ``sys._getframe`` (implementation-specific; where it is missing, or the stack is shorter
    than ``skip``, the answer is ``[]``). Used by [`precision_base.doors.identity.check_caller`][] to tell which door's
    Lightning code calls into a plugin.
    """
    import sys

    getframe = getattr(sys, "_getframe", None)
    if getframe is None:
        return []
    try:
        frame = getframe(skip + 1)
    except ValueError:
        return []
    out: list[tuple[str, str]] = []
    while frame is not None and len(out) < limit:
        out.append((str(frame.f_globals.get("__name__", "")), frame.f_code.co_name))
        frame = frame.f_back
    return out
