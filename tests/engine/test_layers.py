"""Imports run one way (docs/architecture.md "Layers"), read from the code: every import of every
module, late imports (inside functions) included, and no import circle among our packages."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OURS = ("accelopt_evo", "fitness", "operators", "nkibench")

# Higher imports lower; an area may import itself. Areas of one rank may not import each other.
LAYERS = {
    "accelopt_evo": ["__main__", "cli", "runner", "report", "search", "memory", "run", "errors"],
    "fitness": ["(top)", "sandbox", "backends", ("correctness", "measures"), "simulator"],
}
PACKAGES = ["accelopt_evo", "operators", "fitness", "nkibench"]   # across packages, downwards


def module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_of(p): p for top in OURS for p in (REPO / top).rglob("*.py")}


def imports(module: str) -> set[str]:
    """Our modules (or packages) `module` imports, anywhere in it."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                name = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            for alias in node.names:
                full = f"{name}.{alias.name}"
                found.add(full if full in MODULES else name)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.split(".")[0] in OURS and m != module}


def rank(module: str) -> tuple[str, int, str] | None:
    """(package, rank within it, area) of a module of a layered package; None for others."""
    top, *rest = module.split(".")
    if top not in LAYERS:
        return None
    layers = LAYERS[top]
    for i, layer in enumerate(layers):
        for area in (layer if isinstance(layer, tuple) else (layer,)):
            if rest[:1] == [area] or (area == "(top)" and (not rest or rest[0] not in _areas(top))):
                return top, len(layers) - i, area
    return None


def _areas(top: str) -> set[str]:
    return {a for layer in LAYERS[top] for a in (layer if isinstance(layer, tuple) else (layer,))}


def test_every_import_goes_down_the_layers():
    wrong = []
    for module in MODULES:
        for target in imports(module):
            a, b = module.split(".")[0], target.split(".")[0]
            if a != b:
                if PACKAGES.index(a) > PACKAGES.index(b):
                    wrong.append(f"{module} -> {target} (package {a} below {b})")
                continue
            ra, rb = rank(module), rank(target)
            if ra is None or rb is None or ra[2] == rb[2]:
                continue
            if ra[1] <= rb[1]:
                wrong.append(f"{module} -> {target} ({ra[2]} is not above {rb[2]})")
    assert not wrong, "\n".join(sorted(wrong))


def test_fitness_simulator_imports_nothing_of_ours_but_itself():
    outside = [f"{m} -> {t}" for m in MODULES if m.startswith("fitness.simulator")
               for t in imports(m) if not t.startswith("fitness.simulator")]
    assert not outside, outside


def test_no_import_circle():
    graph = {m: {t if t in MODULES else _package_module(t) for t in imports(m)} - {None} for m in MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                circle = visit(t)
                if circle:
                    return circle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            circle = visit(m)
            assert circle is None, " -> ".join(circle)


def _package_module(name: str) -> str | None:
    """The module a dotted name of an attribute belongs to (`a.b.C` -> `a.b`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def test_each_folder_holds_few_modules_and_says_what_it_is():
    for top in ("accelopt_evo", "fitness"):
        assert len([p for p in (REPO / top).glob("*.py") if p.name != "__init__.py"]) <= 10, top
        for folder in (REPO / top).rglob("*"):
            if folder.is_dir() and (folder / "__init__.py").is_file():
                modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
                assert len(modules) <= 15 or folder.name in ("core", "perf"), folder
                assert ast.get_docstring(ast.parse((folder / "__init__.py").read_text())), folder
