"""Dependency graph: which earlier ops each op must wait for.

Data edges come from overlapping regions of one block (read after write, write after read,
write after write). Resource edges model the compiler's physical buffers: instances of an
allocation site rotate through `n_buf` SBUF slots, PSUM blocks through the 8 banks, so a new
instance waits until the instance that last used its slot has been read for the last time
(trainium-perf-model.md §7.4 steps 4-5). Address edges model SBUF as one space: a tile is
allocated before earlier, dead tiles are freed only within the room the live ones leave
(`_capacity_edges`; measured: mamba v2's cliff on trn1 past 6144, the NKIBench mamba
baseline at 7168). Every edge points backwards in program order. Directly allocated tensors
have no slots of the compiler's: their accesses are physical (lowering.py), and the data edges
between tiles on the same bytes are their rotation.

Legacy kernels: neuronx-cc gives an allocation site in a sequential (or Python `range`) loop
`sequential_buffers` copies (fitted). Current kernels: the NKI compiler rotates the addresses
of buffers allocated in a loop body ("address rotation ... enabled by default and cannot be
opted out of", NKI 0.3.0 release notes, `release-notes/components/nki.rst`), whatever the
loop, so every site gets the rotating copies that fit (at most `max_buffers`; the depth of
the rotation is not documented).
"""

from __future__ import annotations

import numpy as np

from .. import trace as tr
from . import boxes
from .hardware import Hardware
from .lowering import BlockKey, Op, Program
from .params import Params


def build(prog: Program, hw: Hardware, params: Params) -> list[list[int]]:
    """preds[i] = indices of the ops op i waits for (all smaller than i; unordered, may repeat)."""
    preds, onchip, first, last = _data_edges(prog)
    extra = _slot_edges(prog, onchip, first, last, hw, params)
    # The scheduler waits for the latest of an op's predecessors: their order and
    # repetitions do not matter, so the extra edges are appended as they are.
    for edges in (extra, _capacity_edges(prog, onchip, first, last, hw)):
        for i, js in edges.items():
            preds[i] += js
    return preds


def _capacity_edges(prog: Program, onchip: list[BlockKey], first: list[int], last: list[int],
                    hw: Hardware) -> dict[int, list[int]]:
    """SBUF addresses: a tile can only be allocated once enough earlier tiles are dead.

    In program order the live tiles fit (the overflow pass sees to it); what is left over,
    the headroom, is all the room there is for the next tiles to be allocated before the
    previous ones are freed. Where the pass cannot bring the program under usable SBUF, the
    model does not know how neuronx-cc fitted it, only that it did: the headroom is then
    measured against the program's own peak (measured: lora, whose pass ends at 188 KiB:
    perf README, "Validation").

    Freed space is reused in the order it was freed (oldest first, which lets iterations
    overlap as far as the room allows), so the first access of a new tile waits for the
    last access of the tile whose release brings the space still held by tiles dead in
    program order within the headroom."""
    mem = prog.block_memory
    blocks = [b for b in onchip if mem[b] == tr.SBUF]
    if not blocks:
        return {}
    firsts = np.array([first[b] for b in blocks], dtype=np.int64)
    lasts = np.array([last[b] for b in blocks], dtype=np.int64)
    sizes = np.array([prog.block_bytes(b) for b in blocks], dtype=np.float64)
    n = len(prog.ops)
    delta = np.zeros(n + 1)
    np.add.at(delta, firsts, sizes)
    np.add.at(delta, lasts + 1, -sizes)
    footprint = np.cumsum(delta)[:n]
    order = np.argsort(lasts, kind="stable")
    free_at, freed = lasts[order], np.cumsum(sizes[order])
    allocs = np.unique(firsts)
    k = np.searchsorted(free_at, allocs, side="left")      # frees before each allocation
    has = k > 0
    allocs, k = allocs[has], k[has]
    capacity = max(hw.sbuf_usable_bytes_per_partition, float(footprint.max()))
    headroom = capacity - footprint[allocs]
    # All but the last `headroom` bytes freed before the allocation must really be free:
    # it waits for the free event at which the running total reaches the rest.
    held = freed[k - 1]
    m = np.minimum(np.searchsorted(freed, held - headroom, side="left"), k - 1)
    need = held - headroom > 0
    extra: dict[int, list[int]] = {}
    for i, j in zip(allocs[need].tolist(), free_at[m[need]].tolist()):
        extra.setdefault(i, []).append(j)
    return extra


def _skip(prog: Program) -> list[bool]:
    """Per block: True when its accesses cannot order anything: HBM tensors other than the
    kernel's private scratch and spill space (inputs are never written; outputs are
    assumed write-only)."""
    tensors = prog.tensors
    return [m == tr.HBM and tensors[t].kind not in ("scratch", "spill")
            for m, t in zip(prog.block_memory, prog.block_tensor)]


