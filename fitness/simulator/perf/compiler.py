"""Compiler effects: what neuronx-cc does to the as-written program before it runs.

Heuristic, calibrated on the measured byte and flop counters (trainium-perf-model.md §7.4):
0. Algebraic fusion of `x op (c * x)` (a tensor_tensor add, subtract or multiply of a tile
   and a scalar multiple of that same tile, the multiple read nowhere else): one ScalarE-able
   instruction, `(1 +- c) * x` (tensor_scalar) or `c * x^2` (activation square), replaces
   the pair. Inferred from adamw, the only baseline with the pattern (two per tile): its
   measured VectorE time fits the per-element cost of rope, silu and swiglu only without
   those two tensor_tensor instructions, and its ScalarE time still counts one ScalarE
   instruction per pair.
   Step 0b. A partition broadcast (`broadcast_to`: K=1 matmuls into PSUM, one per 512
   columns, each evicted to SBUF) whose tile fits one PSUM bank (2 KiB per partition, 512
   fp32) stays in PSUM: its readers read it there (one PSUM input: tensor_tensor at the
   PSUM rate) and no eviction runs. A wider one spans banks and is evicted. Measured on the
   mamba variants: with 512-column tiles (v2 at sequence 512, v3 at every length, whose
   broadcasts are one bank) VectorE spends ~6.8 cycles per element and state on 4 vector
   instructions, which is 2 PSUM-rate and 2 SBUF-rate instructions plus overheads; v2 at
   sequence 1024-6144 (two banks and more) spends ~9.4, as four SBUF-rate instructions do;
   and the NKIBench mamba baseline (7168 columns) spends ScalarE time on exactly its 896
   evictions (trainium-perf-model.md §6.3).
1. CSE / loop-invariant hoisting of loads, broadcast matmuls, user transposes, plain
   copies and tensor_tensor instructions whose inputs are unmodified and identical to an
   earlier instruction's: later readers use the earlier result. Applied per allocation
   site ("group") only while what the reuse adds to the footprint fits what the
   as-written program's peak leaves of a share of SBUF (and of PSUM): the copies share
   the space with the program's own tiles, and eating the room successive iterations
   overlap in would stall them (deps.py's address edges). What it adds is the copies kept
   alive longer less what the removed duplicates no longer keep alive: their own results
   and the inputs they were the last to read. Measured: mamba v2 at 8192, over capacity
   as written, spends trn1's VectorE time of four vector instructions per state (31.4 ms
   active; 31.1 in the model) with `delta * u` hoisted, whose one product per channel tile
   takes the place of `u`, dead after it; charged without that, the product was computed
   again in every state (38.3 ms) from 6144 on. Against the share alone, not what the
   peak leaves of it, the hoisting that mamba v1 (4096 x 512) and the NKIBench mamba
   baseline were given needed a spill afterwards, and the predicted HBM bytes were further
   from the measured ones (median |log error| over the baselines 0.006 vs 0.003, mean 0.14
   vs 0.10). tensor_tensor is included because neuronx-cc hoists mamba v2's and v3's
   `delta * u` out of the state loop: without that, v2 at sequence 512 and v3 would need
   five vector instructions per element and state in ~6.8 cycles, below what the four that
   remain cost.
   Step 1b. Dead copies: a copy (`t[...] = u`) whose destination is on chip and never read
   afterwards is dropped. Measured: mamba v3 at sequence 512 (one chunk, so its copy of the
   scan state is never read) runs in v2's time (1.60 vs 1.61 ms); every v3 drops its last
   chunk's state copy per state. None of the 14 baselines has such a copy. Only copies:
   no measurement shows other unread work dropped.
2. Liveness of logical blocks (first access .. last access) against the usable SBUF per
   partition; while the peak exceeds it, the largest tensor live at the peak is
   rematerialised (clean: a pure copy of an input, re-loaded next to each consuming loop
   iteration) or spilled (saved to HBM after its producing iteration, reloaded before each
   later consuming one).
The result is the program that the dependency builder and the scheduler see.

These are neuronx-cc's effects, for legacy-dialect traces. A current-dialect (`import nki`)
kernel goes through the NKI compiler, which "compiles kernel code while preserving the
developer's optimization choices" (`nki/deep-dives/nki-compiler.rst`): none of the steps
above applies to it, and its program runs as written (its tensors are allocated where the
author put them; a working set over SBUF is the author's error, not a spill). Its
allocations in loop bodies rotate through buffers (`deps.py`).

The same holds for a legacy kernel that asks neuronx-cc to keep its choices: under
`@nki.compiler.skip_middle_end_transformations` the middle end (where these rewrites of the
program belong: fusion, CSE and hoisting, rematerialisation, spills) does not run, and a
kernel that places its tensors itself (direct allocation, `ncc.sbuf.mod_alloc` and the PSUM
variants) has no storage the compiler could give a hoisted copy, a rematerialised load or a
spill: "programmers can now bypass the compiler allocator and take full control of memory
allocation" (NKI Direct Allocation Developer Guide). Both run as written; no document says
which of these effects neuronx-cc would still apply to a directly allocated kernel without
the decorator (every directly allocated kernel of the SDK, the attention tutorial's v9 and
v10, also skips the middle end).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from .. import trace as tr
from . import boxes
from .hardware import Hardware
from .lowering import Access, BlockKey, Op, Program, TensorMeta
from .params import Params

# Remat or spill steps at most (bounds the pass). A step resolves one peak, and a tile
# allocated in a loop body peaks once per iteration: mamba v2 at sequence 8192 spills its
# accumulator in each of its 32 channel tiles (32 steps), and lora takes 220. A bound of
# 32 stopped lora over capacity.
MAX_OVERFLOW_STEPS = 512
CSE_ROUNDS = 4
# Spilling a site that holds less than this per partition at the peak cannot help: the
# compiler does not spill (P, 1) vectors. One 2 KiB row is also where DMA efficiency
# reaches ~0.8 (DMAOV), so rematerialised loads are split by consumed region only down to
# that size.
MIN_SPILL_BYTES = 2048
MIN_BLOCK_BYTES = 512     # nor tiles of a few values per partition (tiny, descriptor-bound DMAs)
SKIP_MIDDLE_END = "skip_middle_end_transformations"   # trace.options: the program runs as written


@dataclass
class CompilerReport:
    """What the pass did, for the bottleneck summary and the calibration record."""

    fused_pairs: int = 0
    psum_broadcasts: int = 0
    removed_duplicates: int = 0
    hoisted_sites: int = 0
    rejected_sites: int = 0
    rematerialized: list[str] = field(default_factory=list)
    spilled: list[str] = field(default_factory=list)
    sbuf_peak_as_written: int = 0
    sbuf_peak: int = 0
    dead_copies: int = 0


def apply(prog: Program, hw: Hardware, params: Params) -> CompilerReport:
    """Rewrite `prog` in place (ops, tensors, blocks) and report what changed; a
    current-dialect program is left as written (module doc)."""
    report = CompilerReport()
    if prog.dialect == "current" or SKIP_MIDDLE_END in prog.options or prog.placed:
        return report
    report.fused_pairs = _fuse_scaled_pairs(prog)
    report.psum_broadcasts = _keep_broadcasts_in_psum(prog, hw)
    _hoist(prog, hw, params, report)
    report.dead_copies = _drop_dead_copies(prog)
    _resolve_overflow(prog, hw, report)
    prog.ops = sorted([op for op in prog.ops if op.kind], key=attrgetter("pos"))
    return report


# ------------------------------------------------------------------------ algebraic fusion

FUSABLE = ("add", "subtract", "multiply")


def _fuse_scaled_pairs(prog: Program) -> int:
    """Step 0 (module doc): rewrite `x op tensor_scalar(x, multiply, c)` into one
    instruction on x and drop the tensor_scalar. Returns the number of pairs fused."""
    ops = prog.ops
    # A first pair needs a tensor_scalar result that a fusable tensor_tensor reads.
    results = {op.writes[0] for op in ops
               if op.kind == tr.TS and len(op.writes) == 1 and op.func.startswith("multiply")
               and "," not in op.func}
    if not results or not any(op.kind == tr.TT and op.func in FUSABLE and len(op.reads) == 2
                              and (op.reads[0] in results or op.reads[1] in results)
                              for op in ops):
        return 0
    n_blocks = len(prog.block_memory)
    reads_of_block = [0] * n_blocks
    for op in ops:
        for bk, _ in op.reads:
            reads_of_block[bk] += 1
    last_write = [-1] * n_blocks
    scaled: dict[Access, int] = {}   # result of a constant-multiply tensor_scalar -> its op
    fused = 0
    for i, op in enumerate(ops):
        if op.kind == tr.TT and op.func in FUSABLE and len(op.reads) == 2:
            for x, y in (op.reads, op.reads[::-1]):
                j = scaled.get(y, -1)
                # c * x of this very x, read only here, neither rewritten since.
                if j < 0 or ops[j].reads != [x] or reads_of_block[y[0]] != 1 \
                        or last_write[x[0]] > j or last_write[y[0]] != j:
                    continue
                ts = ops[j]
                if op.func == "multiply":   # c * x * x: activation(square, scale=sqrt(c))
                    op.kind, op.engines, op.func = tr.ACT, (tr.SCALAR,), "square"
                else:                       # x +- c * x = (1 +- c) * x
                    op.kind, op.engines, op.func = tr.TS, ts.engines, "multiply"
                op.reads, op.in_dtypes, op.psum_inputs = [x], ts.in_dtypes, ts.psum_inputs
                ts.kind = ""                # dropped by apply()
                fused += 1
                break
        for w in op.writes:
            last_write[w[0]] = i
        if op.kind == tr.TS and op.func.startswith("multiply") and "," not in op.func \
                and len(op.writes) == 1:
            scaled[op.writes[0]] = i
    return fused


# ------------------------------------------------------------- broadcasts left in PSUM

def _keep_broadcasts_in_psum(prog: Program, hw: Hardware) -> int:
    """Step 0b (module doc): a partition broadcast that fits one PSUM bank is read where
    the broadcast matmul left it: its PSUM->SBUF copy is dropped and its readers read the
    PSUM tile (one PSUM input each). Returns the number of copies dropped."""
    ops, mem = prog.ops, prog.block_memory
    copies = [op for op in ops if op.kind == tr.COPY and op.source == "broadcast_to"
              and len(op.reads) == 1 and len(op.writes) == 1]
    if not copies:
        return 0
    writes = [0] * len(mem)
    for op in ops:
        for bk, _ in op.writes:
            writes[bk] += 1
    moved: dict[BlockKey, tuple[BlockKey, tuple[int, ...]]] = {}
    for op in copies:
        (src, sbox), (dst, dbox) = op.reads[0], op.writes[0]
        if mem[src] != tr.PSUM or mem[dst] != tr.SBUF or writes[dst] != 1 \
                or prog.block_bytes(dst) > hw.psum_bank_bytes:
            continue
        moved[dst] = (src, boxes.offset(dbox, sbox))
        op.kind = ""                # dropped by apply()
    if not moved:
        return 0
    for op in ops:
        if not op.kind:
            continue
        for i, (bk, box) in enumerate(op.reads):
            hit = moved.get(bk)
            if hit is not None:
                op.reads[i] = (hit[0], boxes.shift(box, hit[1]))
                op.psum_inputs += 1
    return len(moved)


def _drop_dead_copies(prog: Program) -> int:
    """Step 1b (module doc): drop copies whose destination is on chip and read by no later
    instruction (backwards, so a copy read only by a dropped copy goes too). Returns the
    number of copies dropped."""
    mem = prog.block_memory
    read_later = [False] * len(mem)
    dropped = 0
    for op in reversed(prog.ops):
        if not op.kind:
            continue
        if op.kind == tr.COPY and op.writes and \
                all(mem[bk] != tr.HBM and not read_later[bk] for bk, _ in op.writes):
            op.kind = ""                # dropped by apply()
            dropped += 1
            continue
        for bk, _ in op.reads:
            read_later[bk] = True
    return dropped


# ----------------------------------------------------------------------------------- CSE

def _over_budget(extension: dict, feeds: dict, budgets: dict[str, float], disabled: set) -> bool:
    """Disable the groups that do not fit, smallest extensions first; True if any. A group
    whose duplicates consumed another group's reused results takes that group with it:
    without it, its instructions would read (and keep alive) those results instead."""
    over = False
    for memory, budget in budgets.items():
        used = 0.0
        for group, size in sorted(((g, s[memory]) for g, s in extension.items()
                                   if g not in disabled), key=lambda gs: gs[1]):
            if used + size <= budget:
                used += size
            else:
                disabled.add(group)
                over = True
    todo = list(disabled)
    while todo:
        for upstream in feeds.get(todo.pop(), ()):
            if upstream not in disabled:
                disabled.add(upstream)
                todo.append(upstream)
    return over


def _hoist(prog: Program, hw: Hardware, params: Params, report: CompilerReport) -> None:
    if not _may_repeat(prog):
        return
    # Reused copies share SBUF with the program's own tiles: they may take what its peak
    # leaves of the budget share, no more (so that hoisting does not eat the room that
    # successive iterations overlap in, deps._capacity_edges).
    ranges = _ranges(prog)
    mem = prog.block_memory
    written = _Liveness(prog, {b: [f, last] for b, (f, last) in enumerate(zip(*ranges))
                               if f >= 0 and mem[b] == tr.SBUF}).peak()[0]
    budgets = {tr.SBUF: max(params.hoist_budget_fraction * hw.sbuf_usable_bytes_per_partition - written, 0.0),
               tr.PSUM: params.hoist_budget_fraction * hw.psum_bytes_per_partition}
    disabled: set = set()
    ops, reads = list(prog.ops), [op.reads for op in prog.ops]
    cands, untracked = _candidates(prog), _untracked(prog)
    removed, used = 0, set()
    for _ in range(CSE_ROUNDS):
        extension, removed, used, feeds = _cse(prog, disabled, cands, untracked, ranges)
        if not _over_budget(extension, feeds, budgets, disabled):
            break
        # Some reuse does not fit: undo, and redo without the offending groups (unless
        # that leaves nothing to reuse).
        prog.ops = list(ops)
        for op, r in zip(ops, reads):
            op.reads = r
        if used <= disabled:
            removed, used = 0, set()
            break
    else:
        extension, removed, used, _ = _cse(prog, disabled | set(extension), cands, untracked, ranges)
    report.rejected_sites = len(disabled)
    report.removed_duplicates, report.hoisted_sites = removed, len(used)


def _may_repeat(prog: Program) -> bool:
    """Cheap pre-check: can any CSE candidate duplicate another? A duplicate needs an
    identical earlier instruction on the same inputs, or inputs that are themselves
    duplicates, so some candidate must repeat an earlier one's reads exactly."""
    seen: set = set()
    for op in prog.ops:
        if op.cse:
            key = (op.kind, op.N, tuple(op.reads))
            if key in seen:
                return True
            seen.add(key)
    return False


