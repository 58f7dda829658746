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
Candidate values come from the target's limits and the problem's shapes (`candidates`); whether
a value is legal is for the correctness gate to decide, as for any child.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from .edits import Span, replace_spans
from .knobs import find_knobs
from .rewrites.program import call_name

RANGES = {"range", "affine_range", "sequential_range", "static_range", "arange", "par_dim"}
SHAPED = {"ndarray", "zeros", "ones", "full", "empty", "shared_constant", "broadcast_to", "reshape"}
FACTORS = (2, 4)            # a value moves by these factors up or down
LITERAL = "literal"


@dataclass(frozen=True)
class FoundKnob:
    """One knob: its name for notes, value, and the literal occurrences it stands for."""

    name: str                    # "tile_size_S", or LITERAL for every occurrence of one value
    value: int
    sites: tuple[Span, ...]
    trip: bool = False           # a loop's trip count (alone, it would cover the data wrongly)


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


class _Finder(ast.NodeVisitor):
    """Collects integer literals in tiling positions, named constants and loop splits."""

    def __init__(self, declared: set[str]) -> None:
        self.declared = declared
        self.literals: dict[int, list[ast.Constant]] = {}
        self.trip_literals: set[int] = set()     # id() of literals that are trip counts
        self.assigned: dict[str, list[ast.Assign]] = {}
        self.splits: list[tuple[ast.Constant, ast.Constant]] = []
        self.named_splits: list[tuple[ast.Constant, str]] = []   # (trip literal, the constant scaling it)

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
        if name in SHAPED:
            for a in list(node.args[:1]) + [k.value for k in node.keywords if k.arg == "shape"]:
                self._take_shape(a)
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
        knobs.append(FoundKnob(name, node.value.value, (Span.of(node.value),)))
    by_value: dict[int, FoundKnob] = {}
    for value, nodes in sorted(finder.literals.items()):
        unique = {id(n): n for n in nodes if id(n) not in constant_sites}
        if unique:
            sites = tuple(sorted({Span.of(n) for n in unique.values()}, key=lambda s: (s.lineno, s.col)))
            trip = any(i in finder.trip_literals for i in unique)
            by_value[value] = FoundKnob(LITERAL, value, sites, trip)
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
    `dims` on a target of `partitions` partitions. Values go up to the largest of those. A
    literal equal to an input dimension (a data size) or to the partition count (the partition
    tile, already the largest) moves only as part of a split."""
    limit = max(dims | {partitions})
    knobs, splits = find(source)
    out = [Move(((k, v),)) for k in knobs if not k.trip
           and not (k.name == LITERAL and (k.value in dims or k.value == partitions))
           for v in candidates(k.value, limit)]
    for s in splits:
        for f in FACTORS:
            if s.tile.value % f == 0:
                out.append(Move(((s.trip, s.trip.value * f), (s.tile, s.tile.value // f))))
            if s.trip.value % f == 0 and s.tile.value * f <= limit:
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
