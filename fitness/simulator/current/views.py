"""Tensor syntax of the current NKI dialect: subscripts (integers, slices, `...`, `nl.ds`;
no masks, so an out-of-range subscript is an error at once) and the view methods of
`nki.language.NkiTensor` (`slice`, `select`, `permute`, `broadcast`, `reshape`,
`rearrange`, `view`, `ap`, ...), each a zero-copy strided view of the same storage.

A view is the core's affine view (`core.tensor`); methods that the affine form cannot
express (re-laid-out reshapes, raw access patterns) give a strided view: explicit
per-axis strides and an offset over the block's row-major storage.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import errors
from ..core import instr as I
from ..core import subscript as S
from ..core import tensor as T
from ..core.indexing import IndexExpr, is_int
from ..core.runtime import machine
from ..core.tensor import NkiTensor, _make
from ..trace import HBM, PSUM, SBUF


def getitem(t: NkiTensor, key) -> NkiTensor:
    """`t[key]` with the current dialect's rules."""
    for k in key if type(key) is tuple else (key,):
        if isinstance(k, NkiTensor):
            raise errors.UnsupportedApiError(
                f"indexing tensor '{t._b.label}' with a tensor (dynamic indexing) is not supported by the emulator")
        if isinstance(k, IndexExpr):
            raise errors.IndexNotSupportedError(
                f"tensor '{t._b.label}' indexed with an nl.arange expression, which the current NKI does not "
                f"have; index with integers, slices and nl.ds(start, size)")
    v = S.subscript(t, key)
    if v._checks:
        _out_of_bounds(v)
    return v


def _out_of_bounds(v: NkiTensor) -> None:
    c, coef, ext, dim = v._checks[0]
    lo = hi = c
    for a, n in zip(coef, v._shape):
        if a > 0:
            hi += a * (n - 1)
        elif a < 0:
            lo += a * (n - 1)
    raise errors.OutOfBoundsError(
        f"Out-of-bound access for tensor `{v._b.label}` on dimension {dim}: index range [{lo}, {hi}] exceeds the "
        f"dimension size {ext}; the current NKI has no masks: clip the slice, e.g. "
        f"t[i * T:min((i + 1) * T, n)]")


def setitem(t: NkiTensor, key, value) -> None:
    """`t[key] = value`: a copy (tile) or a memset (scalar) into the view."""
    I.setitem(t, key, value)


def augmented(t: NkiTensor, value, op: str):
    """`t += value` (and -=, *=, /=): a read-modify-write instruction."""
    if value is None:
        raise errors.LegacyConstructError(
            "`t += nisa.<instruction>(...)` is the legacy convention: current nisa instructions return nothing and "
            "write their destination, e.g. nisa.nc_matmul(dst=psum_tile, stationary=a, moving=b) accumulates")
    return I.augmented(t, value, op)


# --- view methods ------------------------------------------------------------------------------