COMPILED_LOOPS = ("affine", "sequential")   # loops the compiler sees (others are unrolled
                                           # by Python before it: static_range, range)


def _candidates(prog: Program) -> list[tuple[object, int] | None]:
    """Per op of prog.ops: (group, signature) for CSE candidates, None for the rest. The
    group is the allocation site of its first write; the signature numbers what, besides
    its inputs, must match for two instructions to compute the same result (kind, dtype,
    function, shape of the work and of the writes, and for computations their hoisting
    scope, `_compute_scope`). Neither changes between CSE passes."""
    site_of = [prog.tensors[t].site for t in prog.block_tensor]
    signatures: dict[tuple, int] = {}
    out: list[tuple[object, int] | None] = []
    for op in prog.ops:
        if not (op.cse and op.writes):
            out.append(None)
            continue
        mm = op.mm
        sig = (op.kind, op.dtype, op.func, op.P, op.N, op.dma_bytes,
               (mm.K, mm.M, mm.N, mm.is_transpose, mm.stationary_onezero) if mm else None,
               tuple([boxes.shape(box) for _, box in op.writes]),
               _compute_scope(op, prog.loops) if op.kind in COMPUTE_CSE_KINDS else None)
        out.append((site_of[op.writes[0][0]], signatures.setdefault(sig, len(signatures))))
    return out


