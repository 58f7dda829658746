"""DMA rewrites: fewer, larger transfers, and buffers the compiler may rotate.

- `coalesce_loads`: a loop that loads, each iteration, one slice of an HBM tensor into the
  loop variable's part of an on-chip tensor made outside the loop becomes one load of the
  whole range before the loop. In legacy advanced indexing the loop variable becomes an
  `nl.arange` on a new tile axis (right after the partition axis); where the destination was
  indexed by the loop variable on a block dimension, that dimension is folded into the free
  dimensions (blocks are separate tiles: one instruction cannot write several), every access
  to the tensor moved with it. In basic indexing (slices, the current dialect) the loop's
  integer index or tiled slice becomes one slice of the whole range.
- `merge_adjacent_loads`: two loads of adjacent regions of one HBM tensor into adjacent
  regions of one destination become one load of the union.
- `privatize_buffer`: an SBUF/PSUM tile allocated once before a loop and written whole at the
  start of each iteration is allocated in the loop body instead. The current NKI compiler
  rotates the addresses of buffers allocated in a loop body, and neuronx-cc gives an
  allocation site in a loop several copies, so iterations no longer wait for the previous
  one to finish reading the single buffer (the performance model does the same: deps.py).
"""

from __future__ import annotations

import ast
import copy
import random
from dataclasses import dataclass

import numpy as np

from ..edits import Span, replace_spans
from .program import (Applied, base_name, blocks, call_name, element_bytes, instr, kernel_functions, last_name,
                      names_read, names_written, parse_nki, text)

LOOPS = {"affine_range", "range", "sequential_range", "static_range"}
ALLOCATE = {"ndarray", "zeros", "full", "empty"}
ACCUMULATE = {"nc_matmul", "matmul"}   # current dialect: the first write overwrites, the next ones add
# The most bytes per partition one SBUF tile may take: what is usable after the compiler's
# reserve on trn1, the smallest SBUF of the targets (176 KiB of 192; the performance model's
# `TRN1.sbuf_usable_bytes_per_partition`, which a test holds this to: importing the model
# here would load the whole simulator with the operators).
PARTITION_BUDGET = 176 * 1024
MAX_TILE_RANK = 4    # a partition plus up to 3 free axes: the access patterns DMA and engines take
_DELETE = "\x00delete-line\x00"


class _Unknown(Exception):
    """An index expression the rewrites cannot evaluate."""


# ----------------------------------------------------------------------------------------------
# Reading loads and index expressions


@dataclass
class _Load:
    """`dst[...] = nl.load(src[...], ...)` or `nisa.dma_copy(dst=dst[...], src=src[...])`."""

    stmt: ast.stmt
    call: ast.Call
    dst: ast.Subscript
    src: ast.Subscript

    @property
    def dst_name(self) -> str:
        return self.dst.value.id  # type: ignore[attr-defined]

    @property
    def src_name(self) -> str:
        return self.src.value.id  # type: ignore[attr-defined]

    def masked(self) -> bool:
        mask = next((k.value for k in self.call.keywords if k.arg == "mask"), None)
        return mask is not None and not (isinstance(mask, ast.Constant) and mask.value is None)


def _load(stmt: ast.stmt) -> _Load | None:
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript)
            and isinstance(stmt.value, ast.Call) and call_name(stmt.value) == "load"):
        call, dst = stmt.value, stmt.targets[0]
        src = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "src"), None)
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and call_name(stmt.value) == "dma_copy":
        call = stmt.value
        dst = next((k.value for k in call.keywords if k.arg == "dst"), call.args[0] if call.args else None)
        src = next((k.value for k in call.keywords if k.arg == "src"),
                   call.args[1] if len(call.args) > 1 else None)
    else:
        return None
    if not (isinstance(dst, ast.Subscript) and isinstance(src, ast.Subscript) and isinstance(dst.value, ast.Name)
            and isinstance(src.value, ast.Name)):
        return None
    return _Load(stmt, call, dst, src)


def _elements(sub: ast.Subscript) -> list[ast.expr]:
    return list(sub.slice.elts) if isinstance(sub.slice, ast.Tuple) else [sub.slice]


def _aranges(node: ast.AST) -> list[ast.Subscript]:
    """The `nl.arange(n)[...]` terms of an index expression."""
    return [n for n in ast.walk(node) if isinstance(n, ast.Subscript) and call_name(n.value) == "arange"]


def _arange_axes(term: ast.Subscript) -> list[bool] | None:
    """Per position of an arange's subscript: True for `:`, False for None; None otherwise."""
    elts = term.slice.elts if isinstance(term.slice, ast.Tuple) else [term.slice]
    out = []
    for e in elts:
        if isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None:
            out.append(True)
        elif isinstance(e, ast.Constant) and e.value is None:
            out.append(False)
        else:
            return None
    return out if out.count(True) == 1 else None


