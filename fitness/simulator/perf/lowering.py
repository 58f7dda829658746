"""Lowering: the emulator's trace -> the ops the rest of the model works on.

The emulator already records high-level calls in their hardware form (trainium-perf-model.md
§7.3): `nl.matmul(x, y)` as a TensorE transpose of x (matmul with the identity, whose 64 KiB
load it emits once), a PSUM->SBUF copy and the matmul; a partition broadcast as K=1
ones-stationary matmuls into PSUM plus copies, per 512 columns. What happens here:
* every access is split into a *block* (one logical tile of an on-chip tensor: tensor id +
  block indices; or a whole HBM tensor) and a box inside it, which is what liveness, CSE and
  dependencies reason on; blocks are interned as ints for speed;
* accesses of directly allocated tensors (`trace.placements`) become accesses of the physical
  SBUF (one block: partitions x byte addresses) and PSUM banks (a block each), so tiles that
  share bytes order each other as the hardware's one copy of them does (`_Physical`);
* instructions of a loop with `directives=no_reorder()` are marked to issue in program order;
* each instruction gets its candidate engines and whether the compiler may CSE/hoist it:
  loads, broadcasts, user transposes, plain copies and tensor_tensor may; the transposes and copies
  expanded from `nl.matmul` may not (measured: add_rmsnorm_matmul keeps one transpose per
  `nl.matmul` call, while its broadcast was hoisted out of the row loop).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from .. import trace as tr
from ..trace import PSUM

Box = tuple[tuple[int, int], ...]
BlockKey = int              # interned (tensor id, block index[, tags]): see Program.block
Access = tuple[BlockKey, Box]

# Instructions the compiler expands `nl.matmul` into (transpose of x, PSUM copy): the
# measured profiles keep one transpose per call, so they are not CSE candidates.
COMPILER_EXPANDED = frozenset({"nl.matmul"})
# tensor_tensor too: measured, neuronx-cc hoists `delta * u` out of mamba v2's and v3's state
# loop (compiler.py module doc, step 1).
CSE_KINDS = frozenset({tr.DMA_LOAD, tr.MM_TRANSPOSE, tr.MM_BCAST, tr.COPY, tr.TT})
DMA_KINDS = frozenset({tr.DMA_LOAD, tr.DMA_STORE, tr.DMA_SPILL_SAVE, tr.DMA_SPILL_RELOAD})
MM_KINDS = frozenset({tr.MM, tr.MM_TRANSPOSE, tr.MM_BCAST})


@dataclass(slots=True)
class TensorMeta:
    """What the model needs to know about a tensor (trace tensors and synthetic ones)."""

    memory: str           # hbm / sbuf / psum
    block_bytes: int      # bytes per partition of one block (on-chip); whole size for HBM
    itemsize: int
    kind: str             # input / output / scratch / constant / synthetic
    site: object          # allocation site: instances of one site share physical slots
    name: str = ""


@dataclass(slots=True)
class Op:
    """One hardware-level instruction after lowering (and, later, after compiler effects)."""

    kind: str
    engines: tuple[str, ...]
    dtype: str
    in_dtypes: tuple[str, ...]
    P: int
    N: int
    reads: list[Access]
    writes: list[Access]
    loop_path: tuple[tuple[int, int], ...]
    line: int
    func: str = ""
    mm: tr.MatmulInfo | None = None
    dma_bytes: int = 0
    dma_run_bytes: int = 0
    psum_inputs: int = 0
    strided: bool = False
    cse: bool = False          # eligible for CSE / loop-invariant hoisting
    psum_out: bool = False     # writes PSUM
    hbm_tensor_kind: str = ""  # DMA: kind of the HBM tensor it reads (or else writes)
    pos: int = 0               # sort key of program order (original position x 4)
    origin: int = -1           # trace instruction id (-1: inserted by the model)
    source: str = ""           # the NKI call it was expanded from ("broadcast_to", ...)
    hbm_write_kind: str = ""   # DMA: kind of the HBM tensor it writes ("" when it writes SBUF)
    hbm_read_bytes: int = 0    # DMA: bytes it reads from HBM
    hbm_write_bytes: int = 0   # DMA: bytes it writes to HBM
    in_order: bool = False     # in a loop with directives=no_reorder(): issued in program order


@dataclass
class Program:
    """The lowered kernel: ops in program order, the tensor table and the block table.

    Blocks (one logical tile of an on-chip tensor, or a whole HBM tensor) are interned as
    ints: `block_key[b]` is (tensor id, block index[, tags]), `block_tensor[b]` its tensor
    and `block_memory[b]` where it lives."""

    ops: list[Op]
    tensors: dict[int, TensorMeta]
    loops: dict[int, tr.Loop] = field(default_factory=dict)
    dialect: str = "legacy"     # the trace's: which compiler's effects apply (compiler.py)
    options: tuple[str, ...] = ()   # the kernel's compiler flags (trace.options)
    placed: bool = False        # some tensor is directly allocated (its accesses are physical)
    next_tensor_id: int = -1
    block_key: list[tuple] = field(default_factory=list)
    block_tensor: list[int] = field(default_factory=list)
    block_memory: list[str] = field(default_factory=list)
    _ids: dict[tuple, int] = field(default_factory=dict)

    def new_tensor(self, meta: TensorMeta) -> int:
        tid = self.next_tensor_id
        self.next_tensor_id -= 1
        self.tensors[tid] = meta
        return tid

    def block(self, key: tuple) -> BlockKey:
        b = self._ids.get(key)
        if b is None:
            b = self._ids[key] = len(self.block_key)
            self.block_key.append(key)
            self.block_tensor.append(key[0])
            self.block_memory.append(self.tensors[key[0]].memory)
        return b

    def block_bytes(self, b: BlockKey) -> int:
        return self.tensors[self.block_tensor[b]].block_bytes


def _site(info: tr.TensorInfo) -> object:
    # Tiles created afresh in every loop iteration are instances of one allocation site: the
    # statement that creates them. Block-dim tensors are one site whose blocks are instances.
    if info.partition_axis is not None and info.partition_axis == 0 and info.line > 0:
        return ("line", info.line, info.name, info.memory, info.shape)
    return ("tensor", info.id)


def _meta(info: tr.TensorInfo) -> TensorMeta:
    if info.memory == tr.HBM or info.partition_axis is None:
        size = math.prod(info.shape) * info.itemsize
    else:
        size = math.prod(info.shape[info.partition_axis + 1:]) * info.itemsize
    return TensorMeta(info.memory, size, info.itemsize, info.kind, _site(info), info.name)


def accesses(prog: Program, region: tr.Region, info: tr.TensorInfo) -> list[Access]:
    """Split a region into (block, box inside the block) pieces."""
    pa = info.partition_axis
    box = region.box
    if not pa or info.memory == tr.HBM:
        return [(prog.block((region.tensor, ())), box)]
    outer = box[:pa]
    unit = True
    for a, b in outer:
        if b - a != 1:
            unit = False
            break
    if unit:
        return [(prog.block((region.tensor, tuple([a for a, _ in outer]))), box[pa:])]
    inner = box[pa:]
    blocks = itertools.product(*(range(a, b) for a, b in outer))
    return [(prog.block((region.tensor, blk)), inner) for blk in blocks]


class _Physical:
    """Accesses of directly allocated tensors (trace.placements) as accesses of the physical
    memory: one block for SBUF (boxes: partitions x byte addresses) and one per PSUM bank
    (partitions x bytes in the bank). Tiles of one tensor or of several that share addresses
    then order each other as the hardware's one copy of those bytes does (data edges), which
    is also what rotates a tensor's logical tiles through its physical tiles."""

    def __init__(self, prog: Program, trace: tr.Trace):
        self.prog = prog
        self.placements = trace.placements
        self.infos = trace.tensors
        self.tids: dict[str, int] = {}
        self.layout: dict[int, tuple] = {}
        footprint = 0
        for tid, pl in self.placements.items():
            info = trace.tensors[tid]
            if pl.memory == tr.SBUF:
                local_bytes = math.prod(info.shape[info.partition_axis + 1:]) * info.itemsize
                footprint = max([footprint] + [addr + local_bytes for _, addr in pl.tiles.values()])
        for memory in sorted({pl.memory for pl in self.placements.values()}):
            size = footprint if memory == tr.SBUF else 2048
            self.tids[memory] = prog.new_tensor(TensorMeta(memory, max(size, 1), 1, "scratch", ("physical", memory),
                                                           f"physical {memory}"))

    def accesses(self, r: tr.Region) -> list[Access]:
        info = self.infos[r.tensor]
        pl = self.placements[r.tensor]
        lay = self.layout.get(r.tensor)
        if lay is None:
            pa = info.partition_axis
            local = info.shape[pa:]
            strides, acc = [], 1
            for n in reversed(local[1:]):
                strides.append(acc)
                acc *= n
            lay = self.layout[r.tensor] = (pa, tuple(reversed(strides)), info.itemsize)
        pa, strides, isz = lay
        box = r.box
        (plo, phi), free = box[pa], box[pa + 1:]
        if phi <= plo or any(b <= a for a, b in free):
            return []
        first = sum(a * s for (a, _), s in zip(free, strides))
        last = sum((b - 1) * s for (_, b), s in zip(free, strides))
        out: list[Access] = []
        tid = self.tids[pl.memory]
        for key in itertools.product(*(range(a, b) for a, b in box[:pa])):
            p0, addr = pl.tiles[key]
            a0, a1 = addr + first * isz, addr + (last + 1) * isz
            if pl.memory == tr.PSUM:
                bank = addr // 2048
                base = bank * 2048
                out.append((self.prog.block((tid, (bank,))), ((p0 + plo, p0 + phi), (a0 - base, a1 - base))))
            else:
                out.append((self.prog.block((tid, ())), ((p0 + plo, p0 + phi), (a0, a1))))
        return out