COMPUTE_CSE_KINDS = frozenset({tr.TT})


def _compute_scope(op: Op, loops: dict) -> tuple:
    """A computation is reused only across iterations of the innermost compiled loop around
    it (loop-invariant code motion out of that loop): its scope is its iteration of every
    enclosing compiled loop but that one. Measured: neuronx-cc hoists mamba v2's `delta * u`
    out of its inner state loop (and v3's, whose sequence loop is unrolled), but recomputes
    v1's, which is invariant only in its outer state loop: v1's VectorE time at 4096 x 512
    (2.16 ms) exceeds v2's (1.60 ms) by one 2N tensor_tensor per channel tile and state."""
    path = [step for step in op.loop_path
            if loops.get(step[0]) is None or loops[step[0]].kind in COMPILED_LOOPS]
    return tuple(path[:-1])


def _untracked(prog: Program) -> list[bool]:
    """Per block: True for kernel outputs and inputs. Writes to outputs cannot change what a
    later instruction reads (outputs are write-only; inputs are never written)."""
    return [m == tr.HBM and prog.tensors[t].kind not in ("scratch", "spill")
            for m, t in zip(prog.block_memory, prog.block_tensor)]


def _ranges(prog: Program) -> tuple[list[int], list[int]]:
    """Per block: the first and the last index in prog.ops of its accesses (-1: none),
    dropped ops aside. In program order, so they also give the as-written peak."""
    n = len(prog.block_memory)
    first, last = [-1] * n, [-1] * n
    for seq, op in enumerate(prog.ops):
        if not op.kind:
            continue
        for accesses in (op.reads, op.writes):
            for bk, _ in accesses:
                if first[bk] < 0:
                    first[bk] = seq
                last[bk] = seq
    return first, last


