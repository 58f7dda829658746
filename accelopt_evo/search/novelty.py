"""Novelty (`variation.novelty`): a child too close to a kernel already evaluated is not evaluated.

The distance of two kernels is taken over their normalized ASTs (fitness.correctness.normalize: comments
and layout do not count): each AST becomes the sequence of its nodes in preorder, a node
written as its type with its name, attribute, argument name or constant value, and then the
bag of its runs of SHINGLE consecutive nodes; the distance is the Dice dissimilarity of the
two bags, 1 - 2 |A & B| / (|A| + |B|): 0 for the same normalized source, 1 for kernels sharing
no run. Changing one constant of a kernel of n nodes moves it by about SHINGLE / n (at the
NKIBench baselines, n is 300 to 1500); swapping two statements or two knob values moves it too,
a new loop or another engine assignment much more.

A child closer than the threshold to any kernel of the problem evaluated so far is sent back
to its operator once (engine.py); a retry that is still too close is dropped. Both count in
the logbook (`novelty_rejected`). The index is rebuilt from the known kernels' sources on
resume: it is a function of the run folder, not a checkpointed state.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass, field

from fitness.correctness.normalize import normalize_source

Shape = Counter
SHINGLE = 3


def _label(node: ast.AST) -> str:
    """A node as the distance sees it: its type and what it names or holds."""
    name = type(node).__name__
    for attr in ("id", "attr", "arg", "name"):
        value = getattr(node, attr, None)
        if isinstance(value, str):
            return f"{name}:{value}"
    if isinstance(node, ast.Constant):
        return f"{name}:{node.value!r}"
    return name


def _preorder(tree: ast.AST) -> list[str]:
    """The labels of a tree's nodes in preorder (without recursion: sources may nest deeply)."""
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        out.append(_label(node))
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


def shape(source: str) -> Shape:
    """The bag of runs of SHINGLE consecutive preorder nodes of the normalized source's AST
    (module docstring); a source that does not parse is the bag of its normalized lines."""
    try:
        tokens = _preorder(ast.parse(normalize_source(source)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tokens = [f"line:{line}" for line in normalize_source(source).splitlines()]
    return Counter(tuple(tokens[i:i + SHINGLE]) for i in range(max(1, len(tokens) - SHINGLE + 1)))


def distance(a: Shape, b: Shape) -> float:
    """Dice dissimilarity of two bags (module docstring)."""
    total = sum(a.values()) + sum(b.values())
    if total == 0:
        return 0.0
    return 1.0 - 2.0 * sum((a & b).values()) / total


@dataclass
class NoveltyIndex:
    """The shapes of the kernels evaluated for one problem, by kernel id."""

    shapes: dict[str, Shape] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)

    def add(self, kernel_id: str, source: str) -> None:
        if kernel_id not in self.shapes:
            bag = shape(source)
            self.shapes[kernel_id] = bag
            self.sizes[kernel_id] = sum(bag.values())

    def nearest(self, kernel_id: str, source: str, threshold: float) -> str | None:
        """The id of a kernel other than `kernel_id` closer than `threshold` to `source`, or
        None (an exact duplicate is the dedupe's business, not novelty's)."""
        bag = shape(source)
        n = sum(bag.values())
        for kid, other in self.shapes.items():
            m = self.sizes[kid]
            if kid == kernel_id:
                continue
            if n + m and abs(n - m) / (n + m) >= threshold:   # the sizes alone keep them apart
                continue
            d = distance(bag, other)
            if d < threshold:
                return kid
        return None