def lower(trace: tr.Trace) -> Program:
    """Build the lowered program from an emulator trace (the trace is not modified)."""
    tensors = {tid: _meta(info) for tid, info in trace.tensors.items()}
    prog = Program([], tensors, dict(trace.loops), trace.dialect, tuple(trace.options), bool(trace.placements))
    infos = trace.tensors
    physical = _Physical(prog, trace) if trace.placements else None
    in_order = {lid for lid, names in (trace.loop_directives or {}).items() if "no_reorder" in names}
    ops = prog.ops
    # Fast path of `accesses` for the common case (block dims indexed by integers).
    split = {tid: (info.partition_axis or 0) if info.memory != tr.HBM else 0
             for tid, info in infos.items()}
    ids = prog._ids
    # Instructions touch the same regions over and over (a tile written once, read by
    # many), and the trace shares one Region object between them: each object is split
    # once, and its accesses are shared. The trace keeps every region alive meanwhile, so
    # their ids are unique.
    seen: dict[int, list[Access]] = {}

    def split_region(r: tr.Region) -> list[Access]:
        if physical is not None and r.tensor in physical.placements:
            return physical.accesses(r)
        pa = split[r.tensor]
        box = r.box
        if pa == 0:
            key = (r.tensor, ())
        else:
            outer = box[:pa]
            blk = tuple([a for a, _ in outer])
            if sum([b for _, b in outer]) - sum(blk) != pa:   # some block dim not a scalar
                return accesses(prog, r, infos[r.tensor])
            key = (r.tensor, blk)
            box = box[pa:]
        b = ids.get(key)
        return [(b if b is not None else prog.block(key), box)]

    def acc(regions: tuple[tr.Region, ...]) -> list[Access]:
        out: list[Access] = []
        for r in regions:
            pieces = seen.get(id(r))
            if pieces is None:
                pieces = seen[id(r)] = split_region(r)
            out += pieces
        return out

    mem = prog.block_memory
    for i, ins in enumerate(trace.instrs):
        writes = acc(ins.writes)
        psum_out = False
        for b, _ in writes:
            if mem[b] == PSUM:
                psum_out = True
                break
        op = _op(ins, acc(ins.reads), writes, psum_out, infos, 4 * i)
        if in_order and any(lid in in_order for lid, _ in ins.loop_path):
            op.in_order = True
        ops.append(op)
    return prog


