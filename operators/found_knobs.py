"""Knobs found in any kernel: the integer constants that size tiles, loop splits and buffers.

Official, user and LLM kernels declare no `# tune:` knobs, yet their tile sizes are plain
integers in the source. This module finds them from the AST:
- a *named constant*: `NAME = 512` assigned once in its scope (`tile_size_S`, `TILE_N`);
- a *literal*: every occurrence of one integer value (>= 2) in a tiling position: the bounds of
  a `range`/`affine_range`/`nl.arange`/`par_dim`, an element of a shape tuple, a slice bound,
  or a factor multiplying a loop variable;
- a *split*: a loop over a literal trip count T whose variable is scaled by a literal tile C
  (`for i in nl.affine_range(7): ... 1024 * i`) or by a named constant (`n * TILE_N`): T and C
  change together, their product kept (7 x 1024 <-> 14 x 512).
Candidate values come from the target's limits and the problem's shapes (`candidates`): no
value above the largest input dimension, none above the partition count for a knob that sizes a
partition dimension (`par_dim(n)`, `nl.arange(n)[:, None]`, the first dimension of an on-chip
tensor), none past one PSUM bank (2 KiB per partition) for a knob that sizes a PSUM tile's free
dimension. Whether a value within them is legal is for the correctness gate to decide, as for any
child.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from .edits import Span, replace_spans
from .knobs import find_knobs
from .rewrites.program import call_name, element_bytes

RANGES = {"range", "affine_range", "sequential_range", "static_range", "arange", "par_dim"}
SHAPED = {"ndarray", "zeros", "ones", "full", "empty", "shared_constant", "broadcast_to", "reshape"}
FACTORS = (2, 4)            # a value moves by these factors up or down
LITERAL = "literal"
PSUM_BANK_BYTES = 2048      # per partition, NeuronCore-v2 to v4 (16 KiB of PSUM in 8 banks)
ON_CHIP = {"sbuf", "psum"}


@dataclass(frozen=True)
class FoundKnob:
    """One knob: its name for notes, value, and the literal occurrences it stands for."""

    name: str                    # "tile_size_S", or LITERAL for every occurrence of one value
    value: int
    sites: tuple[Span, ...]
    trip: bool = False           # a loop's trip count (alone, it would cover the data wrongly)
    partition: bool = False      # sizes a partition dimension somewhere
    psum_bytes: int = 0          # sizes the free dimension of a PSUM tile of elements this wide (0: none)

    def limit(self, limit: int, partitions: int) -> int:
        """The largest value it may take under `limit` on a target of `partitions` partitions."""
        if self.partition:
            limit = min(limit, partitions)
        if self.psum_bytes:
            limit = min(limit, PSUM_BANK_BYTES // self.psum_bytes)
        return limit


@dataclass(frozen=True)
class Split:
    """A loop of `trip` iterations over tiles of `tile`: the two change together."""

    trip: FoundKnob
    tile: FoundKnob


@dataclass(frozen=True)
class Move:
    """A knob move: new values for one or two knobs, with what it does in words."""

    values: tuple[tuple[FoundKnob, int], ...]

    @property
    def note(self) -> str:
        lines = sorted({s.lineno for k, _ in self.values for s in k.sites})
        places = sum(len(k.sites) for k, _ in self.values)
        where = (f"line {lines[0]}" if len(lines) == 1 else f"lines {', '.join(map(str, lines))}" if len(lines) <= 4
                 else f"{places} places on lines {lines[0]}-{lines[-1]}")
        what = " and ".join(f"{k.name} {k.value} -> {v}" for k, v in self.values)
        return f"{what} ({where})"


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _buffer(call: ast.Call) -> str:
    """"sbuf", "psum", "shared_hbm", ... of an allocation's `buffer=nl.X` ("" when not written so)."""
    b = _keyword(call, "buffer")
    return b.attr if isinstance(b, ast.Attribute) else ""


