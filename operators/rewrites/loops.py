"""Loop rewrites: interchange two perfectly nested loops, hoist loop-invariant statements.

Both keep what is computed; whether the new order is legal for NKI (an affine loop whose
iterations depend on each other) is for the correctness gate to decide, as for any child.
"""

from __future__ import annotations

import ast

from ..edits import indentation, move_statements
from .program import Applied, blocks, call_name, instr, kernel_functions, lines_of, names_read, names_written, parse

LOOPS = {"range", "affine_range", "static_range"}    # sequential loops carry dependencies: left alone
# Calls a hoisted statement may make: reads and pure computations (no stores, no allocations).
PURE = {"load", "copy", "activation", "tensor_tensor", "tensor_scalar", "reciprocal", "transpose", "broadcast_to",
        "multiply", "add", "subtract", "divide", "exp", "negative", "maximum", "minimum", "arange", "min", "max",
        "tensor_copy", "iota", "reshape", "dma_copy", "nc_transpose"}
ALLOCATE = {"ndarray", "zeros", "empty"}


def _loop_kind(node: ast.For) -> str | None:
    name = call_name(node.iter)
    return name if name in LOOPS else None


def _header(lines: list[str], loop: ast.For) -> str | None:
    """The loop's one-line header text (without indentation), or None when it spans lines."""
    if loop.body[0].lineno == loop.lineno:
        return None
    line = lines[loop.lineno - 1]
    if loop.iter.end_lineno != loop.lineno:
        return None
    return line.strip()


def _loops(source: str) -> tuple[list[str], list[ast.For]]:
    """The source's lines and its loops over a non-sequential range (none if it does not parse)."""
    tree = parse(source)
    if tree is None:
        return [], []
    loops = [n for fn in kernel_functions(tree) for n in ast.walk(fn)
             if isinstance(n, ast.For) and _loop_kind(n) is not None and not n.orelse]
    return source.splitlines(keepends=True), loops


def interchange(source: str) -> list[Applied]:
    """Every pair of perfectly nested loops (the outer's body is the inner loop alone, the
    inner's range independent of the outer's variable), swapped."""
    lines, loops = _loops(source)
    out = []
    for outer in loops:
        if not (len(outer.body) == 1 and outer.body[0] in loops):
            continue
        inner = outer.body[0]
        if not isinstance(outer.target, ast.Name) or outer.target.id in names_read(inner.iter):
            continue
        ho, hi = _header(lines, outer), _header(lines, inner)
        if ho is None or hi is None:
            continue
        new = list(lines)
        for loop, header in ((outer, hi), (inner, ho)):
            old = new[loop.lineno - 1]
            indent = indentation(old)
            new[loop.lineno - 1] = indent + header + "\n"
        out.append(Applied("".join(new), f"interchanged the loops over {outer.target.id} and "
                                         f"{getattr(inner.target, 'id', '?')} (lines {outer.lineno}, {inner.lineno})"))
    return out


def _calls_pure(node: ast.AST) -> bool:
    return all(call_name(sub) in PURE for sub in ast.walk(node) if isinstance(sub, ast.Call))


