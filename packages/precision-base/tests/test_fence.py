"""``precision_base.kit.fence``: the one ``Fenced`` shape both plugins' ``_compat`` use (pure Python, no torch)."""

from __future__ import annotations

import subprocess
import sys

from precision_base.kit.fence import Fenced, fenced_problems, missing_params


def _two(a: int, b: int, *, c: int = 0) -> None: ...


def test_lookup_by_name_checks_existence_and_leading_params_in_order() -> None:
    assert Fenced("inspect", "signature", ("obj",), "test").problem() is None
    assert Fenced("inspect", "Signature.parameters").problem() is None  # a property, params None: existence only
    gone = Fenced("inspect", "no_such_thing", ("self",), "a test")
    assert gone.problem() == (
        "inspect.no_such_thing is gone (AttributeError: module 'inspect' has no attribute 'no_such_thing'); "
        "needed for: a test"
    )
    reshaped = Fenced(__name__, "_two", ("b",), "order")
    assert reshaped.problem() == f"{__name__}._two takes ('a', 'b', 'c'), expected ('b',); needed for: order"
    assert Fenced("no_such_module_xyz", "x", None, "why", optional=True).problem() is None
    assert Fenced("inspect", "missing", ("x",), optional=True).problem() is None


def test_a_check_replaces_the_lookup_and_exceptions_become_the_line() -> None:
    ok = Fenced("anything.at.all", "Cls._attr read from source", check=lambda: None)
    assert ok.problem() is None
    moved = Fenced("torch.amp", "GradScaler._device", check=lambda: "attribute is gone")
    assert moved.problem() == "torch.amp.GradScaler._device: attribute is gone"

    def raises() -> None:
        raise ImportError("no module named x")

    broken = Fenced("x", "y", why="z", check=raises)
    assert broken.problem() == "x.y: ImportError: no module named x; needed for: z"
    assert fenced_problems([ok, moved, broken]) == [moved.problem(), broken.problem()]
    assert moved.where == "torch.amp.GradScaler._device"


def test_missing_params_any_order() -> None:
    assert missing_params(_two, "c", "a") is None
    problem = missing_params(_two, "a", "d")
    assert problem is not None
    assert problem.startswith("parameters ['d'] missing from signature (a: 'int', b: 'int'")


def test_importing_the_fence_imports_no_torch_nor_lightning() -> None:
    code = "import sys, precision_base.kit.fence; print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