def _index_names(node: ast.AST) -> set[str]:
    """The variables an index expression reads (not the module of `nl.arange`)."""
    funcs = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    skip = {id(m) for n in ast.walk(node) if id(n) in funcs for m in ast.walk(n)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in skip}


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _eval(node: ast.AST, env: dict[str, int]):
    """The value of an integer index expression: ints, names of `env`, + - * //, and aranges
    (a NumPy array along the arange's axis)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise _Unknown(node.id)
        return env[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        a, b = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if np.any(np.asarray(b) == 0):
            raise _Unknown("division by zero")
        return a // b
    if isinstance(node, ast.Subscript) and call_name(node.value) == "arange":
        axes, call = _arange_axes(node), node.value
        if axes is None or len(call.args) != 1 or call.keywords:  # type: ignore[attr-defined]
            raise _Unknown("arange")
        n = _eval(call.args[0], env)  # type: ignore[attr-defined]
        if not isinstance(n, int) or n < 1:
            raise _Unknown("arange size")
        return np.arange(n).reshape([n if a else 1 for a in axes])
    raise _Unknown(ast.unparse(node))


def substitute(node: ast.expr, name: str, value: ast.expr) -> ast.expr:
    """A copy of `node` with every Name `name` replaced by `value`, constants folded."""

    class Sub(ast.NodeTransformer):
        def visit_Name(self, n: ast.Name) -> ast.AST:
            return copy.deepcopy(value) if n.id == name else n

    return _fold(Sub().visit(copy.deepcopy(node)))


def _fold(node: ast.expr) -> ast.expr:
    """`node` with literal arithmetic folded and the neutral 0 + x, x * 1, 0 * x removed."""

    class Fold(ast.NodeTransformer):
        def visit_BinOp(self, n: ast.BinOp) -> ast.AST:
            self.generic_visit(n)
            a, b = n.left, n.right
            ca = a.value if isinstance(a, ast.Constant) and isinstance(a.value, int) else None
            cb = b.value if isinstance(b, ast.Constant) and isinstance(b.value, int) else None
            if ca is not None and cb is not None and not (isinstance(n.op, ast.FloorDiv) and cb == 0):
                return ast.Constant(_eval(n, {}))
            if isinstance(n.op, ast.Add) and (ca == 0 or cb == 0):
                return b if ca == 0 else a
            if isinstance(n.op, ast.Sub) and cb == 0:
                return a
            if isinstance(n.op, ast.Mult) and (ca == 0 or cb == 0):
                return ast.Constant(0)
            if isinstance(n.op, ast.Mult) and (ca == 1 or cb == 1):
                return b if ca == 1 else a
            return n

    return ast.fix_missing_locations(Fold().visit(node))


def _samples(nodes: list[ast.AST], var: str, count: int = 3) -> list[dict[str, int]]:
    """Random values for the names of `nodes` other than `var` (a symbolic identity that holds
    for all of them holds in general, short of a coincidence)."""
    names = sorted(set().union(*(_index_names(n) for n in nodes)) - {var})
    rng = random.Random(0)
    return [{n: rng.randrange(3, 10_000) for n in names} for _ in range(count)]


def _step(node: ast.expr, var: str, env: dict[str, int]) -> int | None:
    """How much `node` grows when `var` grows by 1, if it is affine in `var` (scalars only)."""
    try:
        v = [_eval(node, {**env, var: i}) for i in (0, 1, 2)]
    except _Unknown:
        return None
    if not all(isinstance(x, int) for x in v) or v[2] - v[1] != v[1] - v[0]:
        return None
    return v[1] - v[0]


# ----------------------------------------------------------------------------------------------
# The function around a loop


def _bound_names(target: ast.AST | None) -> set[str]:
    """The names an assignment target binds (not those it writes through a subscript)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_bound_names(e) for e in target.elts))
    return set()


@dataclass
class _Names:
    """Where a function binds each name and the subscripts and other uses of each, read in
    one walk (the rewrites ask for many names of large generated kernels)."""

    binds: dict[str, list[ast.AST]]
    subscripts: dict[str, list[ast.Subscript]]
    bare: dict[str, int]              # uses other than `name[...]` and binding

    @classmethod
    def of(cls, fn: ast.FunctionDef) -> "_Names":
        binds: dict[str, list[ast.AST]] = {}
        subs: dict[str, list[ast.Subscript]] = {}
        inside: set[int] = set()
        loads: list[ast.Name] = []
        for n in ast.walk(fn):
            targets: list[ast.AST | None] = []
            if isinstance(n, ast.Assign):
                targets = list(n.targets)
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension)):
                targets = [n.target]
            elif isinstance(n, ast.withitem):
                targets = [n.optional_vars]
            for t in targets:
                for name in _bound_names(t):
                    binds.setdefault(name, []).append(n)
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name):
                subs.setdefault(n.value.id, []).append(n)
                inside.add(id(n.value))
            elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store):
                loads.append(n)
        bare: dict[str, int] = {}
        for n in loads:
            if id(n) not in inside:
                bare[n.id] = bare.get(n.id, 0) + 1
        return cls(binds, subs, bare)