def _hoistable(loop: ast.For) -> list[ast.stmt]:
    """The statements of the loop's body that compute the same in every iteration, in order:
    `t = pure(...)` reading nothing the loop writes (statements hoisted before them excepted),
    and in the current dialect an allocation with the one instruction that fills it."""
    body = loop.body
    written = names_written(body) | {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    counts: dict[str, int] = {}
    for stmt in body:
        for name in names_written([stmt]):
            counts[name] = counts.get(name, 0) + 1
    nested_writes = names_written([s for s in body if isinstance(s, (ast.For, ast.If, ast.While, ast.With))])
    hoisted: list[ast.stmt] = []
    free: set[str] = set()                         # targets already hoisted: invariant now
    read_so_far: set[str] = set()
    for i, stmt in enumerate(body):
        target = _single_target(stmt)
        blocked = written - free
        ok = (target is not None and counts.get(target) == 1 and target not in nested_writes
              and target not in read_so_far)
        if ok and isinstance(stmt, ast.Assign):
            value = stmt.value
            is_alloc = isinstance(value, ast.Call) and call_name(value) in ALLOCATE
            if is_alloc:
                ok = _fills(body, i, target, blocked | {target}) and not (names_read(value) & blocked)
            else:
                ok = _calls_pure(value) and not (names_read(value) & blocked)
        elif ok:
            ins = instr(stmt)                      # current dialect: filled by one instruction
            ok = (ins is not None and ins.current and _calls_pure(ins.call) and any(h is not None and
                  _single_target(h) == target for h in hoisted)
                  and not ((names_read(ins.call) - {target}) & blocked))
        if ok:
            hoisted.append(stmt)
            free.add(target)  # type: ignore[arg-type]
        read_so_far |= names_read(stmt)
    # An allocation goes only with the instruction that fills it.
    filled = {_single_target(s) for s in hoisted if not isinstance(s, ast.Assign)}
    return [s for s in hoisted if not (isinstance(s, ast.Assign) and isinstance(s.value, ast.Call)
                                       and call_name(s.value) in ALLOCATE and _single_target(s) not in filled)]


def _single_target(stmt: ast.stmt) -> str | None:
    """The variable a statement defines whole (`t = ...`, `nisa.x(dst=t, ...)`), else None."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    ins = instr(stmt)
    if ins is not None and ins.current and isinstance(ins.dst, ast.Name):
        return ins.dst.id
    return None


def _fills(body: list[ast.stmt], i: int, name: str, blocked: set[str]) -> bool:
    """Whether exactly one later statement of `body` writes `name` whole, in the dst= form."""
    writers = [s for s in body[i + 1:] if name in names_written([s])]
    return len(writers) == 1 and _single_target(writers[0]) == name


def hoist_invariants(source: str) -> list[Applied]:
    """For every loop with invariant statements, those statements moved before the loop."""
    out = []
    for loop in _loops(source)[1]:
        moved = _hoistable(loop)
        if not moved or len(moved) == len(loop.body):   # a loop left empty would not parse
            continue
        names = ", ".join(_single_target(s) or "?" for s in moved)
        var = getattr(loop.target, "id", "?")
        new = move_statements(source, moved, loop)
        out.append(Applied(new, f"hoisted {names} out of the loop over {var} ({lines_of(moved)})"))
    return out


def _rename(lines: list[str], stmts: list[ast.stmt], old: str, new: str) -> None:
    """Rename the variable `old` to `new` in the statements, in place in `lines` (one line per
    Name node; columns are byte offsets of ASCII kernel text)."""
    spots = sorted(((n.lineno, n.col_offset) for s in stmts for n in ast.walk(s)
                    if isinstance(n, ast.Name) and n.id == old), reverse=True)
    for lineno, col in spots:
        line = lines[lineno - 1]
        lines[lineno - 1] = line[:col] + new + line[col + len(old):]


def _indent(lines: list[str], node: ast.AST) -> str:
    return indentation(lines[node.lineno - 1])


def merge_loops(source: str) -> list[Applied]:
    """Every two adjacent loops over the same range merged into one (the second's variable
    renamed to the first's): one pass over the data instead of two."""
    tree = parse(source)
    if tree is None or not source.isascii():
        return []
    lines = source.splitlines(keepends=True)
    out = []
    for fn in kernel_functions(tree):
        for block in blocks(fn):
            for a, b in zip(block, block[1:]):
                if not (isinstance(a, ast.For) and isinstance(b, ast.For) and _loop_kind(a) and _loop_kind(b)
                        and ast.unparse(a.iter) == ast.unparse(b.iter) and isinstance(a.target, ast.Name)
                        and isinstance(b.target, ast.Name) and not a.orelse and not b.orelse):
                    continue
                va, vb = a.target.id, b.target.id
                if _header(lines, b) is None or _indent(lines, a.body[0]) != _indent(lines, b.body[0]):
                    continue
                if va != vb and va in {n.id for s in b.body for n in ast.walk(s) if isinstance(n, ast.Name)}:
                    continue
                new = list(lines)
                if va != vb:
                    _rename(new, b.body, vb, va)
                del new[b.lineno - 1]
                out.append(Applied("".join(new), f"merged the loop over {vb} (line {b.lineno}) into the loop over "
                                                 f"{va} (line {a.lineno})"))
    return out


def split_loop(source: str) -> list[Applied]:
    """Every loop body split in two loops over the same range where the second part reads no
    variable the first part sets (they share only memory): two passes instead of one."""
    lines, loops = _loops(source)
    out = []
    for loop in loops:
        if len(loop.body) >= 2:
            header = _header(lines, loop)
            if header is None:
                continue
            for k in range(1, len(loop.body)):
                first, second = loop.body[:k], loop.body[k:]
                set_first = {n.id for s in first for n in ast.walk(s) if isinstance(n, ast.Name)
                             and isinstance(n.ctx, ast.Store)}
                if set_first & names_read(ast.Module(body=second, type_ignores=[])):
                    continue
                new = list(lines)
                at = second[0].lineno - 1
                new.insert(at, _indent(lines, loop) + header + "\n")
                out.append(Applied("".join(new), f"split the loop over {getattr(loop.target, 'id', '?')} "
                                                 f"(line {loop.lineno}) before line {second[0].lineno}"))
    return out

