"""Which elements of a kernel output were written.

Stores usually write boxes (an affine unit-stride tile); those are kept as boxes and
checked at the end on a grid compressed to the box boundaries, so covering a 50M-element
output costs a few kilobytes. Writes that are not boxes (strided or non-box masks) mark
a full-size bitmap instead.
"""

from __future__ import annotations

import bisect

import numpy as np


class Coverage:
    """Written elements of one tensor of shape `shape`."""

    __slots__ = ("shape", "boxes", "bitmap")

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape
        self.boxes: list[tuple[tuple[int, int], ...]] = []
        self.bitmap: np.ndarray | None = None

    def add_box(self, box: tuple[tuple[int, int], ...]) -> None:
        self.boxes.append(box)

    def full_bitmap(self) -> np.ndarray:
        """The element bitmap for irregular writes (allocated on first need)."""
        if self.bitmap is None:
            self.bitmap = np.zeros(self.shape, dtype=bool)
        return self.bitmap

    def missing(self) -> tuple[int, tuple[int, ...] | None]:
        """(number of elements never written, index of the first one)."""
        shape = self.shape
        if self.bitmap is not None:
            bm = self.bitmap
            for box in self.boxes:
                bm[tuple(slice(lo, hi) for lo, hi in box)] = True
            n = int(bm.size - np.count_nonzero(bm))
            first = tuple(int(i) for i in np.argwhere(~bm)[0]) if n else None
            return n, first
        cuts = []
        for d, n in enumerate(shape):
            edges = {0, n}
            for box in self.boxes:
                edges.add(box[d][0])
                edges.add(box[d][1])
            cuts.append(sorted(e for e in edges if 0 <= e <= n))
        grid = np.zeros(tuple(len(c) - 1 for c in cuts), dtype=bool)
        for box in self.boxes:
            grid[tuple(slice(bisect.bisect_left(c, lo), bisect.bisect_left(c, hi))
                       for c, (lo, hi) in zip(cuts, box))] = True
        if grid.all():
            return 0, None
        sizes = [np.diff(c) for c in cuts]
        cell = np.ones(grid.shape, dtype=np.int64)
        for d, sz in enumerate(sizes):
            shp = [1] * len(shape)
            shp[d] = len(sz)
            cell = cell * sz.reshape(shp)
        n = int(cell[~grid].sum())
        first_cell = np.argwhere(~grid)[0]
        return n, tuple(int(c[i]) for c, i in zip(cuts, first_cell))