def _allocation(names: _Names, name: str) -> ast.Assign | None:
    """The one binding of `name` when it is an allocation (`nl.ndarray(...)`)."""
    binds = names.binds.get(name, [])
    if len(binds) != 1 or not isinstance(binds[0], ast.Assign) or len(binds[0].targets) != 1:
        return None
    a = binds[0]
    if not (isinstance(a.targets[0], ast.Name) and isinstance(a.value, ast.Call) and call_name(a.value) in ALLOCATE):
        return None
    return a


def _shape(alloc: ast.Assign) -> ast.Tuple | None:
    call = alloc.value
    shape = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "shape"), None)  # type: ignore
    return shape if isinstance(shape, ast.Tuple) else None


def _par_dim(shape: ast.Tuple) -> int:
    """The position of the partition dimension (the `par_dim(...)` one, else the first)."""
    return next((i for i, e in enumerate(shape.elts) if call_name(e) == "par_dim"), 0)


def _literal(node: ast.expr) -> int | None:
    if call_name(node) == "par_dim" and len(node.args) == 1:  # type: ignore[attr-defined]
        node = node.args[0]  # type: ignore[attr-defined]
    try:
        v = _eval(node, {})
    except _Unknown:
        return None
    return v if isinstance(v, int) else None


def _is_buffer(alloc: ast.Assign, kinds: tuple[str, ...]) -> bool:
    node = next((k.value for k in alloc.value.keywords if k.arg == "buffer"), None)  # type: ignore[attr-defined]
    return last_name(node) in kinds if node is not None else "sbuf" in kinds


def _writes_memory(stmts: list[ast.stmt], name: str) -> bool:
    """Whether the statements write `name` (assignments, dst=, or `nl.store(name[...])`)."""
    if name in names_written(stmts):
        return True
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Call) and call_name(n) == "store" and n.args and base_name(n.args[0]) == name:
                return True
    return False


def _loop_range(loop: ast.For) -> tuple[ast.expr, ast.expr] | None:
    """(start, trip count) of a loop over `range`/`nl.*_range` with step 1."""
    it = loop.iter
    if not (isinstance(it, ast.Call) and call_name(it) in LOOPS and not it.keywords and isinstance(loop.target, ast.Name)
            and not loop.orelse and 1 <= len(it.args) <= 2):
        return None
    if len(it.args) == 1:
        return ast.Constant(0), it.args[0]
    start, stop = it.args
    return start, _fold(ast.BinOp(copy.deepcopy(stop), ast.Sub(), copy.deepcopy(start)))


def _edit_source(source: str, spans: list[tuple[Span, str]]) -> str:
    new = replace_spans(source, spans)
    return "".join(ln for ln in new.splitlines(keepends=True) if _DELETE not in ln)


def _stmt_span(stmt: ast.stmt) -> Span:
    return Span.of(stmt)


def _only_strings(stmts: list[ast.stmt]) -> bool:
    """Statements that do nothing (the `' end loop i2 '` markers of generated kernels, pass)."""
    return all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
               for s in stmts)


def _functions(source: str) -> list[tuple[ast.FunctionDef, set[str]]]:
    """The kernel's functions with their loop variables (none when the source does not parse,
    imports no NKI, or is not ASCII: edits count columns in characters)."""
    parsed = parse_nki(source)
    if parsed is None or not source.isascii():
        return []
    return [(fn, {n.target.id for n in ast.walk(fn) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)})
            for fn in kernel_functions(parsed[0])]


# ----------------------------------------------------------------------------------------------
# coalesce_loads


def coalesce_loads(source: str) -> list[Applied]:
    """Every loop's per-iteration load of a slice indexed by the loop variable, made one load
    of the whole range before the loop (see the module doc)."""
    out = []
    for fn, loop_vars in _functions(source):
        names: _Names | None = None
        for loop in ast.walk(fn):
            if not isinstance(loop, ast.For) or _loop_range(loop) is None:
                continue
            for stmt in loop.body:
                load = _load(stmt)
                if load is not None:
                    names = names or _Names.of(fn)
                    app = _coalesce(source, names, loop, load, loop_vars)
                    if app is not None:
                        out.append(app)
    return out