def _cse(prog: Program, disabled: set, cands: list, untracked: list[bool],
         written: tuple[list[int], list[int]]):
    """One CSE pass over the as-written prog.ops (`cands`, `untracked` and `written` from
    _candidates, _untracked and _ranges), rewriting prog.ops. Returns (extension, ops removed,
    groups used, feeds): extension[group][memory] is the peak bytes/partition that reusing
    the group's earlier results adds (_extensions); feeds[group] are the
    groups whose reused results the group's duplicates read."""
    writes_of: dict[BlockKey, boxes.BoxMap] = {}   # box -> sequence number of its last write
    latest: dict[BlockKey, int] = {}
    tangled: set[BlockKey] = set()   # blocks with overlapping (not nested) written boxes
    alias: dict[BlockKey, dict[boxes.Box, tuple[BlockKey, tuple[int, ...], object]]] = {}
    table: dict[tuple, tuple[int, list[Access]]] = {}
    direct_last: dict[BlockKey, int] = {}
    alias_last: dict[tuple[BlockKey, object], int] = {}
    feeds: dict[object, set] = {}
    freed_by: dict[BlockKey, object] = {}   # block -> group of the last duplicate touching it
    kept: list[Op] = []
    removed, used_groups = 0, set()
    overlaps, covers = boxes.overlaps, boxes.covers
    no_uses: tuple = ()

    def last_write(bk: BlockKey, box: boxes.Box) -> int:
        d = writes_of.get(bk)
        if d is None:
            return -1
        last = d.items.get(box, -1)
        if last >= 0 and (last == latest[bk] or bk not in tangled):
            return last  # the newest write, or written boxes are disjoint
        seqs = d.items
        for wbox in d.overlapping(box):
            if seqs[wbox] > last:
                last = seqs[wbox]
        return last

    def record_write(bk: BlockKey, box: boxes.Box, seq: int) -> None:
        latest[bk] = seq
        d = writes_of.get(bk)
        if d is None:
            writes_of[bk] = boxes.BoxMap({box: seq})
            return
        if box not in d.items:
            for old in d.overlapping(box):
                if covers(box, old):
                    del d[old]   # cannot be the latest write of anything any more
                else:
                    tangled.add(bk)
        d[box] = seq

    def resolve(reads: list[Access]):
        """Reads redirected to the earlier results they alias: (resolved reads, the reads
        left direct, (target block, group) of every aliased piece)."""
        resolved: list[Access] = []
        direct: list[Access] = []
        uses: list[tuple[BlockKey, object]] = []
        for acc in reads:
            bk, box = acc
            pieces = alias.get(bk)
            if not pieces:
                resolved.append(acc)
                direct.append(acc)
                continue
            hit = pieces.get(box)
            if hit is not None:   # one piece is exactly the box
                tbk, delta, group = hit
                resolved.append((tbk, boxes.shift(box, delta)))
                uses.append((tbk, group))
                continue
            covered = 0
            for pbox, (tbk, delta, group) in pieces.items():
                if overlaps(pbox, box):
                    part = boxes.intersect(pbox, box)
                    resolved.append((tbk, boxes.shift(part, delta)))
                    uses.append((tbk, group))
                    covered += boxes.volume(part)
            if covered < boxes.volume(box):
                resolved.append(acc)
                direct.append(acc)
        return resolved, direct, uses

    for seq, op in enumerate(prog.ops):
        reads = op.reads
        direct = reads
        uses = no_uses
        if alias:
            for bk, _ in reads:
                if bk in alias:
                    reads, direct, uses = resolve(reads)
                    break
        cand = cands[seq]
        if cand is not None and cand[0] not in disabled:
            group = cand[0]
            key = (cand[1], tuple([(bk, box, last_write(bk, box)) for bk, box in reads]))
            entry = table.get(key)
            # A duplicate, if the earlier results are still there.
            if entry is not None and all(last_write(bk, box) == entry[0] for bk, box in entry[1]):
                for (wbk, wbox), (cbk, cbox) in zip(op.writes, entry[1]):
                    piece = (cbk, boxes.offset(wbox, cbox), group)
                    pieces = alias.get(wbk)
                    if pieces is None:
                        alias[wbk] = {wbox: piece}
                    else:
                        if wbox not in pieces:
                            for old in [b for b in pieces if covers(wbox, b)]:
                                del pieces[old]
                        _add_piece(pieces, wbox, piece)
                    record_write(wbk, wbox, seq)
                for bk, _ in op.reads:
                    freed_by[bk] = group
                for bk, _ in op.writes:
                    freed_by[bk] = group
                removed += 1
                used_groups.add(group)
                if uses:
                    feeds.setdefault(group, set()).update([g for _, g in uses])
                continue
            table[key] = (seq, op.writes)
        for tbk_group in uses:
            alias_last[tbk_group] = seq
        for bk, _ in direct:
            direct_last[bk] = seq
        for bk, box in op.writes:
            if untracked[bk]:
                continue
            if alias:
                pieces = alias.get(bk)
                if pieces:
                    for old in [b for b in pieces if b == box or overlaps(b, box)]:
                        del pieces[old]
                    if not pieces:
                        del alias[bk]   # only blocks with pieces stay in alias
            record_write(bk, box, seq)
            direct_last[bk] = seq
        op.reads = reads
        kept.append(op)
    prog.ops = kept
    return _extensions(prog, direct_last, alias_last, freed_by, written), removed, used_groups, feeds


