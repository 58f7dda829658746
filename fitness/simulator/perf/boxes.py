"""Boxes: one [start, stop) interval per dimension, the shape of every access region."""

from __future__ import annotations

import math

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
    return all(o0 <= i0 and i1 <= o1 for (o0, o1), (i0, i1) in zip(outer, inner))


def intersect(a: Box, b: Box) -> Box:
    return tuple((max(a0, b0), min(a1, b1)) for (a0, a1), (b0, b1) in zip(a, b))


def volume(box: Box) -> int:
    return math.prod(b - a for a, b in box)


def shape(box: Box) -> tuple[int, ...]:
    return tuple(b - a for a, b in box)


def shift(box: Box, delta: tuple[int, ...]) -> Box:
    return tuple((a + d, b + d) for (a, b), d in zip(box, delta))


def offset(src: Box, dst: Box) -> tuple[int, ...]:
    """The per-dim shift that maps `src` onto `dst`."""
    return tuple(d0 - s0 for (s0, _), (d0, _) in zip(src, dst))


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