def _coalesce(source: str, names: _Names, loop: ast.For, load: _Load, loop_vars: set[str]) -> Applied | None:
    var = loop.target.id  # type: ignore[attr-defined]
    start, count = _loop_range(loop)  # type: ignore[misc]
    dst, src, name = load.dst_name, load.src_name, load.src_name
    if load.masked() or dst == src:
        return None
    body = loop.body
    others = [s for s in body if s is not load.stmt]
    if any(s.lineno <= load.stmt.lineno <= (s.end_lineno or s.lineno) or
           load.stmt.lineno <= s.lineno <= (load.stmt.end_lineno or load.stmt.lineno) for s in others):
        return None      # statements sharing a line (`a; b`): the edit removes whole lines
    at = body.index(load.stmt)
    # The load reads nothing the loop writes; nothing else in the loop writes the source or the
    # destination, nor reads the destination before the load or at another iteration's part.
    written = names_written(body) - {dst}
    if (names_read(load.stmt) - {var, dst}) & written or _writes_memory(others, src):
        return None
    if _writes_memory(others, dst) or any(_mentions(s, dst) for s in body[:at]):
        return None
    if not any(_mentions(e, var) for e in _elements(load.src)):
        return None      # the same region each iteration: hoist_invariants' business
    alloc = _allocation(names, dst)
    if alloc is None or (loop.lineno <= alloc.lineno <= (loop.end_lineno or loop.lineno)):
        return None
    styled = [bool(_aranges(load.dst)), bool(_aranges(load.src))]
    if styled == [True, True]:
        plan = _plan_advanced(load, alloc, var, start, count, loop_vars)
    elif styled == [False, False]:
        plan = _plan_basic(load, alloc, var, start, count, written)
    else:
        return None
    if plan is None:
        return None
    new_dst, new_src, fold = plan
    # Other references to the destination in the loop read this iteration's part only.
    d_elems = _elements(load.dst)
    j = next(i for i, e in enumerate(d_elems) if _mentions(e, var))
    for s in others:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and n.id == dst:
                subs = [m for m in ast.walk(s) if isinstance(m, ast.Subscript) and m.value is n]
                if not subs or len(_elements(subs[0])) != len(d_elems) or text(_elements(subs[0])[j]) != text(d_elems[j]):
                    return None
    spans: list[tuple[Span, str]] = []
    note_fold = ""
    if fold is not None:
        edits = _fold_edits(names, alloc, fold, skip=load.dst)
        if edits is None:
            return None
        spans += edits
        note_fold = f"; the block dimension {fold} of {dst} folded into its free dimensions"
    new_stmt = copy.deepcopy(load.stmt)
    new_load = _load(new_stmt)
    assert new_load is not None
    new_load.dst.slice = new_dst
    new_load.src.slice = new_src
    line = ast.unparse(ast.fix_missing_locations(new_stmt))
    indent = " " * loop.col_offset
    if _only_strings(others):
        spans.append((_stmt_span(loop), line))
    else:
        spans.append((Span(loop.lineno, loop.col_offset, loop.lineno, loop.col_offset), line + "\n" + indent))
        spans.append((_stmt_span(load.stmt), _DELETE))
    try:
        new_source = _edit_source(source, spans)
    except ValueError:
        return None
    trips = text(count)
    return Applied(new_source, f"coalesced {trips} loads of {name} in the {var} loop (line {loop.lineno}) "
                               f"into one load{note_fold}")


def _plan_advanced(load: _Load, alloc: ast.Assign, var: str, start: ast.expr, count: ast.expr,
                   loop_vars: set[str]) -> tuple[ast.expr, ast.expr, int | None] | None:
    """New dst and src index tuples for legacy `nl.arange` indexing, and the block dim to fold."""
    terms = _aranges(load.dst) + _aranges(load.src)
    axes = [_arange_axes(t) for t in terms]
    if any(a is None for a in axes) or len({len(a) for a in axes}) != 1:  # type: ignore[arg-type]
        return None
    rank = len(axes[0])  # type: ignore[arg-type]
    if rank + 1 > MAX_TILE_RANK:
        return None
    if not (_index_names(load.dst.slice) | _index_names(load.src.slice)) <= loop_vars:
        return None     # a named arange (i_p = nl.arange(...)) cannot be lifted to a new axis
    d_elems, s_elems = _elements(load.dst), _elements(load.src)
    hits = [i for i, e in enumerate(d_elems) if _mentions(e, var)]
    shape = _shape(alloc)
    if len(hits) != 1 or shape is None:
        return None
    j, pd = hits[0], _par_dim(shape)
    func = terms[0].value.func                                               # type: ignore[attr-defined]
    axis = ast.Subscript(ast.Call(copy.deepcopy(func), [copy.deepcopy(count)], []),
                         ast.Tuple([ast.Constant(None), ast.Slice()] + [ast.Constant(None)] * (rank - 1), ast.Load()),
                         ast.Load())
    new_var = _fold(ast.BinOp(copy.deepcopy(start), ast.Add(), axis))
    env0 = {v: 0 for v in loop_vars}

    def lift(node: ast.expr) -> ast.expr:
        node = copy.deepcopy(node)
        for t in _aranges(node):
            elts = t.slice.elts  # type: ignore[attr-defined]
            elts.insert(1, ast.Constant(None))
        return substitute(node, var, new_var)

    fold = None
    if j < pd:                          # a block dimension: folded into the first free dim
        if not (isinstance(d_elems[j], ast.Name) and len(d_elems) == len(shape.elts) and len(shape.elts) > pd + 1):
            return None
        fold = j
        lifted = [lift(e) for e in d_elems]
        folded = _fold_access(lifted, shape, j, _fold(copy.deepcopy(new_var)))
        if folded is None:
            return None
        new_dst = ast.Tuple(folded, ast.Load())
    elif j == pd:
        return None
    else:                               # an offset of a free dim: the iterations must not overlap
        try:
            e0, e1, e2 = (np.asarray(_eval(d_elems[j], {**env0, var: v})) for v in (0, 1, 2))
        except _Unknown:
            return None
        c = np.unique(e1 - e0)
        if c.size != 1 or c[0] == 0 or not np.array_equal(e2 - e1, e1 - e0) or np.ptp(e0) >= abs(int(c[0])):
            return None
        new_dst = ast.Tuple([lift(e) for e in d_elems], ast.Load())
    new_src = ast.Tuple([lift(e) for e in s_elems], ast.Load())
    # The combined transfer must fit one partition of SBUF.
    try:
        trips = _eval(count, {})
        arrays = [np.asarray(_eval(e, {**env0, var: 0})) for e in d_elems]
        per_iter = int(np.prod(np.broadcast_shapes(*(a.shape for a in arrays))[1:], dtype=np.int64))
    except (_Unknown, ValueError):
        return None if fold is not None else (new_dst, new_src, fold)
    if not isinstance(trips, int) or trips * per_iter * element_bytes(alloc.value) > PARTITION_BUDGET:
        return None
    if fold is not None and not _fold_fits(alloc, shape, fold):
        return None
    return new_dst, new_src, fold


