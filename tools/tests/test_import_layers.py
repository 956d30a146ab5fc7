"""The product's modules import one another in layers: no module of packages/*/src reaches itself through its imports.

Every import counts, at module top, inside a function or under ``TYPE_CHECKING``: a cycle that only a deferred
import keeps from failing is still a layering mistake (the module that should sit lower knows one above it).
A package's own submodule importing the package (``precision_base.doors.fabric`` -> ``precision_base.doors``) is
not a cycle. Importing a module runs its packages' ``__init__`` first, so ``import a.b.c`` counts as an import of
``a.b`` too (where the importer is not inside ``a.b``): a cycle through an ``__init__`` fails at run time when the
parts are imported in the wrong order.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for src in sorted(ROOT.glob("packages/*/src")):
        for path in src.rglob("*.py"):
            found[".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    run = set(names)
    for name in names:  # importing a.b.c runs a/__init__ and a/b/__init__ first
        parts = name.split(".")
        run.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return {n for n in run if n in known and n != module and not module.startswith(n + ".")}


def import_graph() -> dict[str, set[str]]:
    known = module_files()
    return {module: imported(module, path, known) for module, path in known.items()}


def test_the_graph_sees_the_packages() -> None:
    graph = import_graph()
    assert {"precision_base.registry", "precision_fsdp.plugin", "precision_deepspeed.plugin"} <= graph.keys()
    assert "precision_base.contract" in graph["precision_base.registry"]


def first_cycle(graph: dict[str, set[str]]) -> list[str]:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as cycle:
        return list(cycle.args[1])
    return []


def test_no_module_imports_itself_through_others() -> None:
    cycle = first_cycle(import_graph())
    assert not cycle, f"import cycle: {' -> '.join(cycle)}"


def test_a_cycle_through_a_function_level_relative_import_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from .high import g\n")
    (pkg / "high.py").write_text("from pkg.low import f\n")
    known = {"pkg": pkg / "__init__.py", "pkg.low": pkg / "low.py", "pkg.high": pkg / "high.py"}
    graph = {module: imported(module, path, known) for module, path in known.items()}
    assert graph == {"pkg": set(), "pkg.low": {"pkg.high"}, "pkg.high": {"pkg.low"}}
    assert set(first_cycle(graph)) == {"pkg.low", "pkg.high"}


def test_a_cycle_through_a_package_init_is_found(tmp_path: Path) -> None:
    """``low`` imports a part of ``sub``, whose ``__init__`` imports ``high``, which imports ``low``: at run time
    ``import low`` runs ``sub/__init__`` and finds ``low`` half-built."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    files = {
        "pkg": ("pkg/__init__.py", ""),
        "pkg.low": ("pkg/low.py", "from pkg.sub.part import x\n"),
        "pkg.sub": ("pkg/sub/__init__.py", "from pkg.high import y\n"),
        "pkg.sub.part": ("pkg/sub/part.py", "x = 1\n"),
        "pkg.high": ("pkg/high.py", "from pkg.low import z\n"),
    }
    known = {}
    for module, (rel, text) in files.items():
        (tmp_path / rel).write_text(text)
        known[module] = tmp_path / rel
    graph = {module: imported(module, path, known) for module, path in known.items()}
    assert graph["pkg.low"] == {"pkg.sub", "pkg.sub.part"}
    assert set(first_cycle(graph)) == {"pkg.low", "pkg.sub", "pkg.high"}
