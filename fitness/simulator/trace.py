"""The instruction trace: what the emulator records and the performance model times.

One `Instr` per hardware-level instruction in program order (trainium-perf-model.md §7.2).
Regions are boxes in a tensor's logical index space (one [start, stop) interval per dim,
block dims included), so two accesses overlap iff their boxes intersect on every dim; this
is exact for the affine, unit-stride patterns NKI kernels use and conservative otherwise.

This module is the contract between `fitness.simulator` (producer) and
`fitness.simulator.perf` (consumer); it imports nothing of ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Instruction kinds (§7.2). DMA_* move data between HBM and SBUF; MM_* run on TensorE;
# the rest are Vector/Scalar/GpSimd instructions.
DMA_LOAD = "DMA_LOAD"
DMA_STORE = "DMA_STORE"
DMA_SPILL_SAVE = "DMA_SPILL_SAVE"
DMA_SPILL_RELOAD = "DMA_SPILL_RELOAD"
MM = "MM"
MM_TRANSPOSE = "MM_TRANSPOSE"
MM_BCAST = "MM_BCAST"
ACT = "ACT"        # activation (ScalarE)
TS = "TS"          # tensor_scalar
TT = "TT"          # tensor_tensor
TTS = "TTS"        # tensor_tensor_scan
RED = "RED"        # tensor_reduce / nl.sum / nl.max
RECIP = "RECIP"    # reciprocal
COPY = "COPY"      # tensor copy (incl. PSUM -> SBUF eviction)
MEMSET = "MEMSET"
GPSIMD = "GPSIMD"  # other GpSimd work (iota, affine_select, ...)

KINDS = (DMA_LOAD, DMA_STORE, DMA_SPILL_SAVE, DMA_SPILL_RELOAD, MM, MM_TRANSPOSE, MM_BCAST,
         ACT, TS, TT, TTS, RED, RECIP, COPY, MEMSET, GPSIMD)

# Engines: T(ensor), V(ector), S(calar), G(pSimd), and the DMA queues.
TENSOR, VECTOR, SCALAR, GPSIMD_ENGINE, DMA = "T", "V", "S", "G", "DMA"

# Memories of a tensor.
HBM, SBUF, PSUM = "hbm", "sbuf", "psum"


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """A tensor the kernel created or received. On-chip shapes are (block..., P, free...)."""

    id: int
    name: str
    memory: str                  # HBM, SBUF or PSUM
    shape: tuple[int, ...]
    dtype: str                   # numpy dtype name: "float32", "bfloat16", ...
    itemsize: int
    partition_axis: int | None   # index of the partition dim in `shape` (None for HBM)
    kind: str = "scratch"        # "input", "output", "scratch", "constant"
    loop_path: tuple[tuple[int, int], ...] = ()   # where it was created: ((loop_id, iteration), ...)
    line: int = 0


@dataclass(frozen=True, slots=True)
class Region:
    """A box of elements of one tensor: `box[d] = (start, stop)` for every dim of its shape."""

    tensor: int
    box: tuple[tuple[int, int], ...]

    def overlaps(self, other: "Region") -> bool:
        if self.tensor != other.tensor:
            return False
        return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(self.box, other.box))


@dataclass(frozen=True, slots=True)
class MatmulInfo:
    K: int                       # contraction (partitions of both operands)
    M: int                       # stationary free size = output partitions
    N: int                       # moving free size = output free size
    accumulate: bool             # `+=` into PSUM (matmul accumulation group)
    stationary_onezero: bool = False
    moving_onezero: bool = False
    is_transpose: bool = False


@dataclass(frozen=True, slots=True)
class DmaInfo:
    bytes: int                   # payload written at the destination (masked-out elements excluded)
    partitions: int              # partitions (rows) of the transfer
    run_bytes: int               # descriptor size: the shorter contiguous run of its two ends, in bytes
    runs: int                    # number of descriptors (contiguous runs)
    src_bytes: int | None = None  # bytes read at the source (None: as many as written)

    @property
    def read_bytes(self) -> int:
        return self.bytes if self.src_bytes is None else self.src_bytes


@dataclass(frozen=True, slots=True)
class Placement:
    """Where direct allocation (`ncc.sbuf.alloc`/`mod_alloc`, `ncc.psum.alloc`/`mod_alloc`) put
    a tensor: per logical tile (block index, `()` without block dims), the physical tile's
    first partition and byte address in its memory's per-partition space (PSUM: 2 KiB per
    bank, so bank b starts at b * 2048). Logical tiles of one tensor or of several that map
    to the same addresses share those bytes."""

    memory: str                  # SBUF or PSUM
    tiles: dict                  # block index -> (start partition, byte address)


@dataclass(frozen=True, slots=True)
class Loop:
    id: int
    kind: str                    # "affine", "sequential", "static", "range"
    start: int
    stop: int
    step: int
    parent: int | None           # enclosing loop id
    line: int = 0


@dataclass(slots=True)
class Instr:
    id: int
    kind: str                    # one of KINDS
    op: str                      # the API call, e.g. "nisa.activation", "nl.load", "nl.matmul"
    engines: tuple[str, ...]     # candidate engines; more than one = the compiler chooses
    dtype: str                   # output dtype name
    in_dtypes: tuple[str, ...]   # dtypes of the tensor inputs
    partitions: int              # P of the instruction
    free: int                    # elements per partition the engine streams (inputs for reductions)
    reads: tuple[Region, ...]
    writes: tuple[Region, ...]
    loop_path: tuple[tuple[int, int], ...]   # ((loop_id, iteration value), ...) outermost first
    line: int                    # line in the kernel source
    func: str = ""               # activation function / ALU op names, e.g. "exp", "add,multiply"
    mm: MatmulInfo | None = None
    dma: DmaInfo | None = None
    psum_inputs: int = 0         # how many tensor inputs live in PSUM (cost depends on it)
    strided: bool = False        # most-minor free stride > 16 bytes on some operand


# Version of the trace's format: caches of pickled traces key on it (a trace pickled by an
# older version may lack fields, or price differently).
FORMAT = 2

DIALECTS = ("legacy", "current")   # the front-end that produced a trace (runtime.FrontEnd.name)


@dataclass
class Trace:
    instrs: list[Instr] = field(default_factory=list)
    tensors: dict[int, TensorInfo] = field(default_factory=dict)
    loops: dict[int, Loop] = field(default_factory=dict)
    kernel_file: str = ""
    # Which NKI dialect's front-end recorded it: legacy kernels went through neuronx-cc,
    # current ones through the NKI compiler (perf/compiler.py applies the former's effects
    # only). A class-level default, so that traces pickled before the field load as legacy.
    dialect: str = "legacy"
    # What the kernel asked of the compiler (legacy dialect): decorator flags such as
    # "skip_middle_end_transformations" (perf/compiler.py applies no middle-end effect then).
    options: tuple[str, ...] = ()
    # Loop id -> the names of its `directives=` ("no_reorder"); None: no loop has any.
    loop_directives: dict[int, tuple[str, ...]] | None = None
    # Tensor id -> its direct allocation; None: every tensor is allocated by the compiler.
    # (Class-level defaults, like `dialect`: traces pickled before these fields load as such.)
    placements: dict[int, Placement] | None = None

    def memory_of(self, tensor_id: int) -> str:
        return self.tensors[tensor_id].memory

    def difference(self, other: "Trace") -> str:
        """Where `other` departs from this trace, in a few words ("" when they are equal)."""
        if self == other:
            return ""
        for a, b in zip(self.instrs, other.instrs):
            if a != b:
                return f"instruction {a.id}: {a.op} at line {a.line} against {b.op} at line {b.line}"
        if len(self.instrs) != len(other.instrs):
            return f"{len(self.instrs)} instructions against {len(other.instrs)}"
        return "the same instructions on different tensors or loops"
