"""On-chip capacity of the target a kernel runs on, as the compiler enforces it.

The core does not know the targets (their facts live in `fitness.simulator.perf.hardware`,
which the core may not import): the caller builds a `Capacity` from them
(`fitness.simulator.runner.capacity`) and hands it to `launch.simulate`; without one a run
has trn1's, as before targets were known.

What the compiler refuses, and what it does not:

* one tile (`core.tensor.check_tile_limits`): more than `partitions` partitions, more than
  `sbuf_usable_bytes` per partition in SBUF, more than one `psum_bank_bytes` bank in PSUM
  (legacy tiles; the current dialect's PSUM tensors may span banks, up to all of them);
* one instruction (`check_instructions`): the tiles it reads and writes must be in SBUF/PSUM
  at once, so together they must fit;
* the tiles live at once across the kernel may exceed SBUF or PSUM: "If the total size of the
  live data being used by a NKI kernel overflows the capacity of any on-chip memory, the
  Neuron compiler will insert the necessary spills or refills between that memory and the
  next-tier memory in the hierarchy" (NKI docs, nki/get-started/about/memory-hierarchy-
  overview.rst); the trn1 measurements agree (the attention tutorial's v3 keeps 64 PSUM banks
  of scores live at seqlen 2048 and runs). `live_peak` computes that peak (what the compiler
  must spill); a `Capacity` with `spills=False` refuses it instead (`check_live`), for
  callers that want kernels that fit without spilling.

Liveness: a tile (one block of a tensor) is live from its first access to its last one, in
program order. A site inside a loop whose tile dies within the iteration counts once (the
allocator rotates one buffer); tiles kept across iterations (a list of tiles, a loop-carried
tile, the blocks of a kernel-level tensor) count each. A tile never accessed occupies nothing
(the compiler drops it). Kernels that place their tensors themselves (direct allocation,
`core.placement`) are checked there, address by address, against the same capacity.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from .. import errors
from ..trace import PSUM, SBUF, Trace

KIB = 1024


@dataclass(frozen=True)
class Capacity:
    """SBUF and PSUM of one target, per partition."""

    target: str = "trn1"
    partitions: int = 128
    sbuf_partition_bytes: int = 192 * KIB     # physical bytes of one SBUF partition
    sbuf_usable_bytes: int = 176 * KIB        # what the compiler leaves to kernels
    psum_bank_bytes: int = 2 * KIB            # one accumulation bank per partition
    psum_banks: int = 8
    # True: tiles live at once beyond SBUF/PSUM are spilled, as the compiler does; False: refused
    spills: bool = True
    # anonymous tile layouts checked against this capacity (`core.tensor.anon_tile`)
    anon_layouts: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def sbuf_reserve(self) -> str:
        """How the usable bytes relate to the physical ones, for messages."""
        return (f"{self.sbuf_partition_bytes // KIB} KiB less the "
                f"{(self.sbuf_partition_bytes - self.sbuf_usable_bytes) // KIB} KiB the compiler keeps")


DEFAULT = Capacity()   # trn1 (NeuronCore-v2): what a run without a target gets

# Sites listed in a capacity error (the largest first); the rest are counted.
MAX_SITES = 12


@dataclass
class _Site:
    """The tiles of one allocation site live at the peak."""

    line: int
    memory: str
    shape: tuple[int, ...]
    dtype: str
    per_tile: int            # bytes per partition (SBUF) or banks (PSUM) of one tile
    count: int = 0
    names: set = field(default_factory=set)


def tile_units(memory: str, local: tuple[int, ...], itemsize: int, cap: Capacity) -> int:
    """What one tile of (partition, free...) shape `local` occupies: bytes per partition in
    SBUF, banks in PSUM (a PSUM tile takes whole banks: one accumulation group per bank)."""
    per_partition = itemsize
    for n in local[1:]:
        per_partition *= n
    if memory == PSUM:
        return max(1, -(-per_partition // cap.psum_bank_bytes))
    return per_partition


def live_ranges(trace: Trace) -> dict:
    """(first, last) instruction index of every accessed on-chip tile: key = tensor id for a
    tensor without block dims, (tensor id, block index) for one block of a tensor with them."""
    onchip = {tid: info.partition_axis or 0 for tid, info in trace.tensors.items()
              if info.memory == SBUF or info.memory == PSUM}
    first: dict = {}
    last: dict = {}
    get = onchip.get
    for ins in trace.instrs:
        i = ins.id
        for regs in (ins.reads, ins.writes):
            for reg in regs:
                nb = get(reg.tensor)
                if nb is None:
                    continue
                if not nb:
                    k = reg.tensor
                    if k not in first:
                        first[k] = i
                    last[k] = i
                    continue
                for k in _blocks(reg, nb):
                    if k not in first:
                        first[k] = i
                    last[k] = i
    return {k: (f, last[k]) for k, f in first.items()}


def check(trace: Trace, cap: Capacity) -> None:
    """The capacity rules of an automatically allocated kernel, when it ends."""
    check_instructions(trace, cap)
    if not cap.spills:
        check_live(trace, cap)


def _units(trace: Trace, cap: Capacity) -> dict[int, int]:
    """What one tile of each on-chip tensor occupies (see `tile_units`), by tensor id."""
    out: dict[int, int] = {}
    for tid, info in trace.tensors.items():
        if info.memory == SBUF or info.memory == PSUM:
            out[tid] = tile_units(info.memory, info.shape[info.partition_axis or 0:], info.itemsize, cap)
    return out


def check_instructions(trace: Trace, cap: Capacity) -> None:
    """Refuse an instruction whose SBUF tiles (or PSUM tiles) together exceed the target's
    SBUF partition (or PSUM banks): its operands cannot be spilled while it runs."""
    tensors = trace.tensors
    units = _units(trace, cap)
    width = max((len(ins.reads) + len(ins.writes) for ins in trace.instrs), default=0)
    if width < 2:
        return
    # When the `width` largest tiles of each memory fit together, no instruction can exceed it
    # (the common case: the full scan below is skipped).
    by_memory: dict[str, list[int]] = {SBUF: [], PSUM: []}
    for tid, u in units.items():
        by_memory[tensors[tid].memory].append(u)
    if (sum(heapq.nlargest(width, by_memory[SBUF])) <= cap.sbuf_usable_bytes
            and sum(heapq.nlargest(width, by_memory[PSUM])) <= cap.psum_banks):
        return
    sbuf = {tid: u for tid, u in units.items() if tensors[tid].memory == SBUF}
    psum = {tid: u for tid, u in units.items() if tensors[tid].memory == PSUM}
    sbuf_limit, psum_limit = cap.sbuf_usable_bytes, cap.psum_banks
    ranges = None   # live ranges, computed when an instruction seems not to fit
    for ins in trace.instrs:
        regs = ins.reads + ins.writes
        if len(regs) < 2:
            continue   # one tile: the per-tile limit holds it
        a = b = 0      # an upper bound: a tile accessed twice counts twice
        for reg in regs:
            u = sbuf.get(reg.tensor)
            if u is not None:
                a += u
            else:
                b += psum.get(reg.tensor, 0)
        if a <= sbuf_limit and b <= psum_limit:
            continue
        reads = {_key(reg, tensors): units[reg.tensor] for reg in ins.reads if reg.tensor in units}
        writes = {_key(reg, tensors): units[reg.tensor] for reg in ins.writes if reg.tensor in units}
        for memory, limit in ((SBUF, sbuf_limit), (PSUM, psum_limit)):
            tiles = {k: u for k, u in (reads | writes).items() if tensors[_tid(k)].memory == memory}
            total = sum(tiles.values())
            if total <= limit:
                continue
            if ranges is None:
                ranges = live_ranges(trace)
            if total - _in_place(ins.id, memory, reads, writes, ranges, tensors) > limit:
                _refuse(trace, cap, memory, total, ins.id, limit, list(tiles), units, ins.line, live=False)


def _key(reg, tensors) -> object:
    """The `live_ranges` key of the (first) tile `reg` addresses: an instruction over several
    blocks of a tensor is one per block on the hardware, so it needs one block at a time."""
    nb = tensors[reg.tensor].partition_axis or 0
    return (reg.tensor, tuple([lo for lo, _ in reg.box[:nb]])) if nb else reg.tensor


def _blocks(reg, nb: int):
    """(tensor id, block index) of every block a region of a tensor with `nb` block dims
    spans (one, except for an instruction over several blocks, e.g. a memset of all)."""
    box = reg.box[:nb]
    if all(hi - lo == 1 for lo, hi in box):
        yield (reg.tensor, tuple([lo for lo, _ in box]))
        return
    for key in itertools.product(*(range(lo, hi) for lo, hi in box)):
        yield (reg.tensor, key)


def _in_place(i: int, memory: str, reads: dict, writes: dict, ranges: dict, tensors) -> int:
    """What instruction `i`'s outputs in `memory` can take from its inputs' storage: an input
    whose last use is `i` can hold one output no larger than itself (engines stream, so the
    allocator may write a result over the operand it consumes)."""
    dying = sorted((u for k, u in reads.items() if k not in writes and ranges[k][1] == i
                    and tensors[_tid(k)].memory == memory))   # smallest first: the best fit
    saved = 0
    for u in sorted((u for k, u in writes.items() if k not in reads and tensors[_tid(k)].memory == memory),
                    reverse=True):
        for j, d in enumerate(dying):
            if d >= u:
                saved += u
                del dying[j]
                break
    return saved


def live_peak(trace: Trace, cap: Capacity, memory: str) -> tuple[int, int, list]:
    """(peak, instruction index, tiles live there) of `memory`'s tiles live at once: bytes per
    partition in SBUF, banks in PSUM; tiles are `live_ranges` keys. (0, -1, []) without tiles."""
    ranges = live_ranges(trace)
    units = _units(trace, cap)
    keys = [k for k in ranges if trace.tensors[_tid(k)].memory == memory]
    peak, at = _peak(keys, ranges, units)
    return peak, at, [k for k in keys if ranges[k][0] <= at <= ranges[k][1]]


def check_live(trace: Trace, cap: Capacity) -> None:
    """Refuse a kernel whose tiles live at once need more SBUF bytes per partition, or more
    PSUM banks, than `cap` has (what a compiler that did not spill would refuse)."""
    ranges = live_ranges(trace)
    if not ranges:
        return
    tensors = trace.tensors
    units = _units(trace, cap)
    for memory, limit in ((SBUF, cap.sbuf_usable_bytes), (PSUM, cap.psum_banks)):
        keys = [k for k in ranges if tensors[_tid(k)].memory == memory]
        peak, at = _peak(keys, ranges, units)
        if peak > limit:
            live = [k for k in keys if ranges[k][0] <= at <= ranges[k][1]]
            # the kernel line the error points at: the site of the tile allocated last before the peak
            newest = max(live, key=lambda k: ranges[k][0])
            _refuse(trace, cap, memory, peak, at, limit, live, units, tensors[_tid(newest)].line)


def _tid(k) -> int:
    return k if type(k) is int else k[0]


def _peak(keys: list, ranges: dict, units: dict[int, int]) -> tuple[int, int]:
    """(largest sum of units live at one instruction, that instruction's index). A tile is
    live at its first and last instruction both (the instruction that reads the last use of
    one tile and writes the first of another needs them both)."""
    events: list[tuple[int, int, int]] = []
    for k in keys:
        f, last = ranges[k]
        u = units[_tid(k)]
        events.append((f, 0, u))          # starts sort before ends at the same instruction
        events.append((last, 1, -u))
    events.sort()
    live = peak = 0
    at = -1
    for i, _, u in events:
        live += u
        if live > peak:
            peak, at = live, i
    return peak, at


def _refuse(trace: Trace, cap: Capacity, memory: str, peak: int, at: int, limit: int, keys: list,
            units: dict[int, int], line: int, live: bool = True) -> None:
    """Raise the capacity error naming the allocation sites (file:line, shape, dtype, size) of
    the tiles `keys`: those live at the peak (`live`), or one instruction's operands."""
    tensors = trace.tensors
    sites: dict[tuple, _Site] = {}
    for k in keys:
        info = tensors[_tid(k)]
        local = info.shape[info.partition_axis or 0:]
        skey = (info.line, local, info.dtype)
        s = sites.get(skey)
        if s is None:
            s = sites[skey] = _Site(info.line, memory, local, info.dtype, units[info.id])
        s.count += 1
        if info.name:
            s.names.add(info.name)
    order = sorted(sites.values(), key=lambda s: (-s.per_tile * s.count, s.line))
    file = trace.kernel_file
    listed = []
    for s in order[:MAX_SITES]:
        name = f" '{next(iter(s.names))}'" if len(s.names) == 1 else ""
        times = f" x {s.count} tiles = {_amount(memory, s.per_tile * s.count)}" if s.count > 1 else ""
        listed.append(f"{file}:{s.line}{name} {s.memory} {list(s.shape)} {s.dtype} "
                      f"({_amount(memory, s.per_tile)}{times})")
    if len(order) > MAX_SITES:
        listed.append(f"and {len(order) - MAX_SITES} more sites")
    sites_text = "; ".join(listed)
    ins_line = trace.instrs[at].line if 0 <= at < len(trace.instrs) else 0
    if live:
        what = f"the {memory.upper()} tiles live at once at instruction {at} (line {ins_line})"
        where = "live at the peak"
        advice = ("use smaller tiles, keep fewer tiles across loop iterations, or end tiles' lives earlier" if memory == SBUF
                  else "evict PSUM results to SBUF before starting more accumulation groups")
    else:
        what = f"the {memory.upper()} operands of instruction {at} (line {ins_line}), which must be resident together,"
        where = "its operands"
        advice = "split the instruction into smaller tiles"
    if memory == SBUF:
        raise errors.SbufCapacityError(
            f"SBUF capacity of {cap.target} exceeded: {what} need {peak} bytes per partition, more than the "
            f"{limit} usable bytes of an SBUF partition ({cap.sbuf_reserve}); {where}: {sites_text}; {advice}",
            file, line)
    raise errors.PsumCapacityError(
        f"PSUM capacity of {cap.target} exceeded: {what} occupy {peak} PSUM banks, more than the {limit} banks "
        f"of {cap.psum_bank_bytes} bytes per partition (a PSUM tile takes whole banks); {where}: {sites_text}; "
        f"{advice}", file, line)


def _amount(memory: str, n: int) -> str:
    if memory == SBUF:
        return f"{n} B/partition"
    return f"{n} bank" + ("s" if n != 1 else "")
