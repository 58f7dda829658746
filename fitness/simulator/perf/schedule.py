"""Discrete-event list scheduler (trainium-perf-model.md §7.7).

Each compute engine runs its ops in program order, one at a time; an op starts when its
inputs are ready (plus a semaphore latency across engines, or a pipeline drain on the same
engine), its engine is free, and the shared SBUF/PSUM ports of trn1 are free. An op that
may run on several engines goes to the one that would finish it first (PSUM evictions go to
ScalarE, as measured). A DMA is split over the DMA engines ("rings") serving its
partitions; each (ring, queue) is FIFO, and queues share a ring's bandwidth, which is capped
by the core's HBM share. Every op is visited once, so scheduling is linear in the trace.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field

from .. import trace as tr
from .costs import DmaEfficiency, duration_ns
from .hardware import Hardware
from .lowering import Op, Program
from .params import Params

INF = math.inf
COMPUTE_ENGINES = (tr.TENSOR, tr.VECTOR, tr.SCALAR, tr.GPSIMD_ENGINE)
NO_PORTS: list = []  # shared, never mutated
QUEUE_OF = {tr.DMA_LOAD: 0, tr.DMA_STORE: 1, tr.DMA_SPILL_SAVE: 2, tr.DMA_SPILL_RELOAD: 3}


class Timeline:
    """Busy intervals of one resource, kept sorted and merged."""

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def _mark(self, i: int, t: float, end: float) -> int:
        """Mark [t, end) busy; interval i is the first one ending after t. Returns the
        index of the interval now containing t."""
        s, e = self.starts, self.ends
        if i > 0 and e[i - 1] >= t:
            e[i - 1] = max(e[i - 1], end)
            j = i - 1
        else:
            s.insert(i, t)
            e.insert(i, end)
            j = i
        while j + 1 < len(s) and s[j + 1] <= e[j]:
            e[j] = max(e[j], e[j + 1])
            del s[j + 1]
            del e[j + 1]
        return j

    def fill(self, t: float, work: float) -> float:
        """Use `work` ns of free time from `t` on, across gaps (a transfer sharing the
        resource); returns when the work is done."""
        s, e = self.starts, self.ends
        if not e or t >= e[-1]:
            if e and t == e[-1]:
                e[-1] = t + work
            else:
                s.append(t)
                e.append(t + work)
            return t + work
        while work > 1e-9:
            i = bisect.bisect_right(e, t)
            if i < len(s) and s[i] <= t:
                t = e[i]
                continue
            gap_end = s[i] if i < len(s) else INF
            take = min(work, gap_end - t)
            self._mark(i, t, t + take)
            work -= take
            t += take
        return t

    def earliest(self, t: float, dur: float) -> float:
        """Earliest start >= t of a free window of length `dur`."""
        s, e = self.starts, self.ends
        if not e or t >= e[-1]:
            return t
        i = bisect.bisect_right(e, t)
        while i < len(s):
            if s[i] <= t:
                t = e[i]
            elif s[i] - t >= dur:
                return t
            else:
                t = e[i]
            i += 1
        return t

    def reserve(self, t: float, dur: float) -> None:
        if dur > 0:
            e = self.ends
            if not e or t > e[-1]:   # after the last interval (the usual case)
                self.starts.append(t)
                e.append(t + dur)
            elif t == e[-1]:         # right after it: extend it
                e[-1] = t + dur
            else:
                self._mark(bisect.bisect_right(e, t), t, t + dur)

    def total(self) -> float:
        return sum(b - a for a, b in zip(self.starts, self.ends))


def union_length(timelines: list[Timeline]) -> float:
    spans = sorted(iv for tl in timelines for iv in zip(tl.starts, tl.ends))
    total, cur_s, cur_e = 0.0, None, None
    for a, b in spans:
        if cur_e is None or a > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


@dataclass
class Schedule:
    """Timing of one scheduled program (ns)."""

    makespan_ns: float
    start: list[float]
    end: list[float]
    engine: list[str]
    busy_ns: dict[str, float] = field(default_factory=dict)
    dma_active_ns: float = 0.0        # time with at least one DMA transfer moving data
    dma_ring_busy_ns: float = 0.0     # sum over rings of their transfer time
    dma_rings: int = 16


def durations(ops: list[Op], hw: Hardware, params: Params) -> list[tuple[float, ...]]:
    """Duration of every op on each of its candidate engines (memoised: ops repeat)."""
    memo: dict[tuple, tuple[float, ...]] = {}
    out = []
    for op in ops:
        if op.engines[0] == tr.DMA:
            out.append(())
            continue
        mm = op.mm
        key = (op.kind, op.engines, op.N, op.dtype, op.in_dtypes, op.psum_inputs, op.strided,
               op.func, (mm.M, mm.N, mm.is_transpose, mm.stationary_onezero) if mm else None)
        d = memo.get(key)
        if d is None:
            d = memo[key] = tuple(duration_ns(op, e, hw, params) for e in op.engines)
        out.append(d)
    return out


def schedule(prog: Program, preds: list[list[int]], hw: Hardware, params: Params) -> Schedule:
    ops = prog.ops
    mem = prog.block_memory
    dur_of = durations(ops, hw, params)
    n = len(ops)
    start, end = [0.0] * n, [0.0] * n
    engine_of: list[str] = [""] * n
    free = dict.fromkeys(COMPUTE_ENGINES, 0.0)
    busy = dict.fromkeys(COMPUTE_ENGINES, 0.0)
    # Reordering window: an op may start in an idle gap of its engine after the start of
    # the op `window` places before it on that engine (0: strictly in program order). An op
    # of a loop with directives=nki.compiler.no_reorder() ("prevent operation reordering")
    # starts after the ops before it on its engine, as with no window.
    window = int(params.reorder_window)
    lanes = {e: Timeline() for e in COMPUTE_ENGINES} if window else None
    recent: dict[str, deque] = {e: deque(maxlen=max(window, 1)) for e in COMPUTE_ENGINES}
    hz = {tr.TENSOR: hw.tensor_hz, tr.VECTOR: hw.vector_hz, tr.SCALAR: hw.scalar_hz,
          tr.GPSIMD_ENGINE: hw.gpsimd_hz}
    # Same-engine dependent issue gap: ScalarE's is observed (PERF: dependent instructions
    # every 264 cycles); VectorE's dependent back-to-back instructions cost its static
    # per-instruction overhead (ARCH1), already in its cost, so it has none (measured: mamba
    # v3's chains of dependent VectorE instructions, README "Validation"); TensorE pipelines.
    drain = {e: (0.0 if e in (tr.TENSOR, tr.VECTOR) else params.dependent_drain_cycles / hz[e] * 1e9)
             for e in COMPUTE_ENGINES}
    sem = params.semaphore_ns
    uses_gpsimd = any(op.engines == (tr.GPSIMD_ENGINE,) for op in ops)
    sbuf_port = Timeline() if hw.shared_sbuf_port and uses_gpsimd else None
    psum_port = Timeline() if hw.shared_psum_port else None
    vg, vs = set(hw.shared_sbuf_port), set(hw.shared_psum_port)

    rings = [Timeline() for _ in range(hw.dma_engines)]
    queue_free = [[0.0] * hw.dma_engines for _ in QUEUE_OF]
    ring_bw = min(params.dma_ring_bytes_per_ns, hw.hbm_bytes_per_s / 1e9 / hw.dma_engines)
    efficiency = DmaEfficiency(hw.dma_efficiency)
    ring_busy = 0.0
    per_ring = hw.partitions_per_dma_engine
    n_dma, dma_fixed = hw.dma_engines, params.dma_fixed_ns
    occupancy: dict[tuple[int, int, int], tuple[int, float]] = {}   # DMA shapes repeat
    DMA = tr.DMA
    # Per kind of compute op: its candidate engines with their shared ports (memoised).
    choices: dict[tuple, tuple] = {}

    for i, op in enumerate(ops):
        engines = op.engines
        if engines[0] == DMA:
            ready = 0.0
            for p in preds[i]:
                if end[p] > ready:
                    ready = end[p]
            nbytes = op.dma_bytes
            if nbytes <= 0:
                start[i] = end[i] = ready
                engine_of[i] = DMA
                continue
            hbm = op.hbm_read_bytes + op.hbm_write_bytes
            shape = (nbytes, op.P, op.dma_run_bytes, hbm)
            rings_occ = occupancy.get(shape)
            if rings_occ is None:
                parts = max(op.P, 1)
                n_rings = min(n_dma, max(1, -(-parts // per_ring)))
                per_partition = nbytes / parts
                run = op.dma_run_bytes
                desc = min(run, per_partition) if run > 0 else per_partition
                # A ring moves at most its share of HBM bandwidth; a DRAM-to-DRAM copy spends
                # that share twice (a read and a write per byte moved).
                occ = (max(nbytes, hbm) / n_rings / (ring_bw * efficiency(desc))
                       + hw.dge_ns_per_dma)
                rings_occ = occupancy[shape] = (n_rings, occ)
            n_rings, occ = rings_occ
            first = (_partition_start(op, mem) // per_ring) % n_dma
            q = queue_free[QUEUE_OF.get(op.kind, 0)]
            finish, t_first = 0.0, INF
            for k in range(n_rings):
                r = (first + k) % n_dma
                s = ready if ready > q[r] else q[r]
                ring = rings[r]
                e = ring.ends
                if not e or s > e[-1]:      # Timeline.fill's fast path, inlined
                    f = s + occ
                    ring.starts.append(s)
                    e.append(f)
                elif s == e[-1]:
                    f = e[-1] = s + occ
                else:
                    f = ring.fill(s, occ)
                q[r] = f
                if f > finish:
                    finish = f
                if s < t_first:
                    t_first = s
            ring_busy += occ * n_rings
            start[i] = t_first
            end[i] = finish + dma_fixed
            engine_of[i] = DMA
            continue

        key = (engines, op.kind, op.func, op.psum_inputs > 0, op.psum_out)
        choice = choices.get(key)
        if choice is None:
            choice = choices[key] = _choices(op, lanes, sbuf_port, psum_port, vg, vs)
        pi = preds[i]
        durs = dur_of[i]
        best_f = -1.0
        for k, e, ports, ports_and_lane in choice:
            ready = 0.0
            same = drain[e]
            for p in pi:
                ep = engine_of[p]
                t = end[p]
                if ep != DMA:
                    t += same if ep == e else sem
                if t > ready:
                    ready = t
            dur = durs[k]
            if lanes is None:
                s = ready if ready > free[e] else free[e]
            else:
                r = recent[e]
                lower = r[0] if len(r) == window and r[0] > ready else ready
                if op.in_order and free[e] > lower:
                    lower = free[e]   # no_reorder: after everything earlier on its engine
                le = lanes[e].ends
                s = lower if not le or lower >= le[-1] else lanes[e].earliest(lower, dur)
            if ports:
                while True:
                    t = s
                    for tl in ports_and_lane:
                        t = tl.earliest(t, dur)
                    if t == s:
                        break
                    s = t
            f = s + dur
            if best_f < 0 or f < best_f:
                best_f, best_s, best_e, best_dur, best_ports = f, s, e, dur, ports
        f, s, e, dur = best_f, best_s, best_e, best_dur
        for tl in best_ports:
            tl.reserve(s, dur)
        if lanes is not None:
            lanes[e].reserve(s, dur)
            recent[e].append(s)
        start[i], end[i], engine_of[i] = s, f, e
        if f > free[e]:
            free[e] = f
        busy[e] += dur

    makespan = max(end) if n else 0.0
    return Schedule(makespan, start, end, engine_of, busy, union_length(rings), ring_busy,
                    hw.dma_engines)


def _choices(op: Op, lanes, sbuf_port, psum_port, vg, vs) -> tuple:
    """(candidate index, engine, shared ports, ports plus the engine's lane) for each
    engine `op` may run on (an op that ScalarE prefers runs there; GpSimdE takes no
    multi-engine work)."""
    engines = op.engines
    candidates = range(len(engines))
    if len(engines) > 1:
        if tr.SCALAR in engines and _prefers_scalar(op):
            candidates = (engines.index(tr.SCALAR),)
        elif tr.GPSIMD_ENGINE in engines:
            candidates = [k for k, e in enumerate(engines) if e != tr.GPSIMD_ENGINE]
    touches_psum = op.psum_inputs > 0 or op.psum_out
    out = []
    for k in candidates:
        e = engines[k]
        ports = NO_PORTS
        if sbuf_port is not None and e in vg:
            ports = [sbuf_port]
        if psum_port is not None and touches_psum and e in vs:
            ports = ports + [psum_port]
        out.append((k, e, ports, ports if lanes is None else ports + [lanes[e]]))
    return tuple(out)


SCALAR_ALU = frozenset({"add", "subtract", "multiply", "divide"})


def _prefers_scalar(op: Op) -> bool:
    """Where the compiler puts `engine=unknown` work that ScalarE can do: PSUM->SBUF copies
    and tensor_scalar arithmetic ScalarE's `func(in * scale + bias)` expresses. Measured:
    the ScalarE active time of matmul, bmm, gqa, bmm_softmax, adamw, silu and
    rmsnorm_matmul is matched only with this assignment (trainium-perf-model.md §6.3)."""
    if op.kind == tr.COPY:
        return op.psum_inputs > 0
    if op.kind == tr.TS:
        return all(f.split("(")[0] in SCALAR_ALU for f in op.func.split(","))
    return False


def _partition_start(op: Op, memory: list[str]) -> int:
    """First SBUF partition a DMA touches (it picks the DMA engines that serve them)."""
    for bk, box in (op.writes if op.kind in (tr.DMA_LOAD, tr.DMA_SPILL_RELOAD) else op.reads):
        if memory[bk] != tr.HBM and box:
            return box[0][0]
    return 0
