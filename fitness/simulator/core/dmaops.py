"""DMA instructions beyond the plain copy, shared by both dialects: indirect (dynamic) access
patterns for gathers and scatters (`t.ap(pattern, vector_offset=idx | scalar_offset=s,
indirect_dim=d)`), dma_transpose, dma_compute (the DMA engines' add-reduction, with
read-modify-write through an indirect source), the legacy dma_copy's `dst_rmw_op`, and the
one-core forms of sendrecv and core_barrier.

Indirect addressing (nki.isa.dma_copy documentation, NKI 0.6, and its production uses in the NKI
Library): the tensor `.ap()` is called on lives in HBM; with a `vector_offset` (an SBUF (P, 1)
tile of row indices) partition p of the access starts at `offset + idx[p] * stride(d)`, where
stride(d) is the row-major stride of the tensor's dimension `indirect_dim` ("the DMA engine scales
token_indices[b] by d_head (stride of indirect_dim=0)"), the first [step, num] pair giving the
partition count and the rest walking from there; with a `scalar_offset` (a 1x1 SBUF tile or a
VirtualRegister) every element is moved by `value * stride(d)`. An index outside dimension
`indirect_dim` is an error (`oob_mode.error`, the default) or skips that partition's transfer
(`oob_mode.skip`). The trace records the whole indexed tensor as read or written (the indices
are data: the shape-only trace cannot know them).
"""

from __future__ import annotations

import numpy as np

from .. import errors
from ..trace import (
    DMA,
    DMA_LOAD,
    DMA_STORE,
    GPSIMD,
    GPSIMD_ENGINE,
    HBM,
    PSUM,
    SBUF,
    TS,
    DmaInfo,
)
from . import instr as I
from . import tensor as T
from .runtime import machine
from .tensor import NkiTensor

OOB_ERROR, OOB_SKIP = 0, 1


class IndirectAccess:
    """An access pattern over an HBM tensor with a dynamic offset (`t.ap(..., vector_offset=
    | scalar_offset=, indirect_dim=)`): the operand of a DMA that gathers or scatters."""

    __slots__ = ("dim", "offset", "pairs", "scalar", "stride", "vector", "view")

    def __init__(self, view: NkiTensor, pairs, offset: int, vector, scalar, dim: int, stride: int):
        self.view, self.pairs, self.offset = view, pairs, offset
        self.vector, self.scalar, self.dim, self.stride = vector, scalar, dim, stride

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n for _, n in self.pairs)

    @property
    def dtype(self):
        return self.view._b.dtype

    def __repr__(self) -> str:
        kind = "vector_offset" if self.vector is not None else "scalar_offset"
        return f"IndirectAccess({self.view._b.label}, pattern={[list(p) for p in self.pairs]}, {kind})"