def _fold_fits(alloc: ast.Assign, shape: ast.Tuple, fold: int) -> bool:
    """Whether one block of the tensor with block dim `fold` folded in fits a partition."""
    pd = _par_dim(shape)
    dims = [_literal(e) for e in [shape.elts[fold]] + shape.elts[pd + 1:]]
    if len(dims) < 2 or any(d is None for d in dims):
        return False
    return int(np.prod(dims, dtype=np.int64)) * element_bytes(alloc.value) <= PARTITION_BUDGET


def _paren(node: ast.expr | str) -> str:
    t = node if isinstance(node, str) else text(node)
    return t if t.replace("_", "").replace(".", "").isalnum() else f"({t})"


def _folded_free(elt: ast.expr, block: ast.expr | str, width: ast.expr) -> ast.expr | None:
    """The first free index `elt` of block `block` in a tensor whose block dim was folded into
    that free dim (of `width` elements per block): shifted by width * block."""
    offset = f"{_paren(width)} * {_paren(block)}"
    if isinstance(elt, ast.Slice):
        if elt.step is not None:
            return None
        lo = "0" if elt.lower is None else text(elt.lower)
        hi = text(width) if elt.upper is None else text(elt.upper)
        sl = ast.parse(f"x[{offset} + {lo}:{offset} + {hi}]", mode="eval").body.slice  # type: ignore[attr-defined]
        return ast.Slice(_fold(sl.lower), _fold(sl.upper))
    return ast.parse(f"{offset} + {text(elt)}", mode="eval").body


def _fold_access(elts: list[ast.expr], shape: ast.Tuple, fold: int, block: ast.expr | str | None = None
                 ) -> list[ast.expr] | None:
    """A full subscript of the tensor before the fold, as a subscript of the folded tensor."""
    pd = _par_dim(shape)
    if len(elts) != len(shape.elts) or any(isinstance(e, ast.Starred) or
                                            (isinstance(e, ast.Constant) and e.value is Ellipsis) for e in elts):
        return None
    first = _folded_free(elts[pd + 1], elts[fold] if block is None else block, shape.elts[pd + 1])
    if first is None:
        return None
    out = [e for i, e in enumerate(elts) if i != fold]
    out[pd] = first                   # pd + 1 before the block dim was dropped
    return out


def _fold_edits(names: _Names, alloc: ast.Assign, fold: int, skip: ast.Subscript) -> list[tuple[Span, str]] | None:
    """Span edits folding block dim `fold` of the allocation and of every access into the
    first free dim; None when the tensor is used other than through full subscripts."""
    shape = _shape(alloc)
    assert shape is not None
    pd = _par_dim(shape)
    name = alloc.targets[0].id  # type: ignore[attr-defined]
    if names.bare.get(name):
        return None
    subs = names.subscripts.get(name, [])
    dims = [text(e) for i, e in enumerate(shape.elts) if i != fold]
    a, b = _literal(shape.elts[fold]), _literal(shape.elts[pd + 1])
    dims[pd] = str(a * b) if a is not None and b is not None else f"{_paren(shape.elts[fold])} * {_paren(shape.elts[pd + 1])}"
    edits = [(Span.of(shape), "(" + ", ".join(dims) + ")")]
    for sub in subs:
        if sub is skip:
            continue
        new = _fold_access(_elements(sub), shape, fold)
        if new is None:
            return None
        edits.append((Span.of(sub.slice), ", ".join(text(e) for e in new)))
    return edits


