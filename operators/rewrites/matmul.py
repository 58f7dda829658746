"""Matmul rewrites: transpose a matmul's stationary operand once, not once per call.

`nl.matmul(x, y)` computes `x @ y` with `x` laid out [M, K] (M on partitions); TensorE needs
the stationary operand with K on partitions, so every call first transposes `x` on TensorE and
copies the result to SBUF (the legacy front-end expands it so, and neuronx-cc does not share
these transposes between calls: the profile of the official add_rmsnorm_matmul counts one per
call). Where `x` is the same in every iteration of an enclosing loop (a row tile reused for
every column block), the rewrite transposes it once before that loop, into an SBUF tile per
iteration of the loop it does depend on, and calls `nl.matmul(xT[k], y, transpose_x=True)`.
"""

from __future__ import annotations

import ast

from ..edits import Span, indentation, replace_spans
from .aliases import imported
from .dma import substitute
from .program import Applied, call_name, kernel_functions, names_read, names_written, parse

LOOPS = {"range", "affine_range", "static_range", "sequential_range"}


def _chains(fn: ast.FunctionDef, nl: str):
    """(call, enclosing loops outermost first) for every `nl.matmul(...)` call of `fn`."""
    def walk(node: ast.AST, loops: list[ast.For]):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) \
                    and child.func.attr == "matmul" and isinstance(child.func.value, ast.Name) \
                    and child.func.value.id == nl:
                yield child, loops
            inner = loops + [child] if isinstance(child, ast.For) else loops
            yield from walk(child, inner)
    yield from walk(fn, [])


def _count(loop: ast.For) -> ast.expr | None:
    """The trip count of `for v in nl.affine_range(N)` (one argument: v runs 0..N-1), else None."""
    it = loop.iter
    if call_name(it) in LOOPS and isinstance(it, ast.Call) and len(it.args) == 1 and not it.keywords \
            and isinstance(loop.target, ast.Name) and not loop.orelse:
        return it.args[0]
    return None


def _hoist_level(x: ast.expr, loops: list[ast.For]) -> tuple[int, ast.For | None] | None:
    """(index in `loops` of the outermost loop `x` can be transposed before, the one loop inside
    it that `x` depends on or None), or None when it cannot be hoisted over any loop."""
    reads = names_read(x)
    best = None
    for j in range(len(loops) - 1, -1, -1):
        level = loops[j]
        if not isinstance(level.target, ast.Name):
            break
        if level.target.id in reads:
            continue   # x follows this loop: it may be the one loop x depends on, further out
        written = names_written(level.body) | {level.target.id}
        inner = {lp.target.id: lp for lp in loops[j + 1:] if isinstance(lp.target, ast.Name)}
        if (reads & written) - set(inner):
            break      # x reads what this loop computes: so does every loop around it
        used = [inner[v] for v in reads & set(inner)]
        if len(used) > 1:
            break
        dep = used[0] if used else None
        if dep is not None and (_count(dep) is None or names_read(dep.iter) & written
                                or _read_outside(dep.target.id, level, dep)):   # type: ignore[union-attr]
            break
        best = (j, dep)
    return best


def _read_outside(name: str, level: ast.For, dep: ast.For) -> bool:
    """Whether `level` reads `name` outside `dep` (the transposes' loop, run before `level`,
    leaves `name` at its last value)."""
    inside = {id(n) for n in ast.walk(dep)}
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and id(n) not in inside
               for n in ast.walk(level))


def _untransposed(k: ast.keyword) -> bool:
    return k.arg == "transpose_x" and isinstance(k.value, ast.Constant) and k.value.value is False


def _fresh(names: set[str], base: str) -> str:
    name, k = f"{base}_T", 1
    while name in names:
        k += 1
        name = f"{base}_T{k}"
    return name


def pretranspose_matmul(source: str) -> list[Applied]:
    """Every `nl.matmul(x, y)` whose `x` is invariant over an enclosing loop, with `x`
    transposed once before the outermost such loop (see the module doc)."""
    tree = parse(source)
    if tree is None or not source.isascii():
        return []
    nl = imported(tree).get("language")
    if nl is None:
        return []
    lines = source.splitlines(keepends=True)
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    out = []
    for fn in kernel_functions(tree):
        for call, loops in _chains(fn, nl):
            if len(call.args) != 2 or not all(_untransposed(k) for k in call.keywords) \
                    or not isinstance(call.args[0], (ast.Name, ast.Subscript)):
                continue   # transpose_x, masks or other options: left as written
            x, y = call.args
            found = _hoist_level(x, loops)
            if found is None:
                continue
            level, dep = loops[found[0]], found[1]
            if level.body[0].lineno == level.lineno:
                continue   # a one-line loop: no line to insert before its body
            indent = indentation(lines[level.lineno - 1])
            xt = _fresh(taken, x.id if isinstance(x, ast.Name) else getattr(x.value, "id", "x"))
            x_text = ast.get_source_segment(source, x)
            transposed = f"{nl}.copy({nl}.transpose({x_text}))"
            if dep is None:
                pre = f"{indent}{xt} = {transposed}\n"
                use = xt
            else:
                k = dep.target.id   # type: ignore[union-attr]
                first = ast.unparse(substitute(x, k, ast.Constant(0)))
                count = ast.get_source_segment(source, _count(dep))
                step = indentation(lines[level.body[0].lineno - 1])[len(indent):] or "    "
                # The transposed tile is [K, M] of x's [M, K], read off x's first tile when traced.
                pre = (f"{indent}{xt} = {nl}.ndarray(({count}, {nl}.par_dim({first}.shape[1]), {first}.shape[0]), "
                       f"dtype={nl}.float32, buffer={nl}.sbuf)\n"
                       f"{indent}for {k} in {ast.get_source_segment(source, dep.iter)}:\n"
                       f"{indent}{step}{xt}[{k}] = {transposed}\n")
                use = f"{xt}[{k}]"
            new_call = f"{nl}.matmul({use}, {ast.get_source_segment(source, y)}, transpose_x=True)"
            new = replace_spans(source, [(Span(level.lineno, 0, level.lineno, 0), pre),
                                         (Span.of(call), new_call)])
            var = level.target.id   # type: ignore[union-attr]
            per = f" per {dep.target.id}" if dep is not None else ""   # type: ignore[union-attr]
            out.append(Applied(new, f"transposed the stationary operand {x_text} of nl.matmul (line {call.lineno}) "
                                    f"once{per} before the loop over {var} (line {level.lineno}) instead of in "
                                    f"every call"))
    return out

