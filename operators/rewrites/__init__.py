"""Structural rewrites: small, named, semantics-preserving transformations of NKI source in
both dialects (where the dialect has the construct: `nl.matmul` is legacy only). Each returns
every way it applies to a kernel (an empty list when its precondition does not hold); no
rewrite scores itself: every child goes through the fitness.
"""

from __future__ import annotations

from typing import Callable

from .dma import coalesce_loads, merge_adjacent_loads, privatize_buffer
from .engines import move_engine
from .fuse import fuse_activation
from .loops import hoist_invariants, interchange, merge_loops, split_loop
from .matmul import pretranspose_matmul
from .program import Applied, parse

REWRITES: dict[str, Callable[[str], list[Applied]]] = {
    "fuse_activation": fuse_activation,
    "move_engine": move_engine,
    "hoist_invariants": hoist_invariants,
    "interchange": interchange,
    "merge_loops": merge_loops,
    "split_loop": split_loop,
    "coalesce_loads": coalesce_loads,
    "merge_adjacent_loads": merge_adjacent_loads,
    "privatize_buffer": privatize_buffer,
    "pretranspose_matmul": pretranspose_matmul,
}


def applications(source: str, names: tuple[str, ...] | None = None) -> dict[str, list[Applied]]:
    """The applications of each rewrite of `names` (default: all) that change the source;
    rewrites that decline are left out. (Whether a result parses is checked for the one drawn:
    `parses`; parsing every application costs more than the rewrites themselves.)"""
    out = {}
    for name in names if names is not None else tuple(REWRITES):
        apps = [a for a in REWRITES[name](source) if a.source != source]
        if apps:
            out[name] = apps
    return out


def parses(app: Applied) -> bool:
    return parse(app.source) is not None


__all__ = ["Applied", "REWRITES", "applications", "parses"]