def _axis_position(elts: list[ast.expr], j: int, pd: int | None) -> int:
    """The tile axis element `j` of a basic subscript gives (ints drop; on chip, the partition
    element `pd` is always axis 0)."""
    if pd is None:
        return sum(isinstance(e, ast.Slice) for e in elts[:j])
    return 0 if j == pd else 1 + sum(isinstance(e, ast.Slice) for e in elts[pd + 1:j])


def _widen(elt: ast.expr, var: str, start: ast.expr, count: ast.expr, env: dict[str, int]) -> tuple[str, ast.expr] | None:
    """('int', slice) for an index `var + e`, ('slice', slice) for a tile `a : a + c` with `a`
    stepping by c > 0 per iteration: the slice the loop's iterations cover together."""
    end = _fold(ast.BinOp(copy.deepcopy(start), ast.Add(), copy.deepcopy(count)))
    if isinstance(elt, ast.Slice):
        if elt.lower is None or elt.upper is None or elt.step is not None:
            return None
        c = _step(elt.lower, var, env)
        try:
            width = _eval(elt.upper, {**env, var: 0}) - _eval(elt.lower, {**env, var: 0})
        except _Unknown:
            return None
        if c is None or c <= 0 or width != c or _step(elt.upper, var, env) != c:
            return None
        return "slice", ast.Slice(substitute(elt.lower, var, start), substitute(elt.lower, var, end))
    if _step(elt, var, env) != 1:
        return None
    return "int", ast.Slice(substitute(elt, var, start), substitute(elt, var, end))


def _plan_basic(load: _Load, alloc: ast.Assign, var: str, start: ast.expr, count: ast.expr,
                written: set[str]) -> tuple[ast.expr, ast.expr, int | None] | None:
    """New dst and src index tuples for basic indexing (ints and slices)."""
    d_elems, s_elems = _elements(load.dst), _elements(load.src)
    if written & (_index_names(load.dst.slice) | _index_names(load.src.slice)):
        return None
    dh = [i for i, e in enumerate(d_elems) if _mentions(e, var)]
    sh = [i for i, e in enumerate(s_elems) if _mentions(e, var)]
    shape = _shape(alloc)
    if len(dh) != 1 or len(sh) != 1 or shape is None or any(isinstance(e, ast.Starred) for e in d_elems + s_elems):
        return None
    jd, js, pd = dh[0], sh[0], _par_dim(shape)
    checks = _samples([load.dst.slice, load.src.slice], var)
    widened = []
    for elt in (d_elems[jd], s_elems[js]):
        forms = {_key(_widen(elt, var, start, count, env)) for env in checks}
        if len(forms) != 1 or None in forms:
            return None
        widened.append(_widen(elt, var, start, count, checks[0]))
    (dkind, dslice), (skind, sslice) = widened  # type: ignore[misc]
    fold = None
    new_d = list(d_elems)
    if jd < pd:                                  # a block dim: folded into the first free dim
        if dkind != "int" or not _fold_fits(alloc, shape, jd) or not _whole_dim(d_elems, shape, pd + 1):
            return None
        fold = jd
        width = text(shape.elts[pd + 1])
        if text(d_elems[jd]) != var:
            return None
        new_d = _fold_access(d_elems, shape, jd, var)  # type: ignore[assignment]
        if new_d is None:
            return None
        sl = ast.parse(f"x[{_paren(width)} * {_paren(dslice.lower)}:{_paren(width)} * "  # type: ignore[attr-defined]
                       f"{_paren(dslice.upper)}]", mode="eval").body.slice
        new_d[pd] = ast.Slice(_fold(sl.lower), _fold(sl.upper))
        dkind, dpos = "slice", 1
    else:
        if jd == pd:
            return None
        dpos = _axis_position(d_elems, jd, pd)
        new_d[jd] = dslice
    if dkind != skind or dpos != _axis_position(s_elems, js, None):
        return None
    new_s = list(s_elems)
    new_s[js] = sslice
    return ast.Tuple(new_d, ast.Load()), ast.Tuple(new_s, ast.Load()), fold


def _whole_dim(elts: list[ast.expr], shape: ast.Tuple, j: int) -> bool:
    """Whether subscript element `j` covers the whole dim `j` of the shape."""
    if len(elts) != len(shape.elts) or len(shape.elts) <= j:
        return False
    e = elts[j]
    return (isinstance(e, ast.Slice) and e.step is None and (e.lower is None or text(e.lower) == "0")
            and (e.upper is None or text(e.upper) == text(shape.elts[j])))


def _key(widened: tuple[str, ast.expr] | None) -> str | None:
    return None if widened is None else widened[0] + ast.dump(widened[1])


# ----------------------------------------------------------------------------------------------
# merge_adjacent_loads


def merge_adjacent_loads(source: str) -> list[Applied]:
    """Every two loads of one block from adjacent regions of one HBM tensor into adjacent
    regions of one destination, with nothing between them writing either (nor reading the
    destination), made one load of the union at the first one's place."""
    out = []
    for fn, loop_vars in _functions(source):
        for block in blocks(fn):
            loads = [(i, _load(s)) for i, s in enumerate(block)]
            for i, a in loads:
                if a is None or a.masked():
                    continue
                for k, b in loads[i + 1:]:
                    if b is None:
                        continue
                    app = _merge(source, block, i, k, a, b, loop_vars)
                    if app is not None:
                        out.append(app)
    return out


