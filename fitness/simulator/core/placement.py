"""Direct allocation: tensors a kernel placed at explicit SBUF/PSUM addresses
(`ncc.sbuf.alloc`/`mod_alloc`, `ncc.psum.alloc`/`mod_alloc` as `buffer=`), the physical
memory they share, and the bookkeeping that tells live data from data another placement
overwrote. Semantics from the NKI Direct Allocation Developer Guide and the API pages of
`nki.compiler.sbuf` / `nki.compiler.psum` (Neuron 2.26, the last legacy documentation):

* A tensor (B..., P, F...) has one logical tile per block index; the allocation function
  maps each to a physical tile: `(start_partition, byte_addr)` in SBUF, `(bank,
  start_partition, byte_addr)` in PSUM. `mod_alloc` is the documented modulo formula (the
  reference implementation on its API page, `modulo_allocate_func`): the block index modulo
  `num_*_tiles`, linearised, times the tile's partitions / bytes, plus the base. Logical tiles
  that map to the same physical tile share its bytes, and so do tiles of different tensors
  whose addresses overlap: the data are in one place, as on the hardware.
* Addresses: SBUF byte addresses in [0, 192 KiB - 16 KiB) on NeuronCore-v2 ("16KiB is
  allocated for compiler internal usage"), start partitions 0 (P > 64), 0/64 (P > 32) or
  0/32/64/96 (P <= 32); PSUM banks 0-7, start partition and byte address 0 ("only one
  physical tile can live in a PSUM bank at a time"), a tile within one 2 KiB bank.
* "Each NKI kernel has its own address space, and any physical tiles that must be alive
  simultaneously ... should be assigned unique addresses"; the compiler's checks "are
  in-complete", so a conflict may go unnoticed there and compute wrong numbers. Here it is
  refused instead: a logical tile read (or accumulated into) where another tile has written
  since this one last wrote is a `LifetimeConflictError` at the reading instruction. Reading
  bytes the tile never wrote reads what the memory holds (NaN where nothing was ever
  written, else another tensor's data), as uninitialised memory does on the hardware.
* An accumulation group (`psum[...] += nisa.nc_matmul(...)`) starts, with an overwrite, at
  the first matmul into a part of a logical tile that tile has not written yet, whatever the
  bank holds from other tiles; it continues (adds) where the tile has written.
* Not allowed in an allocated kernel (checked when the kernel ends): automatic allocation
  (`buffer=nl.sbuf`/`nl.psum` and instruction results not assigned into an allocated
  tensor), HBM tensors that are not kernel outputs ("Non IO HBM tensor is not supported in
  allocated NKI kernel"; `nl.shared_constant` is allowed), TensorE transposes through the
  compiler's identity, activations without a bias tensor, and tensors created with an
  initial value (checked at creation).

The conflict bookkeeping replays the trace's records (reads before writes of each
instruction, with their final regions after results were assigned into destinations), so it
holds in shape-only runs too; it runs up to the current instruction before each matmul
accumulation (whose group start depends on it) and to the end when the kernel finishes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from .. import errors
from ..trace import HBM, PSUM, SBUF, Placement
from . import tensor as T
from .runtime import machine

SBUF_BYTES = T.SBUF_USABLE_BYTES            # trn1's valid SBUF byte addresses: [0, SBUF_BYTES); a run
#                                             checks its target's (`Machine.capacity.sbuf_usable_bytes`)
PSUM_BANKS = 8
PSUM_BYTES = PSUM_BANKS * T.PSUM_BANK_BYTES
BUCKET = 2048                               # bytes per bucket of the conflict index (one PSUM bank)
UNWRITTEN = 0xFF                            # the byte uninitialised memory holds (NaN in every float type)

Rect = tuple[int, int, int, int]            # partitions [p0, p1) x bytes [a0, a1)


# --- the allocation functions (what `buffer=` receives) -------------------------------------------

class Allocation:
    """A direct allocation passed as `buffer=`: its memory and the function of (block index,
    partitions, bytes per partition) giving each logical tile's physical location."""

    __slots__ = ("memory", "func", "api")

    def __init__(self, memory: str, func: Callable, api: str):
        self.memory = memory
        self.func = func
        self.api = api

    def __repr__(self) -> str:
        return f"<{self.api} allocation>"