def strided(v: NkiTensor, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> NkiTensor:
    """A view of `v`'s block with explicit element strides and offset (row-major block
    storage), checked to stay inside the block."""
    b = v._b
    size = T.prod(b.local)
    hi = offset + sum(s * (n - 1) for s, n in zip(strides, shape))
    if any(s < 0 for s in strides) or offset < 0 or hi >= size:
        raise errors.OutOfBoundsError(
            f"access pattern (shape {list(shape)}, strides {list(strides)}, offset {offset}) reaches elements "
            f"[{offset}, {hi}] of tensor '{b.label}', which has {size} elements")
    n = len(shape)
    return _make(b, v._key, shape, tuple(strides), offset, (0,) * n, T.identity_coef(n), tuple(shape), (), None,
                 alias=True)


def _affine(v: NkiTensor) -> NkiTensor:
    if v._gat is not None:
        raise errors.UnsupportedApiError(f"views of gathered tensor '{v._b.label}' are not supported")
    return v


def _check_dim(v: NkiTensor, dim: int, what: str, allow_partition: bool = False) -> int:
    n = len(v._shape)
    if not -n <= dim < n:
        raise errors.IndexNotSupportedError(f"{what}: dimension {dim} out of range for a tensor of rank {n}")
    dim %= n
    if dim == 0 and not allow_partition and v._b.memory != HBM:
        raise errors.IndexNotSupportedError(
            f"{what}: dimension 0 of on-chip tensor '{v._b.label}' is the partition dimension, which views cannot change")
    return dim


def slice_(v: NkiTensor, dim: int, start: int, end: int, step: int = 1) -> NkiTensor:
    """`t.slice(dim, start, end, step)`: elements start..end (exclusive) along `dim`."""
    dim = _check_dim(v, dim, "slice", allow_partition=True)
    key = [slice(None)] * len(v._shape)
    key[dim] = slice(int(start), int(end), int(step))
    return getitem(v, tuple(key))


def select(v: NkiTensor, dim: int, index) -> NkiTensor:
    """`t.select(dim, i)`: the elements at index i of `dim`, which is removed."""
    if not is_int(index):
        raise errors.UnsupportedApiError("t.select with a tensor index (dynamic selection) is not supported by the emulator")
    dim = _check_dim(v, dim, "select")
    v = _affine(v)
    i = int(index)
    if not 0 <= i < v._shape[dim]:
        raise errors.OutOfBoundsError(
            f"select index {i} out of range for dimension {dim} of size {v._shape[dim]} (tensor '{v._b.label}')")
    c = tuple(c + row[dim] * i for c, row in zip(v._c, v._a))
    a = tuple(row[:dim] + row[dim + 1:] for row in v._a)
    return _make(v._b, v._key, v._dims, v._dstr, v._base, c, a, v._shape[:dim] + v._shape[dim + 1:], (), None,
                 v._alias)


def permute(v: NkiTensor, dims) -> NkiTensor:
    """`t.permute(dims)`: reorder the dimensions (on-chip: dims[0] must be 0)."""
    dims = tuple(int(d) for d in dims)
    n = len(v._shape)
    if sorted(dims) != list(range(n)):
        raise errors.IndexNotSupportedError(f"permute: {list(dims)} is not a permutation of range({n})")
    if v._b.memory != HBM and dims[0] != 0:
        raise errors.IndexNotSupportedError(
            f"permute: on-chip tensor '{v._b.label}' keeps its partition dimension first (dims[0] must be 0)")
    v = _affine(v)
    a = tuple(tuple(row[d] for d in dims) for row in v._a)
    return _make(v._b, v._key, v._dims, v._dstr, v._base, v._c, a, tuple(v._shape[d] for d in dims), (), None,
                 v._alias)


def broadcast(v: NkiTensor, dim: int, size: int) -> NkiTensor:
    """`t.broadcast(dim, size)`: repeat a size-1 dimension `size` times (stride 0)."""
    dim = _check_dim(v, dim, "broadcast")
    if v._shape[dim] != 1:
        raise errors.BroadcastError(f"broadcast: dimension {dim} of tensor '{v._b.label}' has size {v._shape[dim]}, not 1")
    v = _affine(v)
    a = tuple(row[:dim] + (0,) + row[dim + 1:] for row in v._a)
    shape = v._shape[:dim] + (int(size),) + v._shape[dim + 1:]
    return _make(v._b, v._key, v._dims, v._dstr, v._base, v._c, a, shape, (), None, v._alias)


def expand_dim(v: NkiTensor, dim: int) -> NkiTensor:
    """`t.expand_dim(dim)`: a new size-1 dimension at `dim`."""
    n = len(v._shape)
    dim = int(dim) % (n + 1)
    if dim == 0 and v._b.memory != HBM:
        raise errors.IndexNotSupportedError("expand_dim: on-chip tensors keep their partition dimension first")
    v = _affine(v)
    a = tuple(row[:dim] + (0,) + row[dim:] for row in v._a)
    return _make(v._b, v._key, v._dims, v._dstr, v._base, v._c, a, v._shape[:dim] + (1,) + v._shape[dim:], (), None,
                 v._alias)


def squeeze_dim(v: NkiTensor, dim: int) -> NkiTensor:
    """`t.squeeze_dim(dim)`: remove a size-1 dimension."""
    dim = _check_dim(v, dim, "squeeze_dim")
    if v._shape[dim] != 1:
        raise errors.ShapeMismatchError(f"squeeze_dim: dimension {dim} of tensor '{v._b.label}' has size {v._shape[dim]}")
    return select(v, dim, 0)


def _strides(v: NkiTensor) -> tuple[int, ...]:
    _affine(v)
    return v._st


def reshape(v: NkiTensor, *shape) -> NkiTensor:
    """`t.reshape(shape)`: the same elements in row-major order with another shape; on-chip the
    partition dimension stays, and the free dimensions must be contiguous."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(int(n) for n in shape)
    if -1 in shape:
        known = T.prod(n for n in shape if n != -1)
        shape = tuple(T.prod(v._shape) // known if n == -1 else n for n in shape)
    if T.prod(shape) != T.prod(v._shape):
        raise errors.ShapeMismatchError(
            f"cannot reshape tensor '{v._b.label}' of shape {list(v._shape)} into {list(shape)} (element counts differ)")
    st = _strides(v)
    onchip = v._b.memory != HBM
    if onchip and shape[0] != v._shape[0]:
        raise errors.ShapeMismatchError(
            f"reshape of on-chip tensor '{v._b.label}' must keep the partition dimension ({v._shape[0]}), got {list(shape)}")
    lead = 1 if onchip else 0
    if not _contiguous(v._shape[lead:], st[lead:]):
        raise errors.IndexNotSupportedError(
            f"reshape needs contiguous {'free ' if onchip else ''}dimensions; the view of '{v._b.label}' with shape "
            f"{list(v._shape)} and strides {list(st)} is not (copy it first)")
    new = T.c_strides(shape[lead:])
    return strided(v, shape, (st[0],) + new if onchip else new, v._off)


def _contiguous(shape, st) -> bool:
    expect = 1
    for n, s in zip(reversed(shape), reversed(st)):
        if n == 1:
            continue
        if s != expect:
            return False
        expect *= n
    return True


def reshape_dim(v: NkiTensor, dim: int, shape) -> NkiTensor:
    """`t.reshape_dim(dim, shape)`: split one dimension into several."""
    dim = _check_dim(v, dim, "reshape_dim", allow_partition=len(tuple(shape)) == 1)
    shape = tuple(int(n) for n in shape)
    if -1 in shape:
        known = T.prod(n for n in shape if n != -1)
        shape = tuple(v._shape[dim] // known if n == -1 else n for n in shape)
    if T.prod(shape) != v._shape[dim]:
        raise errors.ShapeMismatchError(f"reshape_dim: {list(shape)} does not split dimension {dim} of size {v._shape[dim]}")
    st = _strides(v)
    inner = tuple(st[dim] * s for s in T.c_strides(shape))
    return strided(v, v._shape[:dim] + shape + v._shape[dim + 1:], st[:dim] + inner + st[dim + 1:], v._off)


def flatten_dims(v: NkiTensor, start_dim: int, end_dim: int) -> NkiTensor:
    """`t.flatten_dims(start, end)`: merge dimensions start..end (inclusive, contiguous)."""
    s = _check_dim(v, start_dim, "flatten_dims")
    e = _check_dim(v, end_dim, "flatten_dims")
    st = _strides(v)
    sub_shape, sub_st = v._shape[s:e + 1], st[s:e + 1]
    expect = sub_st[-1]
    for n, stride in zip(reversed(sub_shape), reversed(sub_st)):
        if n != 1 and stride != expect:
            raise errors.IndexNotSupportedError(
                f"flatten_dims: dimensions {s}..{e} of the view of '{v._b.label}' are not contiguous")
        expect = stride * n
    shape = v._shape[:s] + (T.prod(sub_shape),) + v._shape[e + 1:]
    return strided(v, shape, st[:s] + (sub_st[-1],) + st[e + 1:], v._off)


def rearrange(v: NkiTensor, src_pattern, dst_pattern, fixed_sizes=None) -> NkiTensor:
    """`t.rearrange(src, dst, sizes)`: einops-style split, reorder and merge of dimensions."""
    sizes = dict(fixed_sizes or {})
    st = _strides(v)
    if len(src_pattern) != len(v._shape):
        raise errors.ShapeMismatchError(f"rearrange: pattern {src_pattern} does not match rank {len(v._shape)}")
    names: dict[str, tuple[int, int]] = {}   # name -> (size, stride)
    for group, n, stride in zip(src_pattern, v._shape, st):
        group = (group,) if isinstance(group, str) else tuple(group)
        known = T.prod(sizes[g] for g in group if g in sizes)
        unknown = [g for g in group if g not in sizes]
        if len(unknown) > 1:
            raise errors.ShapeMismatchError(f"rearrange: give the sizes of {unknown[1:]} in fixed_sizes")
        if unknown:
            sizes[unknown[0]] = n // known
        if T.prod(sizes[g] for g in group) != n:
            raise errors.ShapeMismatchError(f"rearrange: group {group} does not split a dimension of size {n}")
        inner = stride
        for g in reversed(group):
            names[g] = (sizes[g], inner)
            inner *= sizes[g]
    view = strided(v, tuple(names[g][0] for g in names), tuple(names[g][1] for g in names), v._off)
    order = []
    for group in dst_pattern:
        for g in (group,) if isinstance(group, str) else tuple(group):
            if g not in names:
                raise errors.ShapeMismatchError(f"rearrange: '{g}' is not in the source pattern")
            order.append(list(names).index(g))
    view = permute(view, order)
    pos = 0
    for group in dst_pattern:
        k = 1 if isinstance(group, str) else len(group)
        if k > 1:
            view = flatten_dims(view, pos, pos + k - 1)
        pos += 1
    return view


def view(v: NkiTensor, dtype) -> NkiTensor:
    """`t.view(dtype)`: the same bytes as another dtype of the same element size (no copy: a
    write through either tensor is seen by the other). The trace records the accesses of the
    view as accesses of the viewed tensor, with the view's dtype. A dtype of another element
    size (which rescales the last dimension) is refused."""
    dt = I.normalize_dtype(dtype)
    b = v._b
    if dt.itemsize != b.itemsize:
        raise errors.UnsupportedApiError(
            f"t.view({T.dtype_name(dt)}) of a {b.dtname} tensor changes the element size, which the emulator does not "
            "support (views of the same element size are supported)")
    if dt == b.dtype:
        return v
    _affine(v)
    I.tile(v, "t", "t.view", (HBM, SBUF, PSUM))   # in scope; a fresh result is used from now on
    alias = _reinterpreted(b, dt)
    return _make(alias, v._key, v._dims, v._dstr, v._base, v._c, v._a, v._shape, v._checks, v._gat, v._alias)


class _Blocks(dict):
    """The blocks of a reinterpreting view: always the viewed tensor's current blocks, as the
    view's dtype (never stored, so they cannot go stale when that tensor's storage moves)."""

    __slots__ = ("storage",)

    def get(self, key, default=None):
        return self.storage.view(None, key)

    def __setitem__(self, key, value) -> None:
        pass

    def pop(self, key, default=None):
        return default


class _Reinterpretation:
    """The storage of a reinterpreting view (in `Buffer.place`): the bytes of another buffer."""

    __slots__ = ("orig", "dtype")

    def __init__(self, orig: T.Buffer, dtype):
        self.orig, self.dtype = orig, dtype

    def view(self, b, key: tuple):
        o = self.orig
        if o.shared:
            T.unshare(o, key)   # a write through the view must not reach a peer sharing the array
        return o.block(key).view(self.dtype)

    def ndarray(self, v: NkiTensor):
        blk = self.view(v._b, v._key)
        isz = v._b.itemsize
        return np.ndarray(v._shape, dtype=blk.dtype, buffer=blk, offset=v._off * isz,
                          strides=T.byte_strides(v._st, isz))


def _reinterpreted(b: T.Buffer, dt) -> T.Buffer:
    """The buffer of `b`'s storage seen as `dt` (one per buffer and dtype): the same tensor id,
    shape and bookkeeping, its own dtype."""
    m = machine()
    cache = m.state.setdefault("reinterpreted", {})
    hit = cache.get((b.id, dt))
    if hit is not None and hit[0] is b:
        return hit[1]
    a = T.Buffer.__new__(T.Buffer)
    for slot in ("id", "name", "memory", "shape", "nb", "local", "lstr", "kind", "scope", "tpath", "line", "mutable",
                 "written", "plans"):
        setattr(a, slot, getattr(b, slot))
    a.dtype, a.dtname, a.itemsize = dt, T.dtype_name(dt), dt.itemsize
    a.fill = a.fresh = a.shared = a.views = None
    a.place = _Reinterpretation(b, dt)
    if b.blocks is None:
        a.blocks = None
    else:
        a.blocks = _Blocks()
        a.blocks.storage = a.place
    cache[(b.id, dt)] = (b, a)
    return a


def ap(v: NkiTensor, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim: int = 0,
       dtype=None) -> NkiTensor:
    """`t.ap([[stride, count], ...], offset=)`: an explicit access pattern over the tensor's
    row-major storage (the first pair walks the partitions of an on-chip tensor)."""
    if scalar_offset is not None or vector_offset is not None:
        # an indirect access: the operand of a gathering / scattering DMA
        from ..core import dmaops
        return dmaops.access(v, pattern, offset, scalar_offset, vector_offset, indirect_dim, dtype)
    if dtype is not None and I.normalize_dtype(dtype) != v._b.dtype:
        raise errors.UnsupportedApiError("t.ap(dtype=...) reinterpreting data is not supported by the emulator")
    _affine(v)
    pairs = [(int(s), int(n)) for s, n in pattern]
    if not pairs or any(n < 1 for _, n in pairs):
        raise errors.ShapeMismatchError(f"t.ap: invalid pattern {pattern}")
    base = v._off + (0 if offset is None else int(offset))
    if v._b.memory != HBM:
        pstride = v._b.lstr[0] if len(v._b.local) > 1 else 1
        if pairs[0][1] > 1 and pairs[0][0] != pstride:
            raise errors.IndexNotSupportedError(
                f"t.ap on on-chip tensor '{v._b.label}': the first pair must walk the partitions (stride {pstride} "
                f"elements, one partition), got stride {pairs[0][0]}")
        reach = base % pstride + sum(s * (n - 1) for s, n in pairs[1:])
        if reach >= pstride:
            raise errors.IndexNotSupportedError(
                f"t.ap on on-chip tensor '{v._b.label}': the free pairs reach element {reach} of a partition that "
                f"holds {pstride}; only the first pair may move across partitions")
    view = strided(v, tuple(n for _, n in pairs), tuple(s for s, _ in pairs), base)
    return view


def get_pattern(v: NkiTensor) -> list[list[int]]:
    """`t.get_pattern()`: [[stride, count], ...] of the view."""
    return [[s, n] for s, n in zip(_strides(v), v._shape)]


def is_contiguous(v: NkiTensor) -> bool:
    st = _strides(v)
    lead = 1 if v._b.memory != HBM else 0
    return _contiguous(v._shape[lead:], st[lead:])


METHODS = {
    "slice": slice_, "select": select, "permute": permute, "broadcast": broadcast, "expand_dim": expand_dim,
    "squeeze_dim": squeeze_dim, "reshape": reshape, "reshape_dim": reshape_dim, "flatten_dims": flatten_dims,
    "rearrange": rearrange, "view": view, "ap": ap, "get_pattern": get_pattern, "is_contiguous": is_contiguous,
}


def method(t: NkiTensor, name: str):
    """The current front-end's `method` handler: `t.name` bound to the view method."""
    return functools.partial(METHODS[name], t)