def _same_call(a: _Load, b: _Load) -> bool:
    """The two calls alike but for their views."""
    def shape(ld: _Load) -> str:
        call = copy.deepcopy(ld.call)
        for n in ast.walk(call):
            if isinstance(n, ast.Subscript) and ast.dump(n) in (ast.dump(ld.dst), ast.dump(ld.src)):
                n.slice = ast.Constant(0)
        return ast.dump(call)
    return type(a.stmt) is type(b.stmt) and call_name(a.call) == call_name(b.call) and shape(a) == shape(b)


def _merge(source: str, block: list[ast.stmt], i: int, k: int, a: _Load, b: _Load,
           loop_vars: set[str]) -> Applied | None:
    if (b.masked() or a.dst_name != b.dst_name or a.src_name != b.src_name or a.dst_name == a.src_name
            or not _same_call(a, b)):
        return None
    between = block[i + 1:k]
    if (any(_mentions(s, a.dst_name) for s in between) or _writes_memory(between, a.src_name)
            or names_read(b.stmt) & names_written(between)):
        return None
    merged = _merge_views(a, b, loop_vars)
    if merged is None:
        return None
    new_dst, new_src, dim = merged
    new_stmt = copy.deepcopy(a.stmt)
    new_load = _load(new_stmt)
    assert new_load is not None
    new_load.dst.slice, new_load.src.slice = new_dst, new_src
    line = ast.unparse(ast.fix_missing_locations(new_stmt))
    try:
        new = _edit_source(source, [(_stmt_span(a.stmt), line), (_stmt_span(b.stmt), _DELETE)])
    except ValueError:
        return None
    return Applied(new, f"merged the loads of {a.src_name} on lines {a.stmt.lineno} and {b.stmt.lineno} "
                        f"(adjacent along dimension {dim}) into one load")


def _differing(xa: list[ast.expr], xb: list[ast.expr]) -> int | None:
    if len(xa) != len(xb):
        return None
    diff = [j for j, (p, q) in enumerate(zip(xa, xb)) if ast.dump(p) != ast.dump(q)]
    return diff[0] if len(diff) == 1 else None


def _merge_views(a: _Load, b: _Load, loop_vars: set[str]) -> tuple[ast.expr, ast.expr, int] | None:
    da, db, sa, sb = _elements(a.dst), _elements(b.dst), _elements(a.src), _elements(b.src)
    jd, js = _differing(da, db), _differing(sa, sb)
    if jd is None or js is None:
        return None
    if _aranges(a.dst) or _aranges(a.src):
        return _merge_advanced(a, b, jd, js, loop_vars)
    merged = []
    for xa, xb, j in ((da, db, jd), (sa, sb, js)):
        p, q = xa[j], xb[j]
        if not (isinstance(p, ast.Slice) and isinstance(q, ast.Slice) and p.step is None and q.step is None
                and None not in (p.lower, p.upper, q.lower, q.upper)):
            return None
        for env in _samples([p, q], ""):
            try:
                lo_a, hi_a, lo_b = (_eval(x, env) for x in (p.lower, p.upper, q.lower))
            except _Unknown:
                return None
            if hi_a != lo_b or hi_a <= lo_a:
                return None
        new = list(xa)
        new[j] = ast.Slice(copy.deepcopy(p.lower), copy.deepcopy(q.upper))
        merged.append(ast.Tuple(new, ast.Load()))
    # The merged dims must be the same tile axis on both sides.
    dpos = sum(isinstance(e, ast.Slice) for e in da[:jd])
    spos = sum(isinstance(e, ast.Slice) for e in sa[:js])
    if dpos != spos:
        return None
    return merged[0], merged[1], jd


def _merge_advanced(a: _Load, b: _Load, jd: int, js: int, loop_vars: set[str]) -> tuple[ast.expr, ast.expr, int] | None:
    """Adjacent `nl.arange` views: the differing elements are `e + nl.arange(n)` and
    `e + n + nl.arange(n)` along an axis no other element uses; the arange doubles."""
    if not (_index_names(a.dst.slice) | _index_names(a.src.slice)) <= loop_vars:
        return None
    env = {v: 0 for v in loop_vars}
    out = []
    axis_seen = None
    for xa, xb, j in ((_elements(a.dst), _elements(b.dst), jd), (_elements(a.src), _elements(b.src), js)):
        terms = _aranges(xa[j])
        if len(terms) != 1 or _arange_axes(terms[0]) is None:
            return None
        axes = _arange_axes(terms[0])
        ax = axes.index(True)  # type: ignore[union-attr]
        try:
            va, vb = np.asarray(_eval(xa[j], env)), np.asarray(_eval(xb[j], env))
            n = _eval(terms[0].value.args[0], {})  # type: ignore[attr-defined]
        except _Unknown:
            return None
        flat = va.reshape(-1)
        if va.size != n or not np.array_equal(flat - flat[0], np.arange(n)) or not np.array_equal(vb, va + n):
            return None
        others = [e for i, e in enumerate(xa) if i != j]
        if any((_arange_axes(t) or []).index(True) == ax for e in others for t in _aranges(e)):
            return None
        if axis_seen is not None and axis_seen != ax:
            return None
        axis_seen = ax
        if ax == 0 and 2 * n > 128:
            return None
        new = [copy.deepcopy(e) for e in xa]
        term = _aranges(new[j])[0]
        term.value.args[0] = ast.Constant(2 * n)  # type: ignore[attr-defined]
        out.append(ast.Tuple(new, ast.Load()))
    return out[0], out[1], jd