def _partition_arange(node: ast.Subscript) -> bool:
    """`nl.arange(n)[:, None]` (or `[:, None, None]`): an index along the partition dimension."""
    sl = node.slice
    return (isinstance(node.value, ast.Call) and call_name(node.value) == "arange" and isinstance(sl, ast.Tuple)
            and len(sl.elts) >= 2 and isinstance(sl.elts[0], ast.Slice)
            and all(isinstance(e, ast.Constant) and e.value is None for e in sl.elts[1:]))


class _Finder(ast.NodeVisitor):
    """Collects integer literals in tiling positions, named constants and loop splits."""

    def __init__(self, declared: set[str]) -> None:
        self.declared = declared
        self.literals: dict[int, list[ast.Constant]] = {}
        self.trip_literals: set[int] = set()     # id() of literals that are trip counts
        self.assigned: dict[str, list[ast.Assign]] = {}
        self.splits: list[tuple[ast.Constant, ast.Constant]] = []
        self.named_splits: list[tuple[ast.Constant, str]] = []   # (trip literal, the constant scaling it)
        # sizes of partition dimensions and of PSUM tiles' free dimension: literals by id(), names
        self.partition: set[int | str] = set()
        self.psum: dict[int | str, int] = {}

    def _mark(self, node: ast.AST, psum_bytes: int = 0) -> None:
        key = id(node) if _is_int(node) else node.id if isinstance(node, ast.Name) else None
        if key is None:
            return
        if psum_bytes:
            self.psum[key] = max(self.psum.get(key, 0), psum_bytes)
        else:
            self.partition.add(key)

    def _mark_shape(self, call: ast.Call, shape: ast.AST) -> None:
        """The partition and PSUM free sizes of an on-chip allocation's shape tuple."""
        buffer = _buffer(call)
        if not isinstance(shape, ast.Tuple) or buffer not in ON_CHIP:
            return
        elts = shape.elts
        par = next((i for i, e in enumerate(elts) if isinstance(e, ast.Call) and call_name(e) == "par_dim"), None)
        if par is None and elts:
            self._mark(elts[0])
            par = 0
        if buffer == "psum" and par is not None and len(elts) == par + 2:   # one free dimension
            self._mark(elts[-1], element_bytes(call))

    def _take(self, node: ast.AST) -> None:
        if _is_int(node) and node.value >= 2:
            self.literals.setdefault(node.value, []).append(node)

    def _take_shape(self, node: ast.AST) -> None:
        if isinstance(node, ast.Tuple):
            for e in node.elts:
                self._take(e)
                if isinstance(e, ast.Call) and call_name(e) == "par_dim":
                    for a in e.args:
                        self._take(a)

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            if isinstance(t, ast.Name):
                self.assigned.setdefault(t.id, []).append(node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self.assigned.setdefault(node.target.id, []).append(node)  # type: ignore[arg-type]
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = call_name(node)
        if name in RANGES:
            for a in node.args:
                self._take(a)
        if name == "par_dim":
            for a in node.args:
                self._mark(a)
        if name in SHAPED:
            for a in list(node.args[:1]) + [k.value for k in node.keywords if k.arg == "shape"]:
                self._take_shape(a)
                self._mark_shape(node, a)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if _partition_arange(node):
            for a in node.value.args:   # type: ignore[attr-defined]
                self._mark(a)
        self.generic_visit(node)

    def visit_Slice(self, node: ast.Slice) -> None:
        for part in (node.lower, node.upper, node.step):
            if part is not None:
                for sub in ast.walk(part):
                    self._take(sub)
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        it = node.iter
        if (isinstance(node.target, ast.Name) and isinstance(it, ast.Call) and call_name(it) in RANGES
                and len(it.args) == 1 and _is_int(it.args[0])):
            trip = it.args[0]
            self.trip_literals.add(id(trip))
            var = node.target.id
            for sub in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mult):
                    for a, b in ((sub.left, sub.right), (sub.right, sub.left)):
                        if not (isinstance(b, ast.Name) and b.id == var):
                            continue
                        if _is_int(a) and a.value >= 2:
                            self._take(a)
                            self.splits.append((trip, a))
                        elif isinstance(a, ast.Name):
                            self.named_splits.append((trip, a.id))
        self.generic_visit(node)