def _add_piece(pieces: dict, box: boxes.Box, value: tuple) -> None:
    """Add an alias piece, merged with pieces it extends (same target, same offset, adjacent
    along one dimension): a tile aliased slice by slice becomes one piece again."""
    merged = True
    while merged:
        merged = False
        for other, v in pieces.items():
            if v == value:
                joined = boxes.join(other, box)
                if joined is not None:
                    del pieces[other]
                    box = joined
                    merged = True
                    break
    pieces[box] = value


def _extensions(prog: Program, direct_last: dict, alias_last: dict, freed_by: dict,
                written: tuple[list[int], list[int]]) -> dict:
    """Per group and memory: peak bytes/partition that reuse adds to the program's: blocks
    kept alive only by reuse, less the blocks the removed duplicates no longer keep alive
    (their own results, and inputs they were the last to read)."""
    events: dict[object, list[tuple[int, int]]] = {}
    target_last: dict[BlockKey, int] = {}
    for (tbk, group), end in alias_last.items():
        if end > target_last.get(tbk, -1):
            target_last[tbk] = end
        memory = prog.block_memory[tbk]
        start = direct_last.get(tbk, -1)
        if end <= start or memory == tr.HBM:
            continue
        size = prog.block_bytes(tbk)
        ev = events.setdefault((group, memory), [])
        ev.append((start + 1, size))
        ev.append((end + 1, -size))
    firsts, lasts = written
    for bk, group in freed_by.items():
        memory = prog.block_memory[bk]
        first, last = firsts[bk], lasts[bk]
        now = max(direct_last.get(bk, -1), target_last.get(bk, -1))
        if memory == tr.HBM or now >= last:
            continue
        size = prog.block_bytes(bk)
        ev = events.setdefault((group, memory), [])
        ev.append((max(now + 1, first), -size))
        ev.append((last + 1, size))
    out: dict[object, dict[str, float]] = {}
    for (group, memory), ev in events.items():
        ev.sort()
        cur = peak = 0
        for _, delta in ev:
            cur += delta
            peak = max(peak, cur)
        out.setdefault(group, {tr.SBUF: 0.0, tr.PSUM: 0.0})[memory] = float(peak)
    return out


