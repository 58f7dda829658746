"""GpSimd instructions in the calling convention of the core, shared by both dialects: the
access-pattern iota and affine_select (the current dialect's `pattern`/`offset`/
`channel_multiplier` form; the legacy affine_select's predicate is an index expression),
local_gather, nc_n_gather, tensor_partition_reduce, sequence_bounds and nonzero_with_count.
GpSimd Engine cannot access PSUM: every operand is an SBUF tile.

Semantics and limits are those of the nki.isa documentation (NKI 0.6, aws-neuron-sdk
nki/api/nki/isa/__init__.py at 81ce03a; legacy general/nki/api/nki/isa at 0521004, and the
NumPy equivalents of its example tests, general/nki/test/test_nki_isa_*.py).
"""

from __future__ import annotations

import numpy as np

from .. import errors
from ..trace import GPSIMD, GPSIMD_ENGINE, SBUF
from . import instr as I
from . import ops
from . import tensor as T
from .tensor import NkiTensor
from .vector import (
    free_size,
    in_place,
    instruction,
    integer_tile,
    refuse_mask,
    result_dtype,
)

GP = (GPSIMD_ENGINE,)
SB = (SBUF,)
I32 = np.dtype(np.int32)


def _int(x, name: str, api: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise errors.OperandTypeError(f"'{name}' of '{api}' must be a compile-time int32 constant, got {x!r}")
    return int(x)


def _wrap32(a: np.ndarray) -> np.ndarray:
    """int64 values as the int32 arithmetic of the engine leaves them (two's complement)."""
    return ((a + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int64)


def pattern_values(api: str, P: int, n_free: int, pattern, offset, channel_multiplier) -> tuple:
    """(value function, pattern shape) of an access-pattern expression: value[c, w, z, y, x] =
    offset + c * channel_multiplier + w * step_w + z * step_z + y * step_y + x * step_x, the
    pattern [[step, num], ...] (up to 4 pairs) spanning the `n_free` elements per partition."""
    try:
        pairs = [(_int(s, "pattern step", api), _int(n, "pattern size", api)) for s, n in pattern]
    except (TypeError, ValueError):
        raise errors.OperandTypeError(f"'pattern' of '{api}' must be a list of [step, num] pairs, got {pattern!r}") \
            from None
    if not 1 <= len(pairs) <= 4 or any(n < 1 for _, n in pairs):
        raise errors.OperandTypeError(f"'pattern' of '{api}' must be 1 to 4 [step, num] pairs with num >= 1, "
                                      f"got {pattern!r}")
    shape = tuple(n for _, n in pairs)
    if T.prod(shape) != n_free:
        raise errors.ShapeMismatchError(
            f"the pattern {[list(p) for p in pairs]} of '{api}' spans {T.prod(shape)} elements, but the destination "
            f"has {n_free} elements per partition")
    off, cm = _int(offset, "offset", api), _int(channel_multiplier, "channel_multiplier", api)

    def values() -> np.ndarray:
        v = np.full((P,) + shape, off, dtype=np.int64)
        v += (np.arange(P, dtype=np.int64) * cm).reshape((P,) + (1,) * len(shape))
        for k, (s, n) in enumerate(pairs):
            ax = [1] * (len(shape) + 1)
            ax[k + 1] = n
            v += (np.arange(n, dtype=np.int64) * s).reshape(ax)
        return _wrap32(v)
    return values, shape


def iota(api: str, shape: tuple[int, ...], dtype: np.dtype, pattern, offset, channel_multiplier,
         line: int) -> NkiTensor:
    """A fresh SBUF tile of `shape` holding the pattern's int32 values cast to `dtype`."""
    P = shape[0]
    values, _ = pattern_values(api, P, T.prod(shape[1:]), pattern, offset, channel_multiplier)
    return instruction(api, GPSIMD, GP, "iota", [], shape, dtype, lambda: values().reshape(shape), line)


def affine_select(api: str, pred_fn, on_true_tile, on_false_value, dtype, mask, line: int,
                  allow_int32: bool = True) -> NkiTensor:
    """out = on_true_tile where the predicate (`pred_fn(shape)`: a bool array over the tile)
    holds, else on_false_value (a float32 constant)."""
    x = I.tile(on_true_tile, "on_true_tile", api, SB)
    if not I.is_scalar(on_false_value):
        raise errors.OperandTypeError(
            f"'on_false_value' of '{api}' must be a float32 scalar, got {type(on_false_value).__name__}")
    if not allow_int32 and x._b.dtype.kind in "iu" and x._b.itemsize > 2:
        raise errors.UnsupportedDtypeError(
            f"'on_true_tile' of '{api}' must be a float or an 8-bit/16-bit integer tile, got '{x._b.dtname}'")
    dt = result_dtype(dtype, x._b.dtype)
    shape = x._shape
    box, _ = I.active(mask, shape)   # (a mask array: I.compute applies it)
    fv = np.float32(on_false_value)

    def fn(a):
        p = pred_fn(shape)
        if box is not None:
            p = p[tuple(slice(lo, hi) for lo, hi in box)]
        return np.where(p, a, fv)

    return I.compute(api, GPSIMD, GP, "affine_select", [("on_true_tile", x)], shape, dt, mask, fn, line=line,
                     memories=SB)


CMP_OPS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")


def pattern_predicate(api: str, P: int, n_free: int, pattern, offset, channel_multiplier, cmp_op):
    """The predicate function of the current affine_select: cmp_op(affine value, 0)."""
    values, _ = pattern_values(api, P, n_free, pattern, offset, channel_multiplier)
    name = ops.alu_name(cmp_op, api, "cmp_op")
    if name not in CMP_OPS:
        raise errors.UnsupportedOpError(f"'cmp_op' of '{api}' must be a comparison operator (nl.equal, nl.less, "
                                        f"...), got '{name}'")
    f = ops.ALU[name]
    return lambda shape: f(values().astype(np.float64), 0).astype(bool).reshape(shape)


# --- gathers -------------------------------------------------------------------------------------

GATHER_ELEMS = (1, 2, 4, 8, 16, 32)
CORE_PARTITIONS = 16


def local_gather(api: str, src_buffer, index, num_elem_per_idx, num_valid_indices, out_shape, line: int) -> NkiTensor:
    """Each GpSimd core (16 partitions) gathers from its 16 partitions of `src_buffer`: its
    16-partition slice of `index` (uint16) flattened partition dimension first, the first
    `num_valid_indices` of them, each an element offset within a partition from which
    `num_elem_per_idx` contiguous elements are read, in every one of the core's partitions."""
    s = I.tile(src_buffer, "src_buffer", api, SB)
    ix = I.tile(index, "index", api, SB)
    P = s._shape[0]
    if ix._shape[0] != P or P % CORE_PARTITIONS:
        raise errors.ShapeMismatchError(
            f"the partition axis size of 'src_buffer{list(s._shape)}' of '{api}' must match that of "
            f"'index{list(ix._shape)}' and be a multiple of 16")
    if ix._b.dtname != "uint16":
        raise errors.UnsupportedDtypeError(f"the indices of '{api}' must be uint16, got '{ix._b.dtname}'")
    e = _int(num_elem_per_idx, "num_elem_per_idx", api)
    if e not in GATHER_ELEMS:
        raise errors.OperandTypeError(f"'num_elem_per_idx' of '{api}' must be one of {list(GATHER_ELEMS)}, got {e}")
    per_core = CORE_PARTITIONS * free_size(ix)
    nv = per_core if num_valid_indices is None else _int(num_valid_indices, "num_valid_indices", api)
    if not 0 < nv <= per_core:
        raise errors.OperandTypeError(
            f"'num_valid_indices' of '{api}' must be between 1 and the {per_core} indices of each 16-partition "
            f"slice of 'index', got {nv}")
    if nv > 4096:
        raise errors.DimensionLimitError(f"'{api}' gathers at most 4096 indices per GpSimd core, got {nv}")
    shape = tuple(out_shape) if out_shape is not None else (P, nv * e)
    if shape[0] != P or T.prod(shape[1:]) != nv * e:
        raise errors.ShapeMismatchError(
            f"the output of '{api}' holds {nv} x {e} gathered elements per partition, not the shape {list(shape)}")
    Fs = free_size(s)

    def fn(src, idx):
        src = src.reshape(P, Fs)
        idx = idx.reshape(P, -1)
        out = np.empty((P, nv, e), dtype=src.dtype)
        for c in range(P // CORE_PARTITIONS):
            rows = slice(c * CORE_PARTITIONS, (c + 1) * CORE_PARTITIONS)
            flat = idx[rows].flatten(order="F")[:nv].astype(np.int64)
            if flat.size and (flat.max() + e > Fs):
                raise errors.OutOfBoundsError(
                    f"'{api}': GpSimd core {c} gathers elements {int(flat.max())}..{int(flat.max()) + e - 1} of a "
                    f"partition of 'src_buffer' with {Fs} (out-of-bound gathers are undefined on the device)")
            cols = flat[:, None] + np.arange(e)[None, :]
            out[rows] = src[rows][:, cols]
        return out.reshape(shape)

    func = f"local_gather/{e}"
    return instruction(api, GPSIMD, GP, func, [("src_buffer", s, "raw"), ("index", ix, "raw")], shape, s._b.dtype,
                       fn, line, free=nv * e, memories=SB)


def n_gather(api: str, data, indices, out_dtype, line: int) -> NkiTensor:
    """Per partition: out[p, j] = data[p, indices[p, j]] (data's free axes flattened; uint32
    indices); the output has the shape of `indices` and the dtype of `data`."""
    x = I.tile(data, "data", api, SB)
    ix = I.tile(indices, "indices", api, SB)
    P = x._shape[0]
    if ix._shape[0] != P:
        raise errors.PartitionMismatchError(
            f"'data{list(x._shape)}' and 'indices{list(ix._shape)}' of '{api}' must have the same partitions")
    if ix._b.dtname != "uint32":
        raise errors.UnsupportedDtypeError(f"'indices' of '{api}' must be uint32, got '{ix._b.dtname}'")
    if out_dtype is not None and I.normalize_dtype(out_dtype) != x._b.dtype:
        raise errors.UnsupportedDtypeError(
            f"the output of '{api}' must have the data type of 'data' ({x._b.dtname}), got "
            f"'{T.dtype_name(I.normalize_dtype(out_dtype))}'")
    F = free_size(x)

    def fn(a, idx):
        i = idx.reshape(P, -1).astype(np.int64)
        if i.size and (i.max() >= F):
            raise errors.OutOfBoundsError(
                f"'{api}': index {int(i.max())} of 'indices' is outside the range [0, {F}) of 'data{list(x._shape)}'")
        return np.take_along_axis(a.reshape(P, F), i, axis=1).reshape(ix._shape)

    return instruction(api, GPSIMD, GP, "n_gather", [("data", x, "raw"), ("indices", ix, "raw")], ix._shape,
                       x._b.dtype, fn, line, free=free_size(ix), memories=SB)


# --- reductions and scans ------------------------------------------------------------------------

PARTITION_REDUCE = ("add", "maximum", "bitwise_or", "bitwise_and")


def partition_reduce(api: str, op, data, dtype, mask, line: int, average: bool = False) -> NkiTensor:
    """The reduction of `data` across its partitions: a (1, ...) tile of its free shape."""
    x = I.tile(data, "data", api, SB)
    refuse_mask(mask, x._shape, api, "what a mask does to a cross-partition reduction is not documented")
    name = "average" if average else ops.alu_name(op, api)
    if name not in PARTITION_REDUCE + (("average",) if average else ()):
        raise errors.UnsupportedOpError(
            f"'op' of '{api}' must be one of nl.add, nl.maximum, nl.bitwise_or, nl.bitwise_and"
            f"{', average' if average else ''}, got '{name}'")
    bitwise = name.startswith("bitwise")
    if bitwise:
        integer_tile(x, "data", api, "iu")
    shape = (1,) + x._shape[1:]

    def fn(a):
        if bitwise:
            return ops.REDUCE[name](a, axis=0, keepdims=True)
        if name == "average":
            return a.mean(axis=0, keepdims=True, dtype=np.float32)
        return ops.REDUCE[name](a, axis=0, keepdims=True)

    return instruction(api, GPSIMD, GP, f"partition_reduce-{name}", [("data", x, "raw") if bitwise else ("data", x)],
                       shape, result_dtype(dtype, x._b.dtype), fn, line, free=free_size(x), memories=SB,
                       partitions=x._shape[0])


def sequence_bounds(api: str, segment_ids, dtype, line: int) -> NkiTensor:
    """(1, n) segment ids -> (1, 2, n): the start and (exclusive) end index of each element's
    segment; padding (id 0) gets start n and end -1 (the NumPy equivalent of the documentation)."""
    x = I.tile(segment_ids, "segment_ids", api, SB)
    if x._shape[0] != 1 or len(x._shape) != 2:
        raise errors.ShapeMismatchError(
            f"'segment_ids' of '{api}' must be a [1, n] tile (the partition dimension must be 1), got "
            f"{list(x._shape)}")
    for what, dt in (("segment_ids", x._b.dtype), ("output", result_dtype(dtype, x._b.dtype))):
        if T.dtype_name(dt) not in ("float32", "int32"):
            raise errors.UnsupportedDtypeError(f"the {what} of '{api}' must be float32 or int32, got "
                                               f"'{T.dtype_name(dt)}'")
    n = x._shape[1]

    def fn(a):
        seq = a.reshape(n)
        lo = np.zeros(n, np.float32)
        hi = np.zeros(n, np.float32)
        for i in range(n):
            if seq[i] == 0:
                lo[i] = n
            elif i > 0 and seq[i] == seq[i - 1]:
                lo[i] = lo[i - 1]
            else:
                lo[i] = i
        for i in range(n - 1, -1, -1):
            if seq[i] == 0:
                hi[i] = -1
            elif i < n - 1 and seq[i] == seq[i + 1]:
                hi[i] = hi[i + 1]
            else:
                hi[i] = i + 1
        return np.stack([lo, hi])[None]

    return instruction(api, GPSIMD, GP, "sequence_bounds", [("segment_ids", x)], (1, 2, n),
                       result_dtype(dtype, x._b.dtype), fn, line, free=n, memories=SB)


def nonzero_with_count(api: str, dst, src, index_offset, padding_val, line: int) -> None:
    """In partitions 0, 16, ..., 112 only (each GpSimd core's first): dst[p] = the indices (plus
    index_offset) of the nonzero elements of src[p], then padding_val, then their count; the
    other partitions of dst keep their values."""
    s = I.tile(src, "src", api, SB)
    I.tile(dst, "dst", api, SB)
    P = s._shape[0]
    if dst._shape[0] != P:
        raise errors.PartitionMismatchError(
            f"'src{list(s._shape)}' and 'dst{list(dst._shape)}' of '{api}' must have the same partitions")
    if s._b.dtname not in ("float32", "int32"):
        raise errors.UnsupportedDtypeError(f"'src' of '{api}' must be float32 or int32, got '{s._b.dtname}'")
    if dst._b.dtname != "int32":
        raise errors.UnsupportedDtypeError(f"'dst' of '{api}' must be int32, got '{dst._b.dtname}'")
    F = free_size(s)
    if free_size(dst) != F + 1:
        raise errors.ShapeMismatchError(
            f"'dst' of '{api}' must have one more element per partition than 'src' ({F} + 1), got {free_size(dst)}")
    off, pad = _int(index_offset, "index_offset", api), _int(padding_val, "padding_val", api)

    def fn(cur, a):
        out = T.array(dst).reshape(P, F + 1).copy()
        a = T.array(s).reshape(P, F)
        for p in range(0, P, CORE_PARTITIONS):
            nz = np.flatnonzero(a[p] != 0)
            row = np.full(F + 1, pad, dtype=np.int64)
            row[:nz.size] = nz + off
            row[F] = nz.size
            out[p] = _wrap32(row)
        return out

    in_place(api, GPSIMD, GP, "nonzero_with_count", dst, [("src", s, "raw")], fn, line, free=F)