def find(source: str) -> tuple[list[FoundKnob], list[Split]]:
    """The knobs and splits of a kernel source; ([], []) when it does not parse. Declared
    `# tune:` knobs are left to their own operator."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [], []
    declared = set(find_knobs(source))
    finder = _Finder(declared)
    finder.visit(tree)
    knobs: list[FoundKnob] = []
    constant_sites: set[int] = set()
    for name, assigns in finder.assigned.items():
        node = assigns[0]
        if (name in declared or len(assigns) != 1 or not isinstance(node, ast.Assign) or len(node.targets) != 1
                or not _is_int(node.value) or node.value.value < 2):
            continue
        constant_sites.add(id(node.value))
        knobs.append(FoundKnob(name, node.value.value, (Span.of(node.value),), partition=name in finder.partition,
                               psum_bytes=finder.psum.get(name, 0)))
    by_value: dict[int, FoundKnob] = {}
    for value, nodes in sorted(finder.literals.items()):
        unique = {id(n): n for n in nodes if id(n) not in constant_sites}
        if unique:
            sites = tuple(sorted({Span.of(n) for n in unique.values()}, key=lambda s: (s.lineno, s.col)))
            trip = any(i in finder.trip_literals for i in unique)
            by_value[value] = FoundKnob(LITERAL, value, sites, trip, any(i in finder.partition for i in unique),
                                        max((finder.psum.get(i, 0) for i in unique), default=0))
    knobs += by_value.values()
    splits = list({(t.value, c.value): Split(by_value[t.value], by_value[c.value])
                   for t, c in finder.splits if t.value in by_value and c.value in by_value
                   and t.value != c.value}.values())
    named = {k.name: k for k in knobs if k.name != LITERAL}
    splits += list({(t.value, name): Split(by_value[t.value], named[name])
                    for t, name in finder.named_splits if t.value in by_value and name in named}.values())
    return knobs, splits


def candidates(value: int, limit: int) -> list[int]:
    """Values a knob may take from `value`: x/4, x/2, 2x, 4x within [1, limit], plus the nearest
    power of two for a value that is none (7168 -> 4096, 8192)."""
    out = {value * f for f in FACTORS} | {value // f for f in FACTORS if value % f == 0}
    if value & (value - 1):
        p = 1 << (value.bit_length() - 1)
        out |= {p, 2 * p}
    return sorted(v for v in out if 1 <= v <= limit and v != value)


def moves(source: str, dims: frozenset[int], partitions: int) -> list[Move]:
    """Every move of the knobs found in `source`, for a problem whose inputs have the dimensions
    `dims` on a target of `partitions` partitions. Values go up to the largest of those, and to
    a knob's own limit (`FoundKnob.limit`: partitions, a PSUM bank). A literal equal to an input
    dimension (a data size) or to the partition count (the partition tile, already the largest)
    moves only as part of a split."""
    limit = max(dims | {partitions})
    knobs, splits = find(source)
    out = [Move(((k, v),)) for k in knobs if not k.trip
           and not (k.name == LITERAL and (k.value in dims or k.value == partitions))
           for v in candidates(k.value, k.limit(limit, partitions))]
    for s in splits:
        for f in FACTORS:
            if s.tile.value % f == 0:
                out.append(Move(((s.trip, s.trip.value * f), (s.tile, s.tile.value // f))))
            if s.trip.value % f == 0 and s.tile.value * f <= s.tile.limit(limit, partitions):
                out.append(Move(((s.trip, s.trip.value // f), (s.tile, s.tile.value * f))))
    return out


def apply(source: str, move: Move) -> str:
    """`source` with the move's knobs set to their new values."""
    return replace_spans(source, [(site, str(v)) for k, v in move.values for site in k.sites])


def random_move(source: str, dims: frozenset[int], partitions: int,
                rng: np.random.Generator) -> tuple[str, str] | None:
    """(child source, note) of one move drawn uniformly, or None when the kernel has none."""
    found = moves(source, dims, partitions)
    if not found:
        return None
    move = found[rng.integers(len(found))]
    return apply(source, move), move.note
