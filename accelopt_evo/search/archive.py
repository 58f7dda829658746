"""MAP-Elites (`selection.strategy = "map_elites"`): the fastest valid kernel per cell of a grid
over behaviour descriptors (descriptors.py).

The grid: the busiest engine (tensor, vector, scalar, gpsimd, dma, or none) times
`selection.dma_bins` equal bins of the DMA's share of the active time. The archive is the
population: each of its kernels is the elite of its own cell, so a checkpoint's population is
the archive and nothing else needs keeping. A kernel without descriptors falls in ("none", 0).

Insertion (`insert`): the candidates are considered fastest first (by `key`, the latency known
before judgement); a candidate takes its cell when the cell is empty or it is faster than the
cell's elite, and only then is `valid` asked (cascade.py: a slower child's correctness never
changes the archive). Parents (`parents`): cells drawn uniformly at random with replacement
among the occupied cells (the rule of the original MAP-Elites), in cell order, so that a rare
behaviour is as likely a parent as the crowded one.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

from .descriptors import ENGINES, NO_ENGINE, descriptors

Cell = tuple[str, int]
_ENGINE_ORDER = {e: i for i, e in enumerate((*ENGINES, NO_ENGINE))}


def cell(ind: Any, bins: int) -> Cell:
    """The grid cell of a kernel, from its result's descriptors."""
    d = descriptors(ind.result)
    if not d:
        return (NO_ENGINE, 0)
    return (d["engine"], min(bins - 1, int(d["dma_share"] * bins)))


def _order(c: Cell) -> tuple[int, int]:
    return (_ENGINE_ORDER.get(c[0], len(_ENGINE_ORDER)), c[1])


def archive_of(kernels: Sequence[Any], bins: int, key: Callable[[Any], float]) -> dict[Cell, Any]:
    """The archive whose elites are `kernels` (valid): the fastest of each cell, the first of equals."""
    archive: dict[Cell, Any] = {}
    for ind in kernels:
        c = cell(ind, bins)
        if c not in archive or key(ind) > key(archive[c]):
            archive[c] = ind
    return archive


def insert(archive: dict[Cell, Any], candidates: Sequence[Any], bins: int, valid: Callable[[Any], bool],
           key: Callable[[Any], float]) -> tuple[dict[Cell, Any], int]:
    """A new archive with `candidates` inserted (module docstring), and how many took a cell
    (filled an empty one or replaced its elite). `archive` is left as it was."""
    out = dict(archive)
    placed = 0
    for ind in sorted(candidates, key=key, reverse=True):   # stable: equals keep their order
        c = cell(ind, bins)
        elite = out.get(c)
        if elite is ind or (elite is not None and key(ind) <= key(elite)):
            continue
        if valid(ind):
            out[c] = ind
            placed += 1
    return out, placed


def elites(archive: dict[Cell, Any]) -> list[Any]:
    """The archive's kernels in cell order (engine, then DMA bin): the population."""
    return [archive[c] for c in sorted(archive, key=_order)]


def parents(archive: dict[Cell, Any], count: int, rng: random.Random) -> list[Any]:
    """`count` parents: occupied cells drawn uniformly with replacement (module docstring)."""
    ordered = elites(archive)
    return [ordered[rng.randrange(len(ordered))] for _ in range(count)] if ordered else []