def _data_edges(prog: Program):
    """Data edges, plus the on-chip blocks in the order of their first access and the
    first and last op index of every block (-1: not accessed; on-chip blocks only).

    Per block, the latest writer of every written box and the readers of every read box
    since; a block whose written boxes are pairwise disjoint ("untangled", the usual case:
    whole tiles or slices) answers an access to exactly one of its boxes without scanning.
    Per-block state is in lists indexed by block (blocks are small ints). Readers are
    recorded only while a later op still writes the block: no other op looks at them."""
    skip = _skip(prog)
    mem = prog.block_memory
    n = len(mem)
    last_write = [-1] * n
    for i, op in enumerate(prog.ops):
        for bk, _ in op.writes:
            last_write[bk] = i
    writers: list[boxes.BoxMap | None] = [None] * n   # box -> latest writer
    readers: list[dict[boxes.Box, list[int]] | None] = [None] * n
    tangled: set[BlockKey] = set()
    onchip: list[BlockKey] = []
    first, last = [-1] * n, [-1] * n
    overlaps, covers = boxes.overlaps, boxes.covers
    preds: list[list[int]] = []
    HBM = tr.HBM
    for i, op in enumerate(prog.ops):
        deps: list[int] = []
        for bk, box in op.reads:
            if mem[bk] != HBM:
                if first[bk] < 0:
                    first[bk] = i
                    onchip.append(bk)
                last[bk] = i
            elif skip[bk]:
                continue
            ws = writers[bk]
            if ws is not None:
                j = ws.items.get(box)
                if j is not None and bk not in tangled:
                    deps.append(j)
                else:
                    latest = ws.items
                    deps.extend([latest[wbox] for wbox in ws.overlapping(box)])
            if last_write[bk] <= i:
                continue
            rs = readers[bk]
            if rs is None:
                readers[bk] = {box: [i]}
            else:
                lst = rs.get(box)
                if lst is None:
                    rs[box] = [i]
                else:
                    lst.append(i)
        for bk, box in op.writes:
            if mem[bk] != HBM:
                if first[bk] < 0:
                    first[bk] = i
                    onchip.append(bk)
                last[bk] = i
            elif skip[bk]:
                continue
            ws = writers[bk]
            if ws is None:
                writers[bk] = boxes.BoxMap({box: i})
            else:
                j = ws.items.get(box)
                if j is not None and bk not in tangled:
                    deps.append(j)
                else:
                    for wbox in ws.overlapping(box):
                        deps.append(ws.items[wbox])
                        if covers(box, wbox):
                            del ws[wbox]
                        else:
                            tangled.add(bk)
                ws[box] = i
            rs = readers[bk]
            if rs:
                for rbox, js in list(rs.items()):
                    if rbox == box or overlaps(rbox, box):
                        deps.extend([j for j in js if j != i])
                        if covers(box, rbox):
                            if i in js:
                                rs[rbox] = [i]
                            else:
                                del rs[rbox]
        if len(deps) > 1:
            deps = sorted(set(deps))
        if deps and deps[-1] == i:
            deps.pop()
        preds.append(deps)
    return preds, onchip, first, last


def _innermost_kind(op: Op, loops: dict[int, tr.Loop]) -> str:
    if not op.loop_path:
        return ""
    loop = loops.get(op.loop_path[-1][0])
    return loop.kind if loop else ""


def _slot_edges(prog: Program, onchip: list[BlockKey], first: list[int], last: list[int],
                hw: Hardware, params: Params) -> dict[int, list[int]]:
    ops, tensors, loops = prog.ops, prog.tensors, prog.loops
    mem = prog.block_memory
    sites: dict[object, list[BlockKey]] = {}
    for bk in onchip:
        if mem[bk] == tr.PSUM:
            site: object = tr.PSUM  # one pool: the banks
        else:
            key = prog.block_key[bk]
            site = tensors[key[0]].site
            if len(key) > 2:
                if key[2] == "remat":
                    # A rematerialised load refills storage the tensor already owns (its
                    # footprint was checked against SBUF): no new buffer constraint.
                    continue
                site = (site, key[2])  # spill reloads: buffers of their own
        sites.setdefault(site, []).append(bk)
    share = params.buffer_share * hw.sbuf_usable_bytes_per_partition
    extra: dict[int, list[int]] = {}
    # `onchip` lists blocks in the order of their first access, so every site's instances
    # are in that order too.
    for site, instances in sites.items():
        if site == tr.PSUM:
            slots = hw.psum_banks
        else:
            size = max(prog.block_bytes(instances[0]), 1)
            slots = int(min(max(share // size, 1), params.max_buffers))
            if prog.dialect != "current" and \
                    _innermost_kind(ops[first[instances[0]]], loops) in ("sequential", "range"):
                slots = params.sequential_buffers
        for k in range(slots, len(instances)):
            start, prev_end = first[instances[k]], last[instances[k - slots]]
            if prev_end < start:
                extra.setdefault(start, []).append(prev_end)
    return extra