def _ints(value, name: str, api: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(_is_int(v) for v in value):
        raise errors.DirectAllocationError(f"'{name}' of '{api}' must be a tuple of integers, got {value!r}")
    out = tuple(int(v) for v in value)
    if any(v < 1 for v in out):
        raise errors.DirectAllocationError(f"'{name}' of '{api}' must hold positive tile counts, got {value!r}")
    return out


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _int(value, name: str, api: str, lo: int = 0) -> int:
    if not _is_int(value) or int(value) < lo:
        raise errors.DirectAllocationError(f"'{name}' of '{api}' must be an integer >= {lo}, got {value!r}")
    return int(value)


def _modulo(base: int, allocate_shape: tuple[int, ...], scale: int, idx: tuple[int, ...]) -> int:
    """The documented `modulo_allocate_func(base, allocate_shape, scale)(idx)`: block index
    modulo the tile counts (zip: the shorter of the two decides), linearised, times `scale`,
    plus `base`; no counts means one tile per dimension."""
    shape = allocate_shape or (1,) * len(idx)
    mod = [i % s for i, s in zip(idx, shape)]
    lin = 0
    for d, i in enumerate(mod):
        n = 1
        for s in shape[d + 1:]:
            n *= s
        lin += i * n
    return lin * scale + base


def sbuf_mod_alloc(base_addr, base_partition=0, num_par_tiles=(), num_free_tiles=(), **kwargs) -> Allocation:
    api = "ncc.sbuf.mod_alloc"
    _no_kwargs(kwargs, api)
    base = _int(base_addr, "base_addr", api)
    part = _int(base_partition, "base_partition", api)
    if part != 0:
        raise errors.DirectAllocationError(f"'base_partition' of '{api}' must be 0 in the current release, got {part}")
    npar = _ints(num_par_tiles, "num_par_tiles", api)
    nfree = _ints(num_free_tiles, "num_free_tiles", api)

    def func(idx, pdim_size, fdim_size):
        return (_modulo(part, npar, pdim_size, idx), _modulo(base, nfree, fdim_size, idx))
    return Allocation(SBUF, func, api)


def sbuf_alloc(func) -> Allocation:
    if not callable(func):
        raise errors.DirectAllocationError(
            f"ncc.sbuf.alloc takes a callable (block index, partitions, bytes per partition) -> (start partition, "
            f"byte address), got {type(func).__name__}")
    return Allocation(SBUF, func, "ncc.sbuf.alloc")


def psum_mod_alloc(base_bank, base_addr=0, base_partition=0, num_bank_tiles=(), num_par_tiles=(),
                   num_free_tiles=(), **kwargs) -> Allocation:
    api = "ncc.psum.mod_alloc"
    _no_kwargs(kwargs, api)
    bank = _int(base_bank, "base_bank", api)
    for name, v in (("base_addr", base_addr), ("base_partition", base_partition)):
        if _int(v, name, api) != 0:
            raise errors.DirectAllocationError(
                f"'{name}' of '{api}' must be 0 in the current release (one physical tile per PSUM bank, from "
                f"partition 0), got {v}")
    nbank = _ints(num_bank_tiles, "num_bank_tiles", api)
    for name, v in (("num_par_tiles", num_par_tiles), ("num_free_tiles", num_free_tiles)):
        if any(n != 1 for n in _ints(v, name, api)):
            raise errors.DirectAllocationError(
                f"'{name}' of '{api}' must be empty or all ones in the current release, got {v!r}")

    def func(idx, pdim_size, fdim_size):
        return (_modulo(bank, nbank, 1, idx), 0, 0)
    return Allocation(PSUM, func, api)


def psum_alloc(func) -> Allocation:
    if not callable(func):
        raise errors.DirectAllocationError(
            f"ncc.psum.alloc takes a callable (block index, partitions, bytes per partition) -> (bank, start "
            f"partition, byte address), got {type(func).__name__}")
    return Allocation(PSUM, func, "ncc.psum.alloc")


def _no_kwargs(kwargs: dict, api: str) -> None:
    if kwargs:
        raise errors.DirectAllocationError(f"'{api}' got unexpected argument(s) {', '.join(sorted(kwargs))}")


# --- placed tensors -------------------------------------------------------------------------------

class Placed:
    """A directly allocated tensor: its physical tiles and how its elements map to bytes."""

    __slots__ = ("tid", "label", "memory", "P", "tile_bytes", "itemsize", "local", "lstr", "nb", "tiles", "phys")

    def __init__(self, b: T.Buffer, memory: str, tiles: dict, phys: "Physical"):
        self.tid, self.label, self.memory = b.id, _label(b), memory
        self.P = b.local[0]
        self.tile_bytes = T.prod(b.local[1:]) * b.itemsize
        self.itemsize, self.local, self.lstr, self.nb = b.itemsize, b.local, b.lstr, b.nb
        self.tiles = tiles
        self.phys = phys

    def view(self, b: T.Buffer, key: tuple) -> np.ndarray:
        """The block's storage: a view of the physical bytes, as the buffer's dtype and shape."""
        p0, addr = self.tiles[key]
        raw = self.phys.array(self.memory)[p0:p0 + self.P, addr:addr + self.tile_bytes]
        v = raw.view(b.dtype)
        v.shape = b.local     # no copy: the free bytes of each partition are contiguous
        return v

    def ndarray(self, v: T.NkiTensor) -> np.ndarray:
        """The elements of affine view `v` of a block, as an array on the physical bytes (the
        partitions of a tile are a row of SBUF/PSUM apart, its free elements contiguous)."""
        if v._dims != self.local or v._base:
            raise errors.UnsupportedApiError(
                f"a reshaped view of directly allocated tensor '{self.label}' is not supported by the emulator")
        p0, addr = self.tiles[v._key]
        mem = self.phys.array(self.memory)
        row = mem.shape[1]
        isz = self.itemsize
        lstr = self.lstr
        c, a = v._c, v._a
        off = p0 * row + addr + c[0] * row
        strides = [a[0][k] * row for k in range(len(v._shape))]
        for d in range(1, len(lstr)):
            s = lstr[d] * isz
            off += c[d] * s
            for k, coef in enumerate(a[d]):
                if coef:
                    strides[k] += coef * s
        return np.ndarray(v._shape, dtype=v._b.dtype, buffer=mem, offset=off, strides=tuple(strides))

    def rect(self, key: tuple, local_box) -> Rect | None:
        """The physical bytes of `local_box` (partition, free... ranges) of tile `key`: its
        partitions, and the span from its first to its last element."""
        p0, addr = self.tiles[key]
        (lo, hi), free = local_box[0], local_box[1:]
        if hi <= lo:
            return None
        first = last = 0
        for (a, b), s in zip(free, self.lstr[1:]):
            if b <= a:
                return None
            first += a * s
            last += (b - 1) * s
        isz = self.itemsize
        return (p0 + lo, p0 + hi, addr + first * isz, addr + (last + 1) * isz)


class Physical:
    """The bytes of SBUF and PSUM that placed tensors live in (full-data runs), created on
    first use and filled with UNWRITTEN."""

    __slots__ = ("sbuf", "psum")

    def __init__(self):
        self.sbuf = self.psum = None

    def array(self, memory: str) -> np.ndarray:
        if memory == SBUF:
            if self.sbuf is None:
                usable = machine().capacity.sbuf_usable_bytes
                self.sbuf = np.full((T.PMAX, usable), UNWRITTEN, dtype=np.uint8)
            return self.sbuf
        if self.psum is None:
            self.psum = np.full((T.PMAX, PSUM_BYTES), UNWRITTEN, dtype=np.uint8)
        return self.psum


class Tile:
    """Conflict bookkeeping of one logical tile of a placed tensor."""

    __slots__ = ("rect", "wbox", "lost", "boxes", "full", "live")

    def __init__(self, rect: Rect):
        self.rect = rect
        self.wbox: Rect | None = None      # bounding box of the bytes it wrote
        self.lost: list = []               # (rect, tensor label, line): its bytes others wrote since
        self.boxes: list = []              # local boxes it wrote (accumulation group starts)
        self.full = False                  # it wrote its whole tile at some point
        self.live = False                  # indexed in the buckets


class Placements:
    """A kernel run's direct allocations: `m.state["placement"]` once the first is made."""

    def __init__(self, m):
        self.placed: dict[int, Placed] = {}
        self.phys = Physical()
        self.tiles: dict[tuple[int, tuple], Tile] = {}
        self.buckets: dict[tuple[str, int], dict[int, Tile]] = {}
        self.cursor = 0
        self.first: str | None = None   # the label of the first placed tensor
        m.trace.placements = {}

    # -- placing ---------------------------------------------------------------------------

    def place(self, m, b: T.Buffer, alloc: Allocation, line: int) -> None:
        """Compute and check the physical tile of every logical tile of `b`; make `b` placed."""
        api = alloc.api
        nb = b.nb
        P = b.local[0]
        fbytes = T.prod(b.local[1:]) * b.itemsize
        label = _label(b)
        tiles: dict[tuple, tuple[int, int]] = {}
        for key in itertools.product(*(range(n) for n in b.shape[:nb])):
            try:
                loc = alloc.func(key, P, fbytes)
            except errors.NkiError:
                raise
            except Exception as e:   # the kernel's own allocation function failed
                raise errors.DirectAllocationError(
                    f"the allocation function of '{api}' for {label} raised {type(e).__name__}: {e} "
                    f"(for block index {key})", m.trace.kernel_file, line) from e
            tiles[key] = _location(alloc, loc, key, P, fbytes, label, m.trace.kernel_file, line)
        self.placed[b.id] = Placed(b, alloc.memory, tiles, self.phys)
        b.place = self.placed[b.id]
        m.trace.placements[b.id] = Placement(alloc.memory, tiles)
        if self.first is None:
            self.first = label

    # -- the replay of the trace ------------------------------------------------------------

    def advance(self, m, upto: int) -> None:
        """Replay instructions [cursor, upto) of the trace: conflicts raise, writes update."""
        instrs = m.instrs
        placed = self.placed
        for i in range(self.cursor, min(upto, len(instrs))):
            ins = instrs[i]
            for r in ins.reads:
                if r.tensor in placed:
                    self._read(m, r, ins)
            acc = ins.mm is not None and ins.mm.accumulate
            for r in ins.writes:
                if r.tensor in placed:
                    if acc:
                        self._read(m, r, ins)   # an accumulation reads what the group holds
                    self._write(r, ins)
            self.cursor = i + 1

    def _pieces(self, r):
        pl = self.placed[r.tensor]
        nb = pl.nb
        box = r.box
        local = box[nb:]
        for key in itertools.product(*(range(lo, hi) for lo, hi in box[:nb])):
            yield pl, key, local

    def _tile(self, pl: Placed, key: tuple) -> Tile:
        t = self.tiles.get((pl.tid, key))
        if t is None:
            p0, addr = pl.tiles[key]
            t = self.tiles[(pl.tid, key)] = Tile((p0, p0 + pl.P, addr, addr + pl.tile_bytes))
        return t

    def _read(self, m, r, ins) -> None:
        for pl, key, local in self._pieces(r):
            t = self.tiles.get((pl.tid, key))
            if t is None or not t.lost:
                continue
            rect = pl.rect(key, local)
            if rect is None:
                continue
            for lost, by, line in t.lost:
                if _overlap(lost, rect):
                    name = f"{pl.label} (logical tile {list(key)})" if key else pl.label
                    what = ("accumulates into" if ins.mm is not None and ins.mm.accumulate else "reads")
                    sch = (" ([SCH713] Violation of accumulation group interleaving)"
                           if pl.memory == PSUM and ins.mm is not None else "")
                    raise errors.LifetimeConflictError(
                        f"'{ins.op}' {what} {_where(pl.memory, _intersect(lost, rect))} of {name}, which {by} "
                        f"overwrote at line {line} while they were still live{sch}: physical tiles that must be "
                        f"alive at the same time need addresses of their own (place one elsewhere, or give the "
                        f"tensor more tiles with num_free_tiles / num_bank_tiles)", m.trace.kernel_file, ins.line)

    def _write(self, r, ins) -> None:
        for pl, key, local in self._pieces(r):
            rect = pl.rect(key, local)
            if rect is None:
                continue
            t = self._tile(pl, key)
            if not t.full:
                if all(lo == 0 and hi == n for (lo, hi), n in zip(local, pl.local)):
                    t.full = True
                    t.boxes = []
                elif local not in t.boxes:
                    joined = _join(t.boxes[-1], local) if t.boxes else None
                    if joined is not None:
                        t.boxes[-1] = joined   # slices written one after the other
                    else:
                        t.boxes.append(local)
            if t.lost:
                t.lost = [(piece, by, line) for lost, by, line in t.lost for piece in _subtract(lost, rect)]
            t.wbox = rect if t.wbox is None else _union(t.wbox, rect)
            name = f"{pl.label} (logical tile {list(key)})" if key else pl.label
            for bk in _bucket_keys(pl.memory, rect):
                bucket = self.buckets.get(bk)
                if bucket is None:
                    bucket = self.buckets[bk] = {}
                for other in list(bucket.values()):
                    if other is t or other.wbox is None or not _overlap(other.wbox, rect):
                        continue
                    other.lost.append((_intersect(other.wbox, rect), name, ins.line))
                    if not _remaining([other.wbox], other.lost):
                        self._unindex(pl.memory, other)
                if id(t) not in bucket:
                    bucket[id(t)] = t
            t.live = True

    def _unindex(self, memory: str, t: Tile) -> None:
        for bk in _bucket_keys(memory, t.rect):
            bucket = self.buckets.get(bk)
            if bucket is not None:
                bucket.pop(id(t), None)
        t.live = False

    def written(self, m, tid: int, key: tuple, local_box, upto: int):
        """What logical tile `key` of placed tensor `tid` has written of `local_box` before
        instruction `upto`: True (all of it), False (none) or a bool array over the box.
        Records of results not yet assigned into their destination are not final: the
        replay stops before the first of them."""
        for f in m.fresh.values():
            if f.state == T.Fresh.NEW:
                for ins, _, _, _ in f.writers:
                    upto = min(upto, ins.id)
        self.advance(m, upto)
        t = self.tiles.get((tid, key))
        if t is None:
            return False
        if t.full:
            return True
        shape = tuple(hi - lo for lo, hi in local_box)
        hit = None
        for box in t.boxes:
            inter = [(max(a, c), min(b, d)) for (a, b), (c, d) in zip(box, local_box)]
            if any(hi <= lo for lo, hi in inter):
                continue
            if all(lo <= c and d <= hi for (lo, hi), (c, d) in zip(box, local_box)):
                return True
            if hit is None:
                hit = np.zeros(shape, dtype=bool)
            hit[tuple(slice(lo - c, hi - c) for (lo, hi), (c, _) in zip(inter, local_box))] = True
        if hit is None:
            return False
        return True if hit.all() else hit

    # -- the end of the kernel ----------------------------------------------------------------

    def finish(self, m) -> None:
        """The rules of an allocated kernel (module doc), then the rest of the replay."""
        if not self.placed:
            return
        f = m.trace.kernel_file
        label = self.first
        state = m.state
        if "tensore_transpose" in state:
            api, at = state["tensore_transpose"]
            raise errors.AllocatedTransposeError(
                f"{api} transposes on TensorE through an identity matrix the compiler allocates, which an "
                f"allocated kernel cannot have ({label} is directly allocated): load your own identity into an "
                f"allocated tensor and call nisa.nc_matmul(x, identity) (or nl.matmul(..., transpose_x=True); "
                f"nisa.nc_transpose(..., engine=nisa.vector_engine) for tiles up to 32x32)", f, at)
        if "activation_without_bias" in state:
            api, at = state["activation_without_bias"]
            raise errors.AllocatedBiasError(
                f"Bias tensor of an activation op must be specified in allocated NKI kernels: '{api}' has no bias "
                f"tile ({label} is directly allocated); pass bias= an allocated [P, 1] tensor (zeros for none) to "
                f"nisa.activation, and use nisa.activation instead of nl.exp and the other nl activation "
                f"functions", f, at)
        auto = [info for tid, info in m.trace.tensors.items()
                if info.memory in (SBUF, PSUM) and tid not in self.placed]
        if auto:
            info = min(auto, key=lambda i: (i.line, i.id))
            results = {f.meta[0] for f in m.fresh.values()}
            what = ("an instruction result" if info.id in results else
                    f"tensor '{info.name}'" if info.name else "a tensor")
            raise errors.DirectAllocationError(
                f"{what} in {info.memory} at line {info.line} is allocated by the compiler, while {label} is "
                f"directly allocated: the current release cannot mix automatic and direct allocation in one "
                f"kernel; allocate every SBUF and PSUM tensor with ncc.sbuf / ncc.psum alloc or mod_alloc, and "
                f"assign instruction results into them (t[...] = nisa....)", f, info.line)
        scratch = [info for info in m.trace.tensors.values() if info.memory == HBM and info.kind == "scratch"]
        if scratch:
            names = ", ".join(i.name or f"<line {i.line}>" for i in scratch)
            raise errors.DirectAllocationError(
                f"Non IO HBM tensor is not supported in allocated NKI kernel: {names} ({label} is directly "
                f"allocated; only kernel outputs, nl.shared_hbm, may be declared in HBM)", f, scratch[0].line)
        self.advance(m, len(m.instrs))


def _location(alloc: Allocation, loc, key: tuple, P: int, fbytes: int, label: str, f: str,
              line: int) -> tuple[int, int]:
    """(start partition, byte address) of one logical tile, checked against the hardware."""
    api = alloc.api
    what = f"logical tile {key} of {label} ({P} partitions x {fbytes} bytes)"
    n = 2 if alloc.memory == SBUF else 3
    if not isinstance(loc, (tuple, list)) or len(loc) != n or not all(_is_int(v) for v in loc):
        form = "(start partition, byte address)" if n == 2 else "(bank, start partition, byte address)"
        raise errors.DirectAllocationError(f"the allocation function of '{api}' must return {form} for {what}, "
                                           f"got {loc!r}", f, line)
    if alloc.memory == SBUF:
        p0, addr = (int(v) for v in loc)
        allowed = (0,) if P > 64 else (0, 64) if P > 32 else (0, 32, 64, 96)
        if p0 not in allowed:
            raise errors.DirectAllocationError(
                f"'{api}' places {what} at start partition {p0}; a tile of {P} partitions must start at partition "
                f"{' or '.join(map(str, allowed))}", f, line)
        cap = machine().capacity
        if addr < 0 or addr + fbytes > cap.sbuf_usable_bytes:
            raise errors.DirectAllocationError(
                f"'{api}' places {what} at byte address {addr}, which leaves SBUF: byte addresses run from 0 to "
                f"{cap.sbuf_usable_bytes} per partition on {cap.target} ({cap.sbuf_reserve}), and the tile ends at "
                f"{addr + fbytes}; lower base_addr or the number of tiles", f, line)
        return p0, addr
    bank, p0, addr = (int(v) for v in loc)
    if p0 != 0 or addr != 0:
        raise errors.DirectAllocationError(
            f"'{api}' places {what} at start partition {p0}, byte address {addr} of its bank; a PSUM tile must start "
            f"at partition 0 and byte 0 of a bank in the current release", f, line)
    if not 0 <= bank < PSUM_BANKS:
        raise errors.DirectAllocationError(
            f"'{api}' places {what} in PSUM bank {bank}; PSUM has banks 0 to {PSUM_BANKS - 1} (2 KiB per partition "
            f"each): lower base_bank or num_bank_tiles", f, line)
    return p0, bank * T.PSUM_BANK_BYTES


def _label(b: T.Buffer) -> str:
    return f"tensor '{b.name}'" if b.name else f"the {b.memory} tensor created at line {b.line}"


def _where(memory: str, rect: Rect) -> str:
    p0, p1, a0, a1 = rect
    if memory == PSUM:
        bank = a0 // T.PSUM_BANK_BYTES
        off = a0 - bank * T.PSUM_BANK_BYTES
        return f"PSUM bank {bank} (partitions {p0}:{p1}, bytes {off}:{off + a1 - a0})"
    return f"SBUF partitions {p0}:{p1}, bytes {a0}:{a1}"


def _bucket_keys(memory: str, rect: Rect):
    return [(memory, k) for k in range(rect[2] // BUCKET, (rect[3] - 1) // BUCKET + 1)]


def _join(a, b):
    """The box two boxes make when they abut along one dimension and agree on the others."""
    axis = -1
    for d, ((a0, a1), (b0, b1)) in enumerate(zip(a, b)):
        if (a0, a1) == (b0, b1):
            continue
        if axis >= 0 or not (a1 == b0 or b1 == a0):
            return None
        axis = d
    if axis < 0:
        return tuple(a)
    return tuple(a[:axis]) + ((min(a[axis][0], b[axis][0]), max(a[axis][1], b[axis][1])),) + tuple(a[axis + 1:])


def _overlap(a: Rect, b: Rect) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _intersect(a: Rect, b: Rect) -> Rect:
    return (max(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), min(a[3], b[3]))


def _union(a: Rect, b: Rect) -> Rect:
    return (min(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), max(a[3], b[3]))


def _subtract(r: Rect, s: Rect) -> list[Rect]:
    """`r` less `s`, as up to four rectangles."""
    if not _overlap(r, s):
        return [r]
    p0, p1, a0, a1 = r
    q0, q1, b0, b1 = s
    out = []
    if p0 < q0:
        out.append((p0, q0, a0, a1))
    if q1 < p1:
        out.append((q1, p1, a0, a1))
    m0, m1 = max(p0, q0), min(p1, q1)
    if a0 < b0:
        out.append((m0, m1, a0, b0))
    if b1 < a1:
        out.append((m0, m1, b1, a1))
    return out


def _remaining(rects: list[Rect], lost: list) -> list[Rect]:
    for rect, _, _ in lost:
        rects = [piece for r in rects for piece in _subtract(r, rect)]
        if not rects:
            break
    return rects


def of(m) -> Placements:
    """The run's direct-allocation state (created on first use)."""
    p = m.state.get("placement")
    if p is None:
        p = m.state["placement"] = Placements(m)
    return p