# --------------------------------------------------------------- liveness and overflow

Accesses = list[tuple[Op, bool, int]]   # (op, is_write, index in op.reads / op.writes)


class _Liveness:
    """Live intervals (first .. last access position) of SBUF blocks, kept in NumPy arrays
    (with room to grow) so that the peak can be recomputed cheaply after every change."""

    def __init__(self, prog: Program, ranges: dict[BlockKey, list[int]]):
        """`ranges`: [first, last] access position (or index in program order) of every
        SBUF block."""
        self.prog = prog
        self.keys = list(ranges)
        self.index = {b: j for j, b in enumerate(self.keys)}
        n = len(self.keys)
        self.starts = np.zeros(2 * n + 16, dtype=np.int64)
        self.ends = np.zeros(2 * n + 16, dtype=np.int64)
        self.sizes = np.zeros(2 * n + 16, dtype=np.float64)
        self.starts[:n] = [first for first, _ in ranges.values()]
        self.ends[:n] = [last for _, last in ranges.values()]
        self.sizes[:n] = [prog.block_bytes(b) for b in self.keys]

    def set(self, bk: BlockKey, accs: Accesses) -> None:
        pos = [a[0].pos for a in accs if a[0].kind]
        j = self.index.get(bk)
        if j is None:
            if not pos:
                return
            j = self.index[bk] = len(self.keys)
            self.keys.append(bk)
            if j == len(self.starts):   # full: double the room
                self.starts, self.ends, self.sizes = [
                    np.concatenate([a, np.zeros_like(a)]) for a in (self.starts, self.ends, self.sizes)]
            self.sizes[j] = self.prog.block_bytes(bk)
        if pos:
            self.starts[j], self.ends[j] = min(pos), max(pos)
        else:
            self.starts[j], self.ends[j] = 0, -1   # gone: never live

    def peak(self) -> tuple[int, dict[object, list[tuple[int, BlockKey]]]]:
        """(peak bytes/partition, the blocks live at the peak per allocation site, as
        (last access, block) pairs)."""
        n = len(self.keys)
        if not n:
            return 0, {}
        starts, ends, sizes = self.starts[:n], self.ends[:n], self.sizes[:n]
        valid = ends >= starts
        if not valid.any():
            return 0, {}
        # The footprint only changes where a live interval starts or ends: sum it at those
        # positions only. Its first maximum is at one of them (sizes are not negative), and
        # the sums of whole byte counts are exact in any order.
        size = sizes[valid]
        points, at_point = np.unique(np.concatenate([starts[valid], ends[valid] + 1]),
                                     return_inverse=True)
        foot = np.cumsum(np.bincount(at_point, np.concatenate([size, -size]), len(points)))
        k = int(np.argmax(foot))
        at = int(points[k])
        live = np.flatnonzero((starts <= at) & (ends >= at))
        per: dict[object, list[tuple[int, BlockKey]]] = {}
        tensors, bt, keys = self.prog.tensors, self.prog.block_tensor, self.keys
        for j, end in zip(live.tolist(), ends[live].tolist()):
            bk = keys[j]
            per.setdefault(tensors[bt[bk]].site, []).append((end, bk))
        return int(foot[k]), per


def _sbuf_accesses(prog: Program) -> dict[BlockKey, Accesses]:
    """The accesses of every SBUF block, in the order of prog.ops, blocks in the order of
    their first access (one pass serves the liveness and all the sites that overflow steps
    pick: a step only rewrites accesses to its own site's blocks and adds ops that touch
    only those and HBM)."""
    mem, SBUF = prog.block_memory, tr.SBUF
    out: dict[BlockKey, Accesses] = {}
    get = out.get
    for op in prog.ops:
        if not op.kind:
            continue
        for is_write, accesses in ((False, op.reads), (True, op.writes)):
            for i, (b, _) in enumerate(accesses):
                if mem[b] == SBUF:
                    accs = get(b)
                    if accs is None:
                        out[b] = [(op, is_write, i)]
                    else:
                        accs.append((op, is_write, i))
    return out