def _engines(ins: tr.Instr) -> tuple[str, ...]:
    if ins.kind in DMA_KINDS:
        return (tr.DMA,)
    if ins.kind in MM_KINDS:
        return (tr.TENSOR,)
    if ins.kind == tr.ACT:
        return (tr.SCALAR,)
    if ins.kind == tr.GPSIMD:
        return (tr.GPSIMD_ENGINE,)
    return tuple(ins.engines) or (tr.VECTOR,)


def _op(ins: tr.Instr, reads: list[Access], writes: list[Access], psum_out: bool,
        infos: dict[int, tr.TensorInfo], pos: int) -> Op:
    kind = ins.kind
    # Only plain copies are provably identical.
    cse = (kind in CSE_KINDS and ins.op not in COMPILER_EXPANDED
           and not (kind == tr.COPY and ins.func not in ("", "copy")))
    # Positional: Op's fields in declaration order (the keyword form costs a third more).
    op = Op(kind, _engines(ins), ins.dtype, tuple(ins.in_dtypes), ins.partitions, ins.free,
            reads, writes, ins.loop_path, ins.line, ins.func, ins.mm, 0, 0, ins.psum_inputs,
            ins.strided, cse, psum_out, "", pos, ins.id, ins.op)
    dma = ins.dma
    if dma is not None:
        op.dma_bytes = dma.bytes
        op.dma_run_bytes = dma.run_bytes
        op.P = dma.partitions or ins.partitions
        src = [infos[r.tensor].kind for r in ins.reads if infos[r.tensor].memory == tr.HBM]
        dst = [infos[r.tensor].kind for r in ins.writes if infos[r.tensor].memory == tr.HBM]
        op.hbm_tensor_kind = (src or dst or [""])[0]
        op.hbm_write_kind = dst[0] if dst else ""
        # Priced at both ends: a DRAM-to-DRAM copy reads and writes HBM.
        op.hbm_read_bytes = dma.read_bytes if src else 0
        op.hbm_write_bytes = dma.bytes if dst else 0
    return op