# ----------------------------------------------------------------------------------------------
# privatize_buffer


def privatize_buffer(source: str) -> list[Applied]:
    """Every on-chip tile allocated before a loop of its block, used only in that loop, and
    written whole by the first statement of each iteration that mentions it, allocated in the
    loop body instead (right before that statement)."""
    out = []
    for fn, _ in _functions(source):
        names = _Names.of(fn)
        for block in blocks(fn):
            mentioned: list[set[str]] | None = None
            for i, alloc in enumerate(block):
                if not (isinstance(alloc, ast.Assign) and len(alloc.targets) == 1 and isinstance(alloc.targets[0], ast.Name)
                        and isinstance(alloc.value, ast.Call) and call_name(alloc.value) in ("ndarray", "empty")
                        and _is_buffer(alloc, ("sbuf", "psum"))):
                    continue
                name = alloc.targets[0].id
                if mentioned is None:
                    mentioned = [{n.id for n in ast.walk(s) if isinstance(n, ast.Name)} for s in block]
                uses = [j for j in range(i + 1, len(block)) if name in mentioned[j]]
                if len(uses) != 1 or not isinstance(block[uses[0]], ast.For) or _allocation(names, name) is None:
                    continue
                app = _privatize(source, alloc, block[uses[0]], name)  # type: ignore[arg-type]
                if app is not None:
                    out.append(app)
    return out


def _whole(dst: ast.expr, name: str, alloc: ast.Assign) -> bool:
    """Whether a destination is the whole tile `name`."""
    if isinstance(dst, ast.Name):
        return dst.id == name
    if not (isinstance(dst, ast.Subscript) and isinstance(dst.value, ast.Name) and dst.value.id == name):
        return False
    elts = _elements(dst)
    if len(elts) == 1 and isinstance(elts[0], ast.Constant) and elts[0].value is Ellipsis:
        return True
    shape = _shape(alloc)
    if shape is None or len(elts) != len(shape.elts):
        return False
    for e, dim in zip(elts, shape.elts):
        if not isinstance(e, ast.Slice) or e.step is not None:
            return False
        if e.lower is not None and text(e.lower) != "0":
            return False
        if e.upper is not None and text(e.upper) != text(dim):
            return False
    return True


def _privatize(source: str, alloc: ast.Assign, loop: ast.For, name: str) -> Applied | None:
    if _loop_range(loop) is None:
        return None
    first = next((s for s in loop.body if _mentions(s, name)), None)
    if first is None:
        return None
    ins = instr(first)
    load = _load(first)
    if load is not None:
        dst: ast.expr = load.dst
        reads = names_read(load.src) | names_read(load.call)
    elif ins is not None and ins.current:
        dst = ins.dst
        reads = {n.id for k in ins.call.keywords if k.arg != "dst" for n in ast.walk(k.value) if isinstance(n, ast.Name)}
        reads |= {n.id for a in ins.call.args for n in ast.walk(a) if isinstance(n, ast.Name)}
    elif ins is not None and isinstance(ins.dst, ast.Subscript):
        dst = ins.dst
        reads = names_read(ins.call)
    else:
        return None
    call = load.call if load is not None else ins.call  # type: ignore[union-attr]
    if not _whole(dst, name, alloc) or name in reads or call_name(call) in ACCUMULATE or any(
            k.arg == "accumulate" for k in call.keywords):
        return None     # an accumulating write reads the buffer: one per iteration would start from zero
    if load is not None and _mentions(load.src, name):
        return None
    # The allocation's shape and dtype must mean the same inside the loop.
    if names_read(alloc.value) & (names_written(loop.body) | {loop.target.id}):  # type: ignore[attr-defined]
        return None
    indent = " " * first.col_offset
    line = ast.unparse(alloc)
    spans = [(_stmt_span(alloc), _DELETE),
             (Span(first.lineno, first.col_offset, first.lineno, first.col_offset), line + "\n" + indent)]
    try:
        new = _edit_source(source, spans)
    except ValueError:
        return None
    return Applied(new, f"allocated {name} (line {alloc.lineno}) in each iteration of the "
                        f"{loop.target.id} loop (line {loop.lineno}) so that its buffers can rotate")  # type: ignore
