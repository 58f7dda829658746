"""The instruction layer that every front-end's API lowers to: operand checks, masks, fresh
results, assignment into destinations, accumulation, DMA descriptors and the trace records.

An instruction computes eagerly into a fresh anonymous tile (SBUF, or PSUM for TensorE).
If the first thing the kernel does with that result is `dst[...] = result`, the record is
rewritten to write `dst` directly (NKI writes instruction results straight into the
assigned region, no copy instruction); any other first use keeps the anonymous tile.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import errors
from . import ops
from . import subscript as S
from . import tensor as T
from .indexing import Box, broadcast_shapes, check_mask, mask_array, mask_box
from .runtime import Machine, machine
from .tensor import Fresh, NkiTensor, touch
from ..trace import (
    COPY,
    DMA_LOAD,
    GPSIMD_ENGINE,
    HBM,
    MEMSET,
    MM,
    MM_BCAST,
    MM_TRANSPOSE,
    PSUM,
    SBUF,
    SCALAR,
    TS,
    TT,
    VECTOR,
    DmaInfo,
    Instr,
    MatmulInfo,
)

ONCHIP = (SBUF, PSUM)
F32 = np.dtype(np.float32)
MATMUL_KINDS = (MM, MM_TRANSPOSE, MM_BCAST)


def where() -> int:
    """Kernel source line of the NKI call being executed (called by the emulator's API
    functions, so the search for the kernel frame starts at their caller)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(errors.PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return 0
    hit = errors.LINES.get((id(frame.f_code), frame.f_lasti))   # (errors.frame_line, inlined)
    return errors.frame_line(frame) if hit is None else hit[1]


# --- operands ------------------------------------------------------------------------------------

def tile(x, name: str, api: str, memories: Sequence[str] = ONCHIP) -> NkiTensor:
    """Check that `x` is a tile in one of `memories`, in scope; mark a fresh result as used."""
    if type(x) is not NkiTensor:
        raise errors.OperandTypeError(
            f"operand '{name}' of '{api}' must be a tile (an NKI tensor), got {type(x).__name__}")
    b = x._b
    if x._whole and len(x._key) < b.nb:
        raise errors.TileInferenceError(
            f"Failed to infer tile from tensor '{b.label}' (shape {list(b.shape)}) for operand '{name}' of "
            f"'{api}': index its block dimensions {list(b.shape[:b.nb])} with integers first")
    if b.memory not in memories:
        raise errors.UnsupportedMemoryError(
            f"Expected operand '{name}' of '{api}' to be in address space '{'|'.join(memories)}', but got a tile "
            f"in '{b.memory}' instead.")
    if b.scope:
        m = machine()
        if b.scope is not m.scope:
            m.check_scope(b)
    if b.fresh is not None and b.fresh.state != Fresh.USED:
        touch(b.fresh)
    return x


def is_scalar(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating, np.bool_, bool)) and not isinstance(x, NkiTensor)


def active(mask, shape: tuple[int, ...]) -> tuple[Box | None, np.ndarray | None]:
    """(box, None) for a box mask, (None, bool array) for another mask, (None, None) for none."""
    if mask is None:
        return None, None
    mk = check_mask(mask)
    if mk is None:
        return None, None
    box = mask_box(mk, shape)
    if box is not None:
        for (lo, hi), n in zip(box, shape):
            if lo != 0 or hi != n:
                return box, None
        return None, None
    return None, mask_array(mk, shape)


def use(x: NkiTensor, box: Box | None, tile_shape: tuple[int, ...], where_: np.ndarray | None = None) -> NkiTensor:
    """`x` restricted to the active part of an instruction, bounds-checked."""
    v = x if box is None else T.restrict(x, box, tile_shape)
    if v._checks:
        T.check_bounds(v, None if where_ is None else align(where_, v._shape))
    return v