def access(v: NkiTensor, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim: int = 0,
           dtype=None) -> IndirectAccess:
    """`v.ap(pattern, offset=, scalar_offset= | vector_offset=, indirect_dim=)`: the hook the
    front-ends' `ap` view method calls when a dynamic offset is given."""
    api = "t.ap"
    if (scalar_offset is None) == (vector_offset is None):
        raise errors.OperandTypeError(f"{api}: vector_offset and scalar_offset are mutually exclusive; give one")
    if v._b.memory != HBM:
        raise errors.UnsupportedMemoryError(
            f"{api} with a dynamic offset indexes an HBM tensor; '{v._b.label}' is in {v._b.memory}")
    if dtype is not None and I.normalize_dtype(dtype) != v._b.dtype:
        raise errors.UnsupportedApiError(f"{api}(dtype=...) reinterpreting data is not supported by the emulator")
    if v._gat is not None or v._checks or v._st is None:
        raise errors.IndexNotSupportedError(f"{api}: '{v._b.label}' must be an affine in-bounds view")
    pairs = tuple((int(s), int(n)) for s, n in pattern)
    if not pairs or any(n < 1 for _, n in pairs):
        raise errors.ShapeMismatchError(f"{api}: invalid pattern {pattern}")
    nd = len(v._shape)
    if isinstance(indirect_dim, bool) or not isinstance(indirect_dim, (int, np.integer)) or not 0 <= indirect_dim < nd:
        raise errors.IndexNotSupportedError(
            f"{api}: indirect_dim {indirect_dim!r} is not a dimension of '{v._b.label}' {list(v._shape)}")
    stride = T.c_strides(v._shape)[int(indirect_dim)]
    vec = sca = None
    if vector_offset is not None:
        vec = I.tile(vector_offset, "vector_offset", api, (SBUF,))
        if vec._shape[0] != pairs[0][1] or T.prod(vec._shape[1:]) != 1:
            raise errors.ShapeMismatchError(
                f"{api}: vector_offset must be a ({pairs[0][1]}, 1) SBUF tile (one row index per partition of the "
                f"access), got shape {list(vec._shape)}")
        _index_dtype(vec, "vector_offset", api)
    else:
        from .registers import VirtualRegister
        if isinstance(scalar_offset, VirtualRegister):
            sca = scalar_offset
        else:
            sca = I.tile(scalar_offset, "scalar_offset", api, (SBUF,))
            if T.prod(sca._shape) != 1:
                raise errors.ShapeMismatchError(
                    f"{api}: scalar_offset must be a 1x1 SBUF tile or a register, got shape {list(sca._shape)}")
            _index_dtype(sca, "scalar_offset", api)
    base = v._off + (0 if offset is None else int(offset))
    return IndirectAccess(v, pairs, base, vec, sca, int(indirect_dim), stride)


def _index_dtype(t: NkiTensor, name: str, api: str) -> None:
    if t._b.dtype.kind not in "iu":
        raise errors.UnsupportedDtypeError(f"{api}: {name} must hold integer indices (uint32), got '{t._b.dtname}'")


def _addresses(acc: IndirectAccess) -> tuple[np.ndarray, np.ndarray]:
    """(flat element addresses of the access, shape acc.shape; per partition (vector) or for the
    whole access (scalar): whether its index lies inside dimension `indirect_dim`). Data mode."""
    shape = acc.shape
    pairs = acc.pairs
    n = acc.view._shape[acc.dim]
    rest = np.zeros(shape, dtype=np.int64)
    first = 1 if acc.vector is not None else 0
    for k in range(first, len(pairs)):
        s, cnt = pairs[k]
        ax = [1] * len(shape)
        ax[k] = cnt
        rest = rest + (np.arange(cnt, dtype=np.int64) * s).reshape(ax)
    if acc.vector is not None:
        idx = T.array(acc.vector).reshape(-1).astype(np.int64)
        ok = (idx >= 0) & (idx < n)
        start = acc.offset + idx * acc.stride
        return start.reshape((shape[0],) + (1,) * (len(shape) - 1)) + rest, ok
    from .registers import VirtualRegister, value
    val = value(acc.scalar, "scalar_offset") if isinstance(acc.scalar, VirtualRegister) else \
        int(T.array(acc.scalar).reshape(-1)[0])
    ok = np.array([0 <= val < n])
    return acc.offset + val * acc.stride + rest, ok


def _index_reads(acc: IndirectAccess) -> list[NkiTensor]:
    return [t for t in (acc.vector, acc.scalar) if isinstance(t, NkiTensor)]


def _run(acc: IndirectAccess) -> int:
    """Elements one descriptor moves: the contiguous run of the access's inner pairs."""
    run = 1
    for s, cnt in reversed(acc.pairs[1:]):
        if cnt == 1:
            continue
        if s != run:
            break
        run *= cnt
    return run


def _check_oob(ok: np.ndarray, acc: IndirectAccess, oob: int, api: str) -> None:
    if oob == OOB_ERROR and not ok.all():
        bad = int(np.flatnonzero(~ok)[0])
        raise errors.OutOfBoundsError(
            f"'{api}': the dynamic index of {'partition ' + str(bad) + ' of ' if acc.vector is not None else ''}the "
            f"access to '{acc.view._b.label}' lies outside its dimension {acc.dim} of size "
            f"{acc.view._shape[acc.dim]} (oob_mode=nisa.oob_mode.skip skips such transfers)")