def _accesses_of(prog: Program, sbuf_accesses: dict[BlockKey, Accesses],
                 tids: set[int]) -> dict[BlockKey, Accesses]:
    """The accesses of the blocks of tensors `tids`, each block's in position order (as
    gathered: prog.ops was in position order then)."""
    bt = prog.block_tensor
    return {b: accs for b, accs in sbuf_accesses.items() if bt[b] in tids}


def _resolve_overflow(prog: Program, hw: Hardware, report: CompilerReport) -> None:
    # prog.ops is still in program (= position) order here.
    sbuf_accesses = _sbuf_accesses(prog)
    live = _Liveness(prog, {b: [accs[0][0].pos, accs[-1][0].pos] for b, accs in sbuf_accesses.items()})
    capacity = hw.sbuf_usable_bytes_per_partition
    site_block_bytes: dict[object, int] = {}
    for m in prog.tensors.values():
        site_block_bytes[m.site] = max(site_block_bytes.get(m.site, 0), m.block_bytes)
    done: set[BlockKey] = set()
    spill_tensor: dict[object, int] = {}
    site_accesses: dict[object, dict[BlockKey, Accesses]] = {}
    peak, per = live.peak()
    report.sbuf_peak_as_written = report.sbuf_peak = peak
    for _ in range(MAX_OVERFLOW_STEPS):
        if peak <= capacity:
            break
        # Candidates: sites by the bytes of their untouched blocks live at the peak
        # (copies made by earlier steps have longer keys and are never touched again).
        open_blocks = {site: [(end, bk) for end, bk in blocks
                              if bk not in done and len(prog.block_key[bk]) == 2]
                       for site, blocks in per.items()
                       if site_block_bytes.get(site, 0) >= MIN_BLOCK_BYTES}
        sizes = {site: sum(prog.block_bytes(bk) for _, bk in blocks)
                 for site, blocks in open_blocks.items()}
        candidates = [s for s in sorted(sizes, key=sizes.__getitem__, reverse=True)
                      if sizes[s] >= MIN_SPILL_BYTES]
        if not candidates:
            break
        site = candidates[0]
        tids = {t for t, m in prog.tensors.items() if m.site == site and m.memory == tr.SBUF}
        blocks = site_accesses.get(site)
        if blocks is None:  # untouched blocks keep their accesses: computed once per site
            blocks = site_accesses[site] = _accesses_of(prog, sbuf_accesses, tids)
        tid = min(tids, key=abs)
        meta = prog.tensors[tid]
        name = meta.name or f"t{tid}"
        if _is_clean(blocks):
            # Rematerialise the whole tensor (measured: matmul reloads all of its rhs).
            report.rematerialized.append(name)
            for bk, accs in blocks.items():
                done.add(bk)
                _rematerialize(prog, live, bk, accs)
        else:
            # Spill just enough, furthest next use first (measured: bmm_softmax spilled
            # ~70% of its score tensor, gqa nearly all of it).
            chosen, freed = [], 0
            for _, bk in sorted(open_blocks[site], reverse=True):
                chosen.append(bk)
                freed += prog.block_bytes(bk)
                if freed >= peak - capacity:
                    break
            if name not in report.spilled:
                report.spilled.append(name)
            spill = spill_tensor.get(site)
            if spill is None:
                spill = spill_tensor[site] = prog.new_tensor(TensorMeta(
                    tr.HBM, 0, meta.itemsize, "spill", ("spill", tid), f"spill:{name}"))
            for bk in chosen:
                done.add(bk)
                if bk in blocks:
                    _spill(prog, live, bk, blocks[bk], spill)
        peak, per = live.peak()
        report.sbuf_peak = peak


def _divergence(path: tuple, producer: tuple) -> tuple | None:
    """The consumer's loop path up to the first loop iteration it does not share with the
    producer; None when the consumer runs in the producer's own iteration context."""
    c = 0
    for a, b in zip(path, producer):
        if a != b:
            break
        c += 1
    if c >= len(path):
        return None
    return path[:c + 1]


def _is_clean(blocks: dict[BlockKey, Accesses]) -> bool:
    for accs in blocks.values():
        writers = [op for op, is_w, _ in accs if is_w]
        if len(writers) != 1:
            return False
        w = writers[0]
        if w.kind != tr.DMA_LOAD or w.hbm_tensor_kind not in ("input", "constant"):
            return False
    return True


