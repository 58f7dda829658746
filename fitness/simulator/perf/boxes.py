"""Boxes: one [start, stop) interval per dimension, the shape of every access region."""

from __future__ import annotations

Box = tuple[tuple[int, int], ...]


def overlaps(a: Box, b: Box) -> bool:
    if a is b or a == b:
        return True
    for (a0, a1), (b0, b1) in zip(a, b):
        if a0 >= b1 or b0 >= a1:
            return False
    return True


def covers(outer: Box, inner: Box) -> bool:
    """True when `inner` lies inside `outer`."""
    if outer == inner:
        return True
    for (o0, o1), (i0, i1) in zip(outer, inner):
        if i0 < o0 or o1 < i1:
            return False
    return True


# The helpers below run in the inner loops of the compiler passes: list comprehensions
# and plain loops, which are faster than generator expressions.

def intersect(a: Box, b: Box) -> Box:
    return tuple([(a0 if a0 > b0 else b0, a1 if a1 < b1 else b1)
                  for (a0, a1), (b0, b1) in zip(a, b)])


def volume(box: Box) -> int:
    v = 1
    for a, b in box:
        v *= b - a
    return v


def shape(box: Box) -> tuple[int, ...]:
    return tuple([b - a for a, b in box])


def shift(box: Box, delta: tuple[int, ...]) -> Box:
    if not any(delta):
        return box   # the usual case: reused results sit where the duplicate's would
    return tuple([(a + d, b + d) for (a, b), d in zip(box, delta)])


def offset(src: Box, dst: Box) -> tuple[int, ...]:
    """The per-dim shift that maps `src` onto `dst`."""
    return tuple([d0 - s0 for (s0, _), (d0, _) in zip(src, dst)])


def bounding(boxes: list[Box]) -> Box:
    return tuple((min(b[d][0] for b in boxes), max(b[d][1] for b in boxes))
                 for d in range(len(boxes[0])))


def join(a: Box, b: Box) -> Box | None:
    """The box a and b make together when they abut along one dimension and agree on all
    others; None otherwise."""
    axis = -1
    for d, ((a0, a1), (b0, b1)) in enumerate(zip(a, b)):
        if (a0, a1) == (b0, b1):
            continue
        if axis >= 0 or not (a1 == b0 or b1 == a0):
            return None
        axis = d
    if axis < 0:
        return a
    lo = min(a[axis][0], b[axis][0])
    hi = max(a[axis][1], b[axis][1])
    return a[:axis] + ((lo, hi),) + a[axis + 1:]


class BoxMap:
    """Boxes of one block (all with the same number of dimensions) mapped to values, with
    a search for the stored boxes that overlap a given box.

    Besides the plain dict (`items`), a map of more than SCAN_UP_TO boxes keeps them in a
    trie of their intervals (built at its first search): level d maps a box's interval
    along dimension d to the next level, and the last level to the box itself. A search
    descends only into intervals that overlap the query's along every dimension so far,
    so it touches a few of the boxes of a tile written slice by slice instead of all."""

    __slots__ = ("items", "_trie")
    SCAN_UP_TO = 4

    def __init__(self, items: dict[Box, object] | None = None) -> None:
        self.items: dict[Box, object] = {} if items is None else items
        self._trie: dict | None = None

    def __setitem__(self, box: Box, value) -> None:
        if self._trie is not None and box not in self.items:
            self._insert(box)
        self.items[box] = value

    def __delitem__(self, box: Box) -> None:
        del self.items[box]
        if self._trie is not None:
            path = []
            node = self._trie
            for iv in box[:-1]:
                path.append((node, iv))
                node = node[iv]
            del node[box[-1]]
            while path and not node:   # prune levels left empty
                node, iv = path.pop()
                del node[iv]

    def _insert(self, box: Box) -> None:
        node = self._trie
        for iv in box[:-1]:
            child = node.get(iv)
            if child is None:
                child = node[iv] = {}
            node = child
        node[box[-1]] = box

    def overlapping(self, box: Box) -> list[Box]:
        """The stored boxes that overlap `box` as `overlaps` decides (so `box` itself,
        when stored, even if empty), in no particular order."""
        items = self.items
        if len(items) <= self.SCAN_UP_TO or not box:
            return [b for b in items if overlaps(b, box)]
        if self._trie is None:
            self._trie = {}
            for b in items:
                self._insert(b)
        nodes = [self._trie]
        for lo, hi in box:
            nodes = [child for node in nodes for (a, b), child in node.items()
                     if a < hi and lo < b]
            if not nodes:
                break
        if box in items and not all(lo < hi for lo, hi in box):
            nodes.append(box)   # a box with an empty interval overlaps only itself
        return nodes