def align(where_: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A tile-shaped mask array reduced to an operand's (broadcast) shape: any true along
    broadcast axes."""
    if where_.shape == shape:
        return where_
    n = len(shape)
    w = where_.reshape(where_.shape[len(where_.shape) - n:]) if where_.ndim > n else where_
    axes = tuple(k for k in range(n) if shape[k] == 1 and w.shape[k] != 1)
    return w.any(axis=axes, keepdims=True) if axes else w


def fp32(v: NkiTensor) -> np.ndarray:
    a = T.array(v)
    dt = a.dtype
    if dt == F32:
        return a
    if dt.kind == "V" and T.dtype_name(dt) == "bfloat16":
        return widen_bf16(a)
    return a.astype(F32)


_U32 = np.dtype(np.uint32)
_SHIFT = np.uint32(16)


def widen_bf16(a: np.ndarray) -> np.ndarray:
    """`a.astype(float32)` for a bfloat16 array, in half the time: a bfloat16 is the upper half
    of the float32 of the same value, so widening shifts its bits (identical to ml_dtypes' cast
    for all 65536 values, NaN payloads included). The result is a fresh C-contiguous array (an
    instruction result that can become a tile's storage without a copy)."""
    out = np.empty(a.shape, F32)
    np.left_shift(a.view(np.uint16), _SHIFT, out=out.view(_U32), dtype=_U32)
    return out


def result_dtype(operands, dtype) -> np.dtype:
    """An explicit dtype, else NKI's promotion of the tile operands (scalars are weak)."""
    if dtype is not None:
        return normalize_dtype(dtype)
    dts = [x._b.dtype for x in operands if isinstance(x, NkiTensor)]
    if not dts:
        return F32
    out = dts[0]
    for d in dts[1:]:
        out = promote(out, d)
    if out.kind in "iub" and any(isinstance(x, (float, np.floating)) for x in operands):
        return F32
    return out


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    if a == b:
        return a
    fa, fb = a.kind in "fV", b.kind in "fV"
    if fa and fb:
        # two floats: the wider, or a new widened type that holds both ranges: fp16 + bf16 ->
        # fp32, two different fp8 formats -> bf16 (legacy api/nki.api.shared.rst "NKI Type
        # Promotion": "(nl.float8_e4m3, nl.float8_e5m2) -> nl.bfloat16 (new widened type)")
        if {a.name, b.name} == {"float16", "bfloat16"}:
            return F32
        if a.itemsize == b.itemsize == 1:
            import ml_dtypes   # (loaded already: the fp8 dtypes come from it)
            return np.dtype(ml_dtypes.bfloat16)
        return a if a.itemsize >= b.itemsize else b
    if fa:
        return a
    if fb:
        return b
    try:
        r = np.promote_types(a, b)
    except TypeError:
        return F32
    return F32 if r.itemsize > 4 else r


_DTYPES: dict = {}


def normalize_dtype(dtype) -> np.dtype:
    """The NumPy dtype of an NKI dtype argument (float64 and 64-bit integers are rejected)."""
    try:
        d = _DTYPES.get(dtype)
    except TypeError:
        d = None
    if d is not None:
        return d
    d = _normalize_dtype(dtype)
    try:
        _DTYPES[dtype] = d
    except TypeError:
        pass
    return d


def _normalize_dtype(dtype) -> np.dtype:
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise errors.UnsupportedDtypeError(f"Unsupported dtype '{dtype}'") from None
    if d.kind == "f" and d.itemsize == 8:
        raise errors.UnsupportedDtypeError(
            "Unsupported dtype 'float64'; NKI dtypes are float32, bfloat16, float16, fp8 and integers up to 32 bits")
    if d.kind in "iu" and d.itemsize == 8:
        raise errors.UnsupportedDtypeError(f"Unsupported dtype '{d.name}'; NKI integers are at most 32 bits")
    return d


# --- results ---------------------------------------------------------------------------------------

def new_result(shape: tuple[int, ...], dtype: np.dtype, memory: str, kind: str, line: int) -> NkiTensor:
    """A fresh anonymous tile for an instruction's output."""
    m = machine()
    if len(shape) < 2:
        shape = tuple(shape) + (1,) * (2 - len(shape))
    v = T.anon_tile(m, memory, shape, dtype, line)
    b = v._b
    f = b.fresh = Fresh(kind, (b.id, "", memory, shape, b.dtname, b.itemsize, 0, "scratch", b.tpath, line))
    m.fresh[b.id] = f
    return v


def record(m: Machine, kind: str, op: str, engines, out: NkiTensor, out_view: NkiTensor, box, where_,
           reads: Sequence[NkiTensor], line: int, func: str = "", *, partitions: int | None = None,
           free: int | None = None, mm=None, dma=None, extra_writes=()) -> Instr:
    """Append the trace record of an instruction writing fresh tile `out` (active part `out_view`)."""
    shape = out_view._shape
    p = shape[0] if partitions is None else partitions
    if free is None:
        free = 1
        for n in shape[1:]:
            free *= n
    psum = 0
    strided = False
    in_dtypes = []
    regs = []
    region = T.region
    for v in reads:
        b = v._b
        in_dtypes.append(b.dtname)
        regs.append(v._reg or region(v))
        mem = b.memory
        if mem != HBM:
            if mem == PSUM:
                psum += 1
            if not strided:
                ms = v._ms   # (the minor stride in elements, once known)
                strided = (T.minor_stride_bytes(v) if ms is None else ms * b.itemsize) > 16
    # (the output, a fresh row-major tile, has a unit minor stride)
    oreg = out_view._reg or region(out_view)
    ins = m.emit(kind, op, engines, out._b.dtname, tuple(in_dtypes), p, free, tuple(regs),
                 (oreg, *extra_writes) if extra_writes else (oreg,), line, func, mm, dma, psum, strided)
    fr = out._b.fresh
    if fr is not None and fr.state == Fresh.NEW:
        fr.writers.append((ins, 0, box, oreg))
        fr.box = box
        fr.where = where_
        fr.kind = kind
    return ins


def compute(api: str, kind: str, engines, func: str, operands: Sequence[tuple[str, Any]], out_shape,
            out_dtype: np.dtype, mask, fn: Callable, *, out_memory: str = SBUF, line: int,
            memories: Sequence[str] = ONCHIP) -> NkiTensor:
    """Run an element-wise-shaped instruction: tile operands broadcast to `out_shape`, the mask
    over `out_shape`, `fn(*arrays)` on fp32 arrays (scalars passed through) gives the result."""
    m = machine()
    if type(out_shape) is not tuple:
        out_shape = tuple(out_shape)
    box, wh = (None, None) if mask is None else active(mask, out_shape)
    views = []
    tiles = []
    for name, x in operands:
        if isinstance(x, NkiTensor):
            v = tile(x, name, api, memories)
            if box is not None or v._checks:
                v = use(v, box, out_shape, wh)
            views.append(v)
            tiles.append(v)
        else:
            views.append(x)
    res = new_result(out_shape, out_dtype, out_memory, kind, line)
    rv = res if box is None else T.restrict(res, box, out_shape)
    if not m.shape_only and 0 not in rv._shape:
        arrays = [fp32(v) if isinstance(v, NkiTensor) else v for v in views]
        store_result(rv, fn(*arrays), wh)
    record(m, kind, api, engines, res, rv, box, wh, tiles, line, func)
    return res


def store_result(rv: NkiTensor, value, where_) -> None:
    """Write an instruction's computed value into its fresh tile; a freshly allocated array
    covering the whole tile becomes the tile's storage instead of being copied."""
    b = rv._b
    if (where_ is None and rv._whole and isinstance(value, np.ndarray) and value.flags.owndata
            and value.dtype == b.dtype and value.shape == b.local and value.flags.c_contiguous):
        b.blocks[rv._key] = value
        return
    T.write(rv, value, where_)


# --- assignment ------------------------------------------------------------------------------------

def setitem(t: NkiTensor, key, value) -> None:
    """`t[key] = value`: retarget a fresh result, finish an accumulation, compute a deferred
    value (`Deferred`) into the destination, copy a tile, or fill with a scalar."""
    if type(value) is NkiTensor:
        if value._acc is not None:
            value._acc = None
            if value._srckey is key and value._srcpar is t:
                return  # `t[key] += x` already wrote t[key]
            dst = S.subscript(t, key)
            if (dst._b is value._b and dst._key == value._key and dst._off == value._off
                    and dst._shape == value._shape and dst._st == value._st):
                return
        dst = S.subscript(t, key)
        check_dst(dst, "assignment")
        f = value._b.fresh
        if f is not None and f.state == Fresh.NEW and value._whole:
            retarget(machine(), dst, value, f)
        else:
            copy_into(machine(), dst, value, where())
        return
    line = where()
    dst = S.subscript(t, key)
    if isinstance(value, Deferred):
        value.apply(dst, line)
        return
    assign(dst, value, line)


def check_dst(dst: NkiTensor, api: str) -> None:
    b = dst._b
    if dst._whole and len(dst._key) < b.nb:
        raise errors.TileInferenceError(
            f"cannot assign to tensor '{b.label}' (shape {list(b.shape)}) without indexing its block dimensions "
            f"{list(b.shape[:b.nb])}")
    if b.scope:
        m = machine()
        if b.scope is not m.scope:
            m.check_scope(b)
    if b.fresh is not None and b.fresh.state != Fresh.USED:
        touch(b.fresh)


def check_assign_shape(dst: NkiTensor, src_shape: tuple[int, ...], src_label: str) -> None:
    s = broadcast_shapes(dst._shape, src_shape)
    if s != dst._shape:
        raise errors.AssignShapeError(
            f"Illegal assignment destination shape: shape {list(dst._shape)} of '{dst._b.label}' is smaller than "
            f"(or not broadcast-compatible with) the source shape {list(src_shape)} of {src_label}")
    if dst._b.memory != HBM and dst._shape and len(src_shape) == len(dst._shape) and src_shape[0] == 1 \
            and dst._shape[0] > 1:
        raise errors.PartitionMismatchError(
            f"cannot broadcast {src_label} of shape {list(src_shape)} across partitions into "
            f"{list(dst._shape)}; use .broadcast_to(...) to broadcast along the partition dimension")


def assign(dst: NkiTensor, value, line: int) -> None:
    m = machine()
    check_dst(dst, "assignment")
    if isinstance(value, NkiTensor):
        f = value._b.fresh
        if f is not None and f.state == Fresh.NEW and value._whole:
            retarget(m, dst, value, f)
            return
        copy_into(m, dst, value, line)
        return
    if is_scalar(value):
        fill(m, dst, value, line)
        return
    if isinstance(value, np.ndarray):
        raise errors.OperandTypeError(
            f"a NumPy array cannot be assigned to kernel tensor '{dst._b.label}'; load constants with "
            f"nl.shared_constant + nl.load, or fill with a scalar")
    raise errors.OperandTypeError(
        f"cannot assign a value of type {type(value).__name__} to kernel tensor '{dst._b.label}'")


def _dst_memory_rule(dst: NkiTensor, kind: str, what: str) -> None:
    mem = dst._b.memory
    if mem == HBM:
        raise errors.UnsupportedMemoryError(
            f"Expected the destination of {what} to be in address space 'psum|sbuf', but got a tile in 'hbm' "
            f"instead; write HBM with nl.store")
    if kind in MATMUL_KINDS and mem != PSUM:
        raise errors.UnsupportedMemoryError(
            f"Expected the result of {what} to be in address space 'psum', but got a tile in '{mem}' instead; "
            f"TensorE writes PSUM only (copy it to SBUF with nl.copy)")
    if kind == DMA_LOAD and mem != SBUF:
        raise errors.UnsupportedMemoryError(
            f"Expected the destination of nl.load to be in address space 'sbuf', but got a tile in '{mem}' instead")


def retarget(m: Machine, dst: NkiTensor, src: NkiTensor, f: Fresh) -> None:
    """`dst[...] = fresh_result`: the producing instruction(s) write `dst` instead, only where
    their mask is true (so the masked-out part of `dst` may lie outside the tensor)."""
    db = dst._b
    mem = db.memory
    kind = f.kind
    if mem == HBM or (mem != PSUM and kind in MATMUL_KINDS) or (kind == DMA_LOAD and mem != SBUF):
        _dst_memory_rule(dst, kind, f.writers[-1][0].op if f.writers else "the instruction")
    dshape = dst._shape
    same = dshape == src._shape
    box, wh = f.box, f.where
    if not same:
        check_assign_shape(dst, src._shape, f"the result of {f.writers[-1][0].op}")
        if box is not None:
            box = _broadcast_box(box, src._shape, dshape)
        if wh is not None:
            wh = np.broadcast_to(wh, dshape)
    # the active part of the destination, bounds-checked under the instruction's mask
    dv = dst if box is None and not dst._checks else use(dst, box, dshape, wh)
    ms = dst._ms
    strided = mem != HBM and (T.minor_stride_bytes(dst) if ms is None else ms * db.itemsize) > 16
    full = None
    for ins, idx, wbox, _ in f.writers:
        if wbox is not None:
            if not same:
                wbox = _broadcast_box(wbox, src._shape, dshape)
            reg = T.region(T.restrict(dst, wbox, dshape))
        else:
            if full is None:
                full = T.region(dst)
            reg = full
        writes = ins.writes
        ins.writes = (reg,) if len(writes) == 1 else writes[:idx] + (reg,) + writes[idx + 1:]
        if strided:
            ins.strided = True
    f.state = Fresh.RETARGETED
    del m.fresh[f.meta[0]]   # no tensor record: the anonymous tile never appears in the trace
    if box is None:
        reg = full if full is not None else T.region(dst)
    else:
        reg = T.region(dv)
    m.note_write(db, reg.box, view=dst)
    if not m.shape_only and 0 not in dv._shape:
        sb = src._b
        arr = sb.blocks.get(())
        if (box is None and wh is None and same and arr is not None and arr.dtype == db.dtype
                and db.place is None and T.covers_block(dst)):
            T.share_block(sb, (), db, dst._key)   # move the result instead of copying it
            return
        sv = src if box is None else T.restrict(src, box, dshape)
        T.write(dv, T.array(sv), wh)


def _broadcast_box(box: Box, src_shape: tuple[int, ...], dst_shape: tuple[int, ...]) -> Box:
    """An active box over a result's shape, seen on the larger destination the result is
    broadcast into (right-aligned; a broadcast axis is active whole unless empty)."""
    off = len(dst_shape) - len(src_shape)
    out = [(0, n) for n in dst_shape[:off]]
    for (lo, hi), s, n in zip(box, src_shape, dst_shape[off:]):
        out.append((0, n) if s == 1 and hi > lo else (lo, hi))
    return tuple(out)


def copy_into(m: Machine, dst: NkiTensor, value: NkiTensor, line: int, api: str = "assignment") -> None:
    """`dst[...] = tile`: a copy instruction on Vector or Scalar engine."""
    src = tile(value, "value", api, ONCHIP)
    if dst._b.memory == HBM:
        raise errors.UnsupportedMemoryError(
            "Expected the destination of a tile assignment to be in address space 'psum|sbuf', but got a tile in "
            "'hbm' instead; write HBM with nl.store")
    check_assign_shape(dst, src._shape, f"tile '{src._b.label}'")
    T.check_bounds(src)
    T.check_bounds(dst)
    m.note_write(dst._b, T.region(dst).box, view=dst)
    if not m.shape_only:
        T.write(dst, T.array(src))
    engines = (VECTOR, SCALAR)
    shape = dst._shape
    m.emit(COPY, api, engines, dst._b.dtname, (src._b.dtname,), shape[0], T.prod(shape[1:]),
           (T.region(src),), (T.region(dst),), line, "copy", None, None, int(src._b.memory == PSUM),
           T.minor_stride_bytes(src) > 16 or T.minor_stride_bytes(dst) > 16)


def fill(m: Machine, dst: NkiTensor, value, line: int) -> None:
    """`dst[...] = scalar`: a memset."""
    if dst._b.memory == HBM:
        raise errors.UnsupportedMemoryError(
            "scalars cannot be assigned to HBM tensors; use nl.store(dst, value=scalar)")
    T.check_bounds(dst)
    m.note_write(dst._b, T.region(dst).box, view=dst)
    if not m.shape_only:
        T.write(dst, np.asarray(value))
    shape = dst._shape
    engines = (VECTOR,) if dst._b.memory == PSUM else (VECTOR, GPSIMD_ENGINE)
    m.emit(MEMSET, "memset", engines, dst._b.dtname, (), shape[0], T.prod(shape[1:]), (),
           (T.region(dst),), line, "", None, None, 0, T.minor_stride_bytes(dst) > 16)


# --- augmented assignment ---------------------------------------------------------------------------

def augmented(dst: NkiTensor, value, op: str) -> NkiTensor:
    """`dst += value` (and -=, *=, /=): PSUM matmul accumulation, or a read-modify-write
    instruction. Accumulations are exempt from the affine_range write rule."""
    m = machine()
    check_dst(dst, "augmented assignment")
    if isinstance(value, NkiTensor):
        f = value._b.fresh
        if (f is not None and f.state == Fresh.NEW and value._whole and (f.kind == MM or f.kind == MM_TRANSPOSE)
                and op == "add" and dst._b.memory == PSUM):
            _accumulate_matmul(m, dst, value, f)   # bounds-checked under the matmul's mask
            dst._acc = True
            return dst
    if dst._checks:
        T.check_bounds(dst)
    if dst._b.memory == HBM:
        raise errors.UnsupportedMemoryError(
            "augmented assignment (+=) into an HBM tensor is not supported; accumulate on chip and nl.store")
    line = where()
    if isinstance(value, NkiTensor):
        src = tile(value, "value", "+=")
        check_assign_shape(dst, src._shape, "the right-hand side of +=")
        srcv = src
    elif is_scalar(value):
        srcv = value
    else:
        raise errors.OperandTypeError(f"cannot apply {op} with a value of type {type(value).__name__}")
    fn = ops.ALU[op]
    if not m.shape_only:
        a = fp32(dst)
        b = fp32(srcv) if isinstance(srcv, NkiTensor) else np.float32(srcv)
        T.write(dst, fn(a, b))
    reads = [dst] + ([srcv] if isinstance(srcv, NkiTensor) else [])
    kind = TT if isinstance(srcv, NkiTensor) and srcv._shape == dst._shape else TS
    engines = (VECTOR,) if kind == TT else (VECTOR, SCALAR)
    psum = sum(1 for r in reads if r._b.memory == PSUM)
    shape = dst._shape
    m.emit(kind, f"{_AUG[op]}=", engines, dst._b.dtname, tuple(r._b.dtname for r in reads), shape[0],
           T.prod(shape[1:]), tuple(T.region(r) for r in reads), (T.region(dst),), line, op, None, None, psum,
           any(T.minor_stride_bytes(r) > 16 for r in reads if r._b.memory != HBM))
    dst._acc = True
    return dst


_AUG = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}


def _accumulate_matmul(m: Machine, dst: NkiTensor, src: NkiTensor, f: Fresh) -> None:
    if dst._shape != src._shape:
        raise errors.AssignShapeError(
            f"matmul accumulation into '{dst._b.label}' {list(dst._shape)} needs the result shape "
            f"{list(src._shape)}")
    box = f.box
    dv = dst if box is None and not dst._checks else use(dst, box, dst._shape, f.where)
    reg = T.region(dv)
    db = dst._b
    started = None
    if db.place is not None:
        # a directly allocated tile: its group starts where it has not written yet, whatever
        # the physical bank holds from other tiles (core.placement)
        from . import placement
        nb = db.nb
        started = placement.of(m).written(m, db.id, dst._key, reg.box[nb:], f.writers[0][0].id)
    for ins, idx, _, _ in f.writers:
        writes = ins.writes
        ins.writes = (reg,) if len(writes) == 1 else writes[:idx] + (reg,) + writes[idx + 1:]
        mm = ins.mm
        if mm is not None:
            ins.mm = _accumulating(mm)
    f.state = Fresh.RETARGETED
    del m.fresh[f.meta[0]]
    if not m.shape_only and 0 not in dv._shape:
        sv = src if box is None else T.restrict(src, box, src._shape)
        res = T.array(sv)
        if started is not None:
            if started is False:
                T.write(dv, res, f.where)      # the first matmul of the group overwrites
                return
            if started is not True and started.size == T.count(dv):
                T.write(dv, np.where(started.reshape(dv._shape), T.array(dv) + res, res), f.where)
                return
        elif db.fill is None:
            cur = T.array(dv)
            if np.isnan(cur).any():
                # an accumulation group starts on never-written PSUM: the first matmul overwrites
                T.write(dv, np.where(np.isnan(cur), res, cur + res), f.where)
                return
        if f.where is None and dv._gat is None and not dv._checks:
            cur = T.write_array(dv)   # a view of the block: accumulate in place
            np.add(cur, res, out=cur, casting="unsafe")
        else:
            T.write(dv, T.array(dv) + res, f.where)


def accumulate_into(m: Machine, dst: NkiTensor, src: NkiTensor, add) -> None:
    """Fresh matmul result `src` written into PSUM view `dst` (same shape): added to what dst
    holds where `add` is true (a bool array over the shape, or True), written over it
    elsewhere. The producing instruction writes dst and its record is marked accumulating."""
    f = src._b.fresh
    T.check_bounds(dst)
    reg = T.region(dst)
    for ins, idx, _, _ in f.writers:
        writes = ins.writes
        ins.writes = (reg,) if len(writes) == 1 else writes[:idx] + (reg,) + writes[idx + 1:]
        if ins.mm is not None:
            ins.mm = _accumulating(ins.mm)
    f.state = Fresh.RETARGETED
    del m.fresh[f.meta[0]]
    if not m.shape_only and 0 not in dst._shape:
        res = T.array(src)
        cur = fp32(dst)
        T.write(dst, cur + res if add is True else np.where(add, cur + res, res))


# id(MatmulInfo) -> (that MatmulInfo, its accumulating twin). Keyed by id: hashing the
# dataclass runs its Python __hash__; the entry keeps the key object alive, so the id stays its own.
_ACC_INFOS: dict[int, tuple[MatmulInfo, MatmulInfo]] = {}


def _accumulating(mm: MatmulInfo) -> MatmulInfo:
    """`mm` with `accumulate` set (MatmulInfo is immutable: one object per distinct value)."""
    hit = _ACC_INFOS.get(id(mm))
    if hit is None:
        if len(_ACC_INFOS) > 10_000:
            _ACC_INFOS.clear()
        hit = _ACC_INFOS[id(mm)] = (mm, MatmulInfo(mm.K, mm.M, mm.N, True, mm.stationary_onezero,
                                                   mm.moving_onezero, mm.is_transpose))
    return hit[1]


# --- deferred values -------------------------------------------------------------------------------------

class Deferred:
    """A value that is computed into the destination it is assigned to (`dst[...] = value`),
    such as a reduction across loop iterations; front-ends subclass it."""

    __array_ufunc__ = None

    def apply(self, dst: NkiTensor, line: int) -> None:
        raise NotImplementedError


# --- DMA ------------------------------------------------------------------------------------------------

def dma_info(dst: NkiTensor, src: NkiTensor, elements: int, partitions: int) -> DmaInfo:
    """One DMA priced at both ends: the bytes written at `dst` and read at `src` (`elements`
    moved, masked-out ones excluded), and its descriptors, cut at the shorter contiguous run
    of the two ends per row: a strided end splits the transfer whichever end it is."""
    run = min(_contiguous_run(dst), _contiguous_run(src))
    return DmaInfo(elements * dst._b.itemsize, partitions, run * dst._b.itemsize,
                   -(-elements // run) if run else 0, elements * src._b.itemsize)


def _contiguous_run(v: NkiTensor) -> int:
    """Elements of `v` adjacent in memory along its innermost dims (dim 0, the partitions or
    rows, excluded): the run one descriptor moves."""
    shape, st = v._shape, v._st
    if st is None or not shape:
        return 1
    run = 1
    for k in range(len(shape) - 1, 0, -1):
        n = shape[k]
        if n == 1:
            continue
        if st[k] != run:
            break
        run *= n
    return run


def immutable_check(dst: NkiTensor) -> None:
    b = dst._b
    if b.kind == "input" and not b.mutable:
        raise errors.ImmutableParameterError(
            f"Cannot update immutable parameter '{b.label}'; kernel inputs are read-only unless annotated "
            f"nt.mutable_tensor (write results to an nl.shared_hbm tensor you return)")
    if b.kind == "constant":
        raise errors.ImmutableParameterError(f"Cannot update constant tensor '{b.label}' (nl.shared_constant)")