def _dma(kind: str, src: Access, dst: Access, nbytes: int, run: int, like: Op, pos: int,
         hbm_kind: str) -> Op:
    save = kind == tr.DMA_SPILL_SAVE   # SBUF -> HBM; the others (loads, reloads) HBM -> SBUF
    box = src[1] if save else dst[1]
    return Op(kind, (tr.DMA,), like.dtype, (like.dtype,), box[0][1] - box[0][0], 0, [src], [dst],
              like.loop_path, like.line, dma_bytes=nbytes, dma_run_bytes=run,
              hbm_tensor_kind=hbm_kind, hbm_write_kind=hbm_kind if save else "",
              hbm_read_bytes=0 if save else nbytes, hbm_write_bytes=nbytes if save else 0, pos=pos)


def _rematerialize(prog: Program, live: _Liveness, bk: BlockKey, accs: Accesses) -> None:
    """Re-issue the block's load next to each consuming loop iteration, per region read."""
    load = next(op for op, is_w, _ in accs if is_w)
    whole = max(boxes.volume(load.writes[0][1]), 1)
    item = prog.tensors[prog.block_tensor[bk]].itemsize
    groups: dict[tuple, list[tuple[Op, int]]] = {}
    stays: Accesses = []
    for a in accs:
        op, is_w, i = a
        key = None if is_w else _divergence(op.loop_path, load.loop_path)
        if key is None:
            stays.append(a)
        else:
            box = op.reads[i][1]
            split = boxes.volume(box[1:]) * item >= MIN_SPILL_BYTES
            groups.setdefault((key, box if split else None), []).append((op, i))
    base = prog.block_key[bk]
    for n, ((_, region), users) in enumerate(groups.items()):
        box = region or boxes.bounding([op.reads[i][1] for op, i in users])
        new = prog.block(base + ("remat", n))
        first = users[0][0]
        per_partition = boxes.volume(box[1:]) * item
        clone = _dma(tr.DMA_LOAD, load.reads[0], (new, box),
                     load.dma_bytes * boxes.volume(box) // whole,
                     min(load.dma_run_bytes or per_partition, per_partition),
                     load, first.pos - 2, load.hbm_tensor_kind)
        clone.loop_path = first.loop_path
        prog.ops.append(clone)
        for op, i in users:
            op.reads[i] = (new, box)
        live.set(new, [(clone, True, 0)] + [(op, False, i) for op, i in users])
    if len(stays) == 1:
        load.kind = ""  # deleted: every reader now has its own load
        stays = []
    live.set(bk, stays)


def _spill(prog: Program, live: _Liveness, bk: BlockKey, accs: Accesses, spill_tid: int) -> None:
    """Save the block after producing iterations, reload it before later consuming ones."""
    first_write = next((op for op, is_w, _ in accs if is_w), None)
    if first_write is None:
        return
    ppath = first_write.loop_path
    runs: list[Accesses] = []
    last_key: object = object()
    for a in accs:
        key = _divergence(a[0].loop_path, ppath)
        if not runs or key != last_key:
            runs.append([])
            last_key = key
        runs[-1].append(a)
    item = prog.tensors[prog.block_tensor[bk]].itemsize
    base = prog.block_key[bk]
    hbm = prog.block((spill_tid,) + base[1:])
    dirty: tuple[BlockKey, list[boxes.Box], Op] | None = None
    saved: boxes.Box | None = None
    block_accs: dict[BlockKey, Accesses] = {bk: list(runs[0])}
    for r, run in enumerate(runs):
        target = bk if r == 0 else prog.block(base + ("spill", r))
        read_boxes = [op.reads[i][1] for op, is_w, i in run if not is_w]
        if r > 0:
            if read_boxes and dirty is not None:
                src, wboxes, last = dirty
                box = boxes.bounding(wboxes)
                save = _dma(tr.DMA_SPILL_SAVE, (src, box), (hbm, box), boxes.volume(box) * item,
                            boxes.volume(box[1:]) * item, last, last.pos + 1, "spill")
                prog.ops.append(save)
                block_accs[src].append((save, False, 0))
                saved = box if saved is None else boxes.bounding([saved, box])
                dirty = None
            accs_r = block_accs.setdefault(target, [])
            if read_boxes and saved is not None:
                box = boxes.bounding(read_boxes)
                first = run[0][0]
                reload = _dma(tr.DMA_SPILL_RELOAD, (hbm, box), (target, box),
                              boxes.volume(box) * item, boxes.volume(box[1:]) * item, first,
                              first.pos - 2, "spill")
                reload.loop_path = first.loop_path
                prog.ops.append(reload)
                accs_r.append((reload, True, 0))
            for op, is_w, i in run:
                lst = op.writes if is_w else op.reads
                lst[i] = (target, lst[i][1])
                accs_r.append((op, is_w, i))
        wboxes = [op.writes[i][1] for op, is_w, i in run if is_w]
        if wboxes:
            last = max((op for op, is_w, _ in run if is_w), key=lambda o: o.pos)
            dirty = (target, wboxes, last)
    for b, lst in block_accs.items():
        live.set(b, lst)