def indirect_copy(api: str, dst, src, line: int, oob: int = OOB_ERROR, add: bool = False) -> None:
    """A DMA between an indirect access and a tile (or plain view): gather (src indirect) or
    scatter (dst indirect); `add`: the destination accumulates (read-modify-write)."""
    m = machine()
    if isinstance(dst, IndirectAccess) and isinstance(src, IndirectAccess):
        raise errors.UnsupportedApiError(f"'{api}' with dynamic offsets on both sides is not supported by the emulator")
    gather = isinstance(src, IndirectAccess)
    acc = src if gather else dst
    other = I.tile(dst if gather else src, "dst" if gather else "src", api, (HBM, SBUF))
    if T.prod(other._shape) != T.prod(acc.shape):
        raise errors.ShapeMismatchError(
            f"'{api}' moves {T.prod(acc.shape)} elements through the access pattern {[list(p) for p in acc.pairs]} "
            f"but '{'dst' if gather else 'src'}' has {T.prod(other._shape)} ({list(other._shape)}); the element "
            f"counts must agree")
    if not gather:
        I.immutable_check(acc.view)
    other = T.as_tile_shape(other)
    T.check_bounds(other)
    b = acc.view._b
    whole = T.whole(b, acc.view._key)
    size = T.prod(b.local)
    P = acc.shape[0]
    if not m.shape_only and T.prod(acc.shape):
        addr, ok = _addresses(acc)
        _check_oob(ok, acc, oob, api)
        rows = np.broadcast_to(ok.reshape((-1,) + (1,) * (len(acc.shape) - 1)) if ok.size > 1 else ok.reshape(
            (1,) * len(acc.shape)), acc.shape)
        live = addr[rows]
        if live.size and (live.min() < 0 or live.max() >= size):
            raise errors.OutOfBoundsError(
                f"'{api}': the access pattern reaches elements [{int(live.min())}, {int(live.max())}] of "
                f"'{b.label}', which has {size}")
        if gather:
            flat = T.array(whole).reshape(-1)
            vals = flat[np.where(rows, addr, 0)]
            cur = T.array(other).reshape(acc.shape)
            new = np.where(rows, (I.fp32(other).reshape(acc.shape) + vals.astype(np.float32)) if add else vals, cur)
            T.write(other, new.reshape(other._shape))
        else:
            flat = T.write_array(whole).reshape(-1)
            vals = T.array(other).reshape(acc.shape)
            if add:
                np.add.at(flat, live, vals[rows].astype(flat.dtype))   # (repeated indices add up)
            else:
                flat[live] = vals[rows].astype(flat.dtype, copy=False)
            cov = b.written
            if cov is not None:
                bm = cov.full_bitmap().reshape(-1)
                bm[live] = True
    elif not gather and b.written is not None:
        b.written.add_box(T.region(whole).box)   # shape-only: which elements is data
    n = T.prod(acc.shape)
    run = min(_run(acc), _contiguous(other))
    reads = [whole if gather else other] + _index_reads(acc) + ([other if gather else whole] if add else [])
    write = other if gather else whole
    dst_isz, src_isz = (other._b.itemsize, b.itemsize) if gather else (b.itemsize, other._b.itemsize)
    dma = DmaInfo(n * dst_isz, P, run * dst_isz, -(-n // run) if run else 0, n * src_isz)
    kind = DMA_STORE if write._b.memory == HBM else DMA_LOAD
    if write is other:
        m.note_write(other._b, T.region(other).box, view=other)
    m.emit(kind, api, (DMA,), write._b.dtname, tuple(r._b.dtname for r in reads), P, n // P if P else 0,
           tuple(T.region(r) for r in reads), (T.region(write),), line, "indirect" + (",add" if add else ""), None,
           dma, 0, False)


def _contiguous(v: NkiTensor) -> int:
    from .instr import _contiguous_run
    return max(1, _contiguous_run(v))


# --- dma_transpose ---------------------------------------------------------------------------------

DEFAULT_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def transpose_axes(ndim: int, axes, api: str) -> tuple[int, ...]:
    if ndim not in DEFAULT_AXES:
        raise errors.MaxDimensionError(f"'{api}' transposes 2-d, 3-d or 4-d tiles, got a {ndim}-d one")
    if axes is None:
        return DEFAULT_AXES[ndim]
    ax = tuple(int(a) for a in axes)
    if ax != DEFAULT_AXES[ndim]:
        raise errors.OperandTypeError(
            f"'axes' of '{api}' for a {ndim}-d tile must be {DEFAULT_AXES[ndim]} (supported: (1, 0), (2, 1, 0), "
            f"(3, 1, 2, 0)), got {ax}")
    return ax


def transpose(api: str, dst: NkiTensor | None, src, axes, dtype, line: int, hwdge: bool = False) -> NkiTensor:
    """DMA transpose of `src` (HBM or SBUF) by the documented permutation of its rank, into
    `dst` (an SBUF tile whose shape has the permuted shape's elements) or a fresh SBUF tile.
    Priced as nl.load_transpose2d: element-wise transposing descriptors."""
    m = machine()
    s = I.tile(src, "src", api, (HBM, SBUF))
    ax = transpose_axes(len(s._shape), axes, api)
    out_shape = tuple(s._shape[a] for a in ax)
    if hwdge:
        if s._b.itemsize != 2:
            raise errors.UnsupportedDtypeError(
                f"a hardware-DGE '{api}' moves 2-byte elements, got '{s._b.dtname}'")
        if s._shape[-1] > 128:
            raise errors.DimensionLimitError(f"a hardware-DGE '{api}' needs src.shape[-1] <= 128, got {s._shape[-1]}")
        if len(s._shape) == 2 and s._shape[0] != 16:
            raise errors.DimensionLimitError(f"a hardware-DGE 2-d '{api}' needs src.shape[0] == 16, got {s._shape[0]}")
        if len(s._shape) > 2 and (s._shape[0] not in (1, 2, 4, 8, 16) or (s._shape[0] * s._shape[-2]) % 16):
            raise errors.DimensionLimitError(
                f"a hardware-DGE {len(s._shape)}-d '{api}' needs src.shape[0] in (1, 2, 4, 8, 16) and "
                f"src.shape[0] * src.shape[-2] a multiple of 16, got {list(s._shape)}")
    if dst is None:
        dt = I.normalize_dtype(dtype) if dtype is not None else s._b.dtype
        res = I.new_result(out_shape, dt, SBUF, DMA_LOAD, line)
        d = res
    else:
        d = I.tile(dst, "dst", api, (SBUF,))
        if d._b.dtype != s._b.dtype:
            raise errors.UnsupportedDtypeError(
                f"'src' ({s._b.dtname}) and 'dst' ({d._b.dtname}) of '{api}' must have the same data type")
        if T.prod(d._shape) != T.prod(out_shape) or d._shape[0] != out_shape[0]:
            raise errors.ShapeMismatchError(
                f"'dst{list(d._shape)}' of '{api}' does not hold the transposed shape {list(out_shape)} of "
                f"'src{list(s._shape)}'")
        T.check_bounds(d)
        res = None
    if s._checks:
        T.check_bounds(s)
    if not m.shape_only and T.prod(out_shape):
        val = np.transpose(T.array(s), ax)
        T.write(d, val.reshape(d._shape))
    n = T.prod(out_shape)
    p = out_shape[0]
    dma = DmaInfo(n * d._b.itemsize, p, s._b.itemsize, n, n * s._b.itemsize)
    if res is not None:
        I.record(m, DMA_LOAD, api, (DMA,), res, res, None, None, [s], line, "transpose", dma=dma)
        return res
    m.note_write(d._b, T.region(d).box, view=d)
    m.emit(DMA_LOAD, api, (DMA,), d._b.dtname, (s._b.dtname,), p, n // p if p else 0, (T.region(s),),
           (T.region(d),), line, "transpose", None, dma, 0, False)
    return d


# --- dma_compute ------------------------------------------------------------------------------------

def compute(api: str, dst, srcs, reduce_op, scales, unique_indices, oob: int, line: int) -> None:
    """dst = srcs[0] + srcs[1] + ... (fp32 in the DMA engines, cast to dst.dtype); element
    counts must match; with one indirect source, a read-modify-write (gather into SBUF, or
    scatter-add into HBM when dst is that source's tensor)."""
    m = machine()
    from . import ops
    if ops.alu_name(reduce_op, api, "reduce_op") != "add":
        raise errors.UnsupportedOpError(f"'reduce_op' of '{api}' only supports nl.add")
    srcs = list(srcs)
    if not 1 <= len(srcs) <= 16:
        raise errors.OperandTypeError(f"'{api}' takes 1 to 16 source tensors, got {len(srcs)}")
    if scales is not None and any(float(s) != 1.0 for s in scales):
        raise errors.OperandTypeError(f"all 'scales' of '{api}' must be 1.0 (or scales=None)")
    if scales is not None and len(scales) != len(srcs):
        raise errors.ShapeMismatchError(f"'{api}' has {len(srcs)} sources but {len(scales)} scales")
    indirect = [s for s in srcs if isinstance(s, IndirectAccess)]
    if indirect or isinstance(dst, IndirectAccess):
        if len(srcs) != 2 or not unique_indices:
            raise errors.OperandTypeError(
                f"a read-modify-write '{api}' (a source with vector_offset) takes exactly 2 sources and "
                f"unique_indices=True")
        acc = indirect[0] if indirect else dst
        rest = [s for s in srcs if s is not acc]
        if isinstance(dst, IndirectAccess) or dst is None:
            indirect_copy(api, acc, rest[0], line, oob, add=True)          # scatter RMW: dst(HBM)[idx] += src
        else:
            d = I.tile(dst, "dst", api, (SBUF,))
            o = I.tile(rest[0], "srcs", api, (SBUF,))
            if o._b is not d._b or T.region(o) != T.region(d):
                raise errors.OperandTypeError(
                    f"a gathering '{api}' adds an indirect HBM source to dst itself: the other source must be dst")
            indirect_copy(api, d, acc, line, oob, add=True)                # gather RMW: dst(SB) += src(HBM)[idx]
        return
    for x in srcs + [dst]:
        if isinstance(x, NkiTensor) and x._b.memory == PSUM:
            raise errors.UnsupportedMemoryError(f"operands of '{api}' are in HBM or SBUF; DMA cannot access PSUM")
    d = I.tile(dst, "dst", api, (HBM, SBUF))
    ss = [I.tile(s, "srcs", api, (HBM, SBUF)) for s in srcs]
    n = T.prod(d._shape)
    for s in ss:
        if T.prod(s._shape) != n:
            raise errors.ShapeMismatchError(
                f"the element count of each source of '{api}' must match dst's ({n}), got {list(s._shape)}")
    if d._b.memory == HBM:
        I.immutable_check(d)
    d2 = T.as_tile_shape(d)
    ss2 = [T.as_tile_shape(s) for s in ss]
    for v in [d2] + ss2:
        T.check_bounds(v)
    if not m.shape_only and n:
        total = np.zeros(n, np.float32)
        for s in ss2:
            total += I.fp32(s).reshape(-1)
        T.write(d2, total.reshape(d2._shape))
    if n:
        T.mark_written(d2)
    m.note_write(d2._b, T.region(d2).box, view=d2)
    p = (d2 if d2._b.memory == SBUF else next((s for s in ss2 if s._b.memory == SBUF), d2))._shape[0]
    run = min([I._contiguous_run(d2)] + [I._contiguous_run(s) for s in ss2]) or 1
    read = sum(n * s._b.itemsize for s in ss2)
    dma = DmaInfo(n * d2._b.itemsize, p, run * d2._b.itemsize, -(-n // run), read)
    kind = DMA_STORE if d2._b.memory == HBM else DMA_LOAD
    m.emit(kind, api, (DMA,), d2._b.dtname, tuple(s._b.dtname for s in ss2), p, n // p if p else 0,
           tuple(T.region(s) for s in ss2), (T.region(d2),), line, "add", None, dma, 0, False)


def add_into(api: str, dst: NkiTensor, src: NkiTensor, line: int) -> None:
    """The legacy dma_copy with `dst_rmw_op=np.add`: dst += src by DMA (a dma_compute of dst and
    src into dst)."""
    compute(api, dst, [dst, src], "add", None, True, OOB_ERROR, line)


# --- one-core sendrecv and core_barrier ------------------------------------------------------------

def own_rank() -> tuple[int, int]:
    """(this program's logical-core rank, number of programs) of the running launch."""
    from .launch import SPMD
    spmd = machine().state.get(SPMD)
    if not spmd:
        return 0, 1
    index, grid = spmd
    return (int(index[0]) if index else 0), (int(grid[0]) if grid else 1)


def _rank(x, name: str, api: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or int(x) not in (0, 1):
        raise errors.OperandTypeError(f"'{name}' of '{api}' must be 0 or 1 (the NeuronCores of a logical core), "
                                      f"got {x!r}")
    return int(x)


def sendrecv(api: str, src, dst, send_to_rank, recv_from_rank, pipe_id, gpsimd_dma: bool, line: int,
             copy) -> None:
    """This core sends `src` to `send_to_rank`'s `dst` and receives `recv_from_rank`'s `src` into
    its own `dst`. The emulator runs the programs of a launch one after another, so only the
    exchange with the core itself (both ranks the running program's) is modelled: a DMA copy
    src -> dst (`copy(dst, src)`, the dialect's DMA)."""
    s = I.tile(src, "src", api, (SBUF,))
    d = I.tile(dst, "dst", api, (SBUF,))
    if s._b.dtype != d._b.dtype:
        raise errors.UnsupportedDtypeError(
            f"'src' ({s._b.dtname}) and 'dst' ({d._b.dtname}) of '{api}' must have the same data type")
    if s._shape[0] != d._shape[0] or T.prod(s._shape[1:]) != T.prod(d._shape[1:]):
        raise errors.ShapeMismatchError(
            f"'src{list(s._shape)}' and 'dst{list(d._shape)}' of '{api}' must have the same partitions and elements "
            f"per partition")
    to, frm = _rank(send_to_rank, "send_to_rank", api), _rank(recv_from_rank, "recv_from_rank", api)
    if isinstance(pipe_id, bool) or not isinstance(pipe_id, (int, np.integer)):
        raise errors.OperandTypeError(f"'pipe_id' of '{api}' must be an integer, got {pipe_id!r}")
    if gpsimd_dma:
        limit = {4: 1024, 2: 512, 1: 256}.get(s._b.itemsize, 1024)
        if T.prod(s._shape[1:]) * s._b.itemsize > limit:
            raise errors.DimensionLimitError(
                f"'{api}' with dma_engine=gpsimd_dma moves at most {limit} bytes per partition of "
                f"{s._b.itemsize * 8}-bit data, got {T.prod(s._shape[1:]) * s._b.itemsize}")
    me, n = own_rank()
    if to != me or frm != me:
        raise errors.UnsupportedApiError(
            f"'{api}' with another NeuronCore (rank {to if to != me else frm}; this program is rank {me} of {n}) is "
            f"not supported by the emulator, which runs the programs of a launch one after another")
    copy(d, s)


def core_barrier(api: str, data, cores, engine_letters: tuple[str, ...], line: int) -> None:
    """A barrier of the listed cores on `data` (shared HBM): this program waits for its own
    writes to `data` (programs run one after another here, so there is no other core to wait
    for). Recorded as one instruction of the chosen engine reading `data`."""
    m = machine()
    x = I.tile(data, "data", api, (HBM,))
    try:
        cs = tuple(int(c) for c in cores)
    except TypeError:
        raise errors.OperandTypeError(f"'cores' of '{api}' must be a tuple of core indices, got {cores!r}") from None
    if cs not in ((0,), (0, 1)):
        raise errors.OperandTypeError(f"'cores' of '{api}' must be (0, 1) (or (0,) for one core), got {cores!r}")
    me, _ = own_rank()
    if me not in cs:
        raise errors.OperandTypeError(f"'{api}': this program (rank {me}) is not one of the cores {cs}")
    engines = engine_letters or (GPSIMD_ENGINE,)
    m.emit(GPSIMD if engines == (GPSIMD_ENGINE,) else TS, api, engines, x._b.dtname, (x._b.dtname,), 1, 0,
           (T.region(x),), (), line, "barrier", None, None, 0, False)
