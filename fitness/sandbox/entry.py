"""Choosing the kernel function of a file that defines several (the NKI SDK's examples do).

The evaluation service runs a module's `kernel` function (the NKIBench convention).
`select(source, function)` turns a file into such a module: it keeps the module-level code
`function` needs (the imports, functions and constants it refers to, transitively), blanks
every other line (a `__main__` block, a demo that runs the kernel, argument parsing) so that
line numbers in error messages stay those of the file, and binds `kernel` to `function`.
"""

from __future__ import annotations

import ast


class EntryError(ValueError):
    """The file does not parse or defines no such function; the message says which."""


def _binds(node: ast.stmt) -> list[str]:
    """Module-level names a statement binds (imports, definitions, plain assignments)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _free_names(node: ast.stmt) -> set[str]:
    """Names a statement reads that it does not bind itself (a function's locals and arguments
    are its own, even when a module-level name is spelled the same)."""
    read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return read
    local = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    local |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    return (read - local) | {n.id for d in node.decorator_list for n in ast.walk(d) if isinstance(n, ast.Name)}


def select(source: str, function: str) -> str:
    """The module source that evaluates `function` of `source` as its kernel (see above)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise EntryError(f"the kernel file does not parse (line {exc.lineno}: {exc.msg})") from None
    binders: dict[str, list[ast.stmt]] = {}
    for node in tree.body:
        for name in _binds(node):
            binders.setdefault(name, []).append(node)
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    if function not in functions:
        raise EntryError(f"the kernel file defines no function '{function}' (its functions: "
                         f"{', '.join(functions) or 'none'})")
    # `from __future__ import annotations` changes how the whole module compiles: always kept
    keep: set[int] = {id(n) for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"}
    todo = [n for n in binders[function] if isinstance(n, ast.FunctionDef)]
    while todo:
        node = todo.pop()
        if id(node) in keep:
            continue
        keep.add(id(node))
        todo.extend(b for name in sorted(_free_names(node)) for b in binders.get(name, []))
    lines = source.splitlines()
    kept = [""] * len(lines)
    for node in tree.body:
        if id(node) in keep:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            kept[first - 1:node.end_lineno] = lines[first - 1:node.end_lineno]
    while kept and not kept[-1].strip():
        kept.pop()
    tail = [] if function == "kernel" else ["", f"kernel = {function}"]
    return "\n".join(kept + tail) + "\n"


def entry_function(source: str) -> str:
    """The function of a file to evaluate when none is named: `kernel` when the file defines
    one, else its only decorated top-level function (an `@nki.jit` kernel beside helpers),
    else its only function; an error listing the candidates when that is ambiguous."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise EntryError(f"the kernel file does not parse (line {exc.lineno}: {exc.msg})") from None
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if any(f.name == "kernel" for f in functions):
        return "kernel"
    decorated = [f.name for f in functions if f.decorator_list]
    for candidates in (decorated, [f.name for f in functions]):
        if len(candidates) == 1:
            return candidates[0]
        if candidates:
            raise EntryError(f"the kernel file defines several kernels ({', '.join(candidates)}); name one "
                             f"with --function")
    raise EntryError("the kernel file defines no function")
