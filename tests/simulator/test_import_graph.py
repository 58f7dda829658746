"""The simulator's imports run one way: front-ends -> core, never back, and no module of the
emulator imports itself through others (checked on the source, function-level imports
included, so that a late import cannot hide a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fitness.simulator

ROOT = Path(fitness.simulator.__file__).resolve().parent
PACKAGE = "fitness.simulator"
SHARED = {f"{PACKAGE}.errors", f"{PACKAGE}.trace"}   # leaves every part may use


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts])


def _modules() -> dict[str, Path]:
    """The emulator's modules (the performance model, `perf/`, has its own contract)."""
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py")) if "perf" not in p.relative_to(ROOT).parts}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the simulator that `name` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            # `from pkg import mod` imports the module; `from mod import name` the module itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods) | {f"{PACKAGE}.perf"}
    return {name: _imports(name, path, known) for name, path in mods.items()}


def _part(module: str) -> str:
    rest = module[len(PACKAGE) + 1:] if module != PACKAGE else ""
    return rest.split(".")[0] if "." in rest else ("" if module in SHARED or not rest else rest)


def test_the_graph_sees_the_layout():
    g = _graph()
    assert f"{PACKAGE}.core.tensor" in g and f"{PACKAGE}.legacy.language" in g
    assert f"{PACKAGE}.core.tensor" in g[f"{PACKAGE}.core.subscript"]
    assert f"{PACKAGE}.core.engines" in g[f"{PACKAGE}.legacy.isa"]


def test_core_never_imports_a_front_end():
    bad = sorted(f"{m} -> {t}" for m, ts in _graph().items() if _part(m) == "core"
                 for t in ts if not (_part(t) == "core" or t in SHARED))
    assert bad == []


def test_front_ends_never_import_each_other():
    g = _graph()
    assert f"{PACKAGE}.core.alu" in g[f"{PACKAGE}.current.isa"]
    bad = sorted(f"{m} -> {t}" for m, ts in g.items() if _part(m) in ("legacy", "current")
                 for t in ts if _part(t) in ("legacy", "current") and _part(t) != _part(m))
    assert bad == []


def test_shared_leaves_import_nothing_of_the_simulator():
    g = _graph()
    assert {m: g[m] for m in SHARED} == {m: set() for m in SHARED}


def test_no_import_cycles():
    g = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(g.get(m, ())):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    assert cycles == []


@pytest.mark.parametrize("source,expected", [
    ("from .. import errors\n", {f"{PACKAGE}.errors"}),
    ("def f():\n    from ..legacy import language\n", {f"{PACKAGE}.legacy.language"}),
    ("from .tensor import NkiTensor\n", {f"{PACKAGE}.core.tensor"}),
    ("import fitness.simulator.legacy.shim\n", {f"{PACKAGE}.legacy.shim"}),
])
def test_imports_are_resolved_including_late_ones(tmp_path, source, expected):
    path = tmp_path / "mod.py"
    path.write_text(source)
    assert _imports(f"{PACKAGE}.core.mod", path, set(_modules())) == expected
