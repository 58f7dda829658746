"""`neuronxcc.nki.isa` (nisa): single hardware instructions — TensorE matmul/transpose,
ScalarE activation, VectorE tensor_scalar / tensor_tensor / reduce / scan / reciprocal,
memset, iota and copies (nki-semantics.md §6.5-6.6) — in the legacy calling convention
(instructions return a new tile), lowered to the core's instructions; and the engine
selectors (`nisa.vector_engine`, ...).
"""

from __future__ import annotations

import numpy as np

from .. import errors
from ..core import alu as A
from ..core import engines as E
from ..core import instr as I
from ..core import ops
from ..core import tensor as T
from ..core.indexing import IndexExpr, is_int
from ..core.runtime import machine
from ..core.tensor import NkiTensor
from ..trace import (
    COPY,
    DMA,
    DMA_LOAD,
    DMA_STORE,
    GPSIMD,
    GPSIMD_ENGINE,
    HBM,
    MEMSET,
    MM,
    MM_TRANSPOSE,
    PSUM,
    RECIP,
    SBUF,
    SCALAR,
    TENSOR,
    VECTOR,
)

F32 = np.dtype(np.float32)


# --- engines -----------------------------------------------------------------------------------------

class Engine:
    """An engine selector (`nisa.vector_engine`, ...); `unknown_engine` lets the compiler choose."""

    __slots__ = ("name", "letters")

    def __init__(self, name: str, letters: tuple[str, ...]):
        self.name = name
        self.letters = letters

    def __repr__(self) -> str:
        return f"nki.isa.{self.name}"


unknown_engine = Engine("unknown_engine", ())
vector_engine = Engine("vector_engine", (VECTOR,))
scalar_engine = Engine("scalar_engine", (SCALAR,))
gpsimd_engine = Engine("gpsimd_engine", (GPSIMD_ENGINE,))
tensor_engine = Engine("tensor_engine", (TENSOR,))
activation_engine = scalar_engine
pool_engine = gpsimd_engine


def engine_letters(engine) -> tuple[str, ...]:
    """Trace engine letters of an explicit selector; () for none/unknown."""
    if engine is None:
        return ()
    if isinstance(engine, Engine):
        return engine.letters
    raise errors.OperandTypeError(f"engine must be one of nki.isa.*_engine, got {engine!r}")


# --- TensorE -------------------------------------------------------------------------------------------

def nc_matmul(stationary, moving, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, tile_position=(), tile_size=(), mask=None, **kwargs) -> NkiTensor:
    """stationary.T @ moving into a new PSUM fp32 tile (stationary [K, M], moving [K, N])."""
    line = I.where()
    kind = MM_TRANSPOSE if is_transpose else MM
    return E.matmul("nisa.nc_matmul", stationary, moving, mask, line, is_stationary_onezero, is_moving_onezero,
                   is_transpose, kind)


def nc_transpose(data, mask=None, dtype=None, engine=unknown_engine, **kwargs) -> NkiTensor:
    """Swap partition and free axes: on VectorE for tiles up to 32x32, else on TensorE (PSUM result)."""
    line = I.where()
    x = I.tile(data, "data", "nc_transpose")
    if len(x._shape) != 2:
        raise errors.MaxDimensionError(
            f"parameter 'data{list(x._shape)}' of 'nc_transpose' exceed max supported number of dimensions of 2")
    letters = engine_letters(engine)
    P, F = x._shape
    if letters == (VECTOR,) or (not letters and P <= 32 and F <= 32):
        if P > 32 or F > 32:
            raise errors.DimensionLimitError(
                f"VectorE nc_transpose supports tiles up to 32x32, got data{list(x._shape)}")
        dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
        return I.compute("nisa.nc_transpose", COPY, (VECTOR,), "transpose", [("data", x)], (F, P), dt, mask,
                         lambda a: a.T, line=line)
    return E.transpose_tensore("nisa.nc_transpose", x, line, dtype)


# --- ScalarE -----------------------------------------------------------------------------------------

def activation(op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, mask=None,
               dtype=None, **kwargs) -> NkiTensor:
    """op(data * scale + bias) on ScalarE; scale a float32 scalar or (P, 1) vector, bias a (P, 1) vector.
    With `reduce_res`, also add-reduces the result along the free axis into it."""
    line = I.where()
    func = ops.activation_name(op, "nisa.activation")
    res = E.activation("nisa.activation", func, data, bias, scale, mask, dtype, line)
    if reduce_res is not None:
        A.reduce_into(res, reduce_op, reduce_res, line)
    return res


def activation_reduce(op, data, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **kwargs):
    """activation() plus a free-axis reduction of the result into `reduce_res` (one instruction)."""
    line = I.where()
    func = ops.activation_name(op, "nisa.activation_reduce")
    res = E.activation("nisa.activation_reduce", func, data, bias, scale, mask, dtype, line)
    A.reduce_into(res, reduce_op, reduce_res, line)
    return res


# --- VectorE / any engine ----------------------------------------------------------------------------

def tensor_scalar(data, op0, operand0, reverse0: bool = False, op1=None, operand1=None, reverse1: bool = False,
                  dtype=None, mask=None, engine=unknown_engine, **kwargs) -> NkiTensor:
    """(data op0 operand0) op1 operand1, operands scalars or (P, 1) vectors; reverse swaps sides."""
    return A.tensor_scalar("nisa.tensor_scalar", data, op0, operand0, reverse0, op1, operand1, reverse1, dtype, mask,
                           engine_letters(engine), I.where())


def tensor_tensor(data1, data2, op, dtype=None, mask=None, engine=unknown_engine, **kwargs) -> NkiTensor:
    """data1 op data2 element-wise (same partitions and free sizes; not both in PSUM)."""
    return A.tensor_tensor("nisa.tensor_tensor", data1, data2, op, dtype, mask, engine_letters(engine), I.where())


def scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0: bool = False, reverse1: bool = False,
                         dtype=None, mask=None, **kwargs) -> NkiTensor:
    """(data op0 operand0) op1 operand1 where operand0 is a scalar/(P, 1) vector and operand1 a tile."""
    return A.scalar_tensor_tensor("nisa.scalar_tensor_tensor", data, op0, operand0, op1, operand1, reverse0, reverse1,
                                  dtype, mask, I.where())


def tensor_reduce(op, data, axis, mask=None, dtype=None, negate: bool = False, keepdims: bool = False,
                  **kwargs) -> NkiTensor:
    """Reduce along free axes with an ALU op (VectorE); `negate` multiplies the result by -1."""
    line = I.where()
    name = ops.reduce_name(op, "nisa.tensor_reduce")
    if negate and name not in ops.ARITHMETIC:
        raise errors.UnsupportedOpError(
            f"negate option can only be used with arithmetic ops, unsupported op={name}")
    return E.reduce("nisa.tensor_reduce", name, data, axis, dtype, mask, keepdims, line, negate)


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0: bool = False, reverse1: bool = False,
                       dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Per partition: out[:, i] = op1(op0(data0[:, i], out[:, i-1]), data1[:, i]), out[:, -1] = initial."""
    return A.tensor_tensor_scan("nisa.tensor_tensor_scan", data0, data1, initial, op0, op1, reverse0, reverse1, dtype,
                                mask, I.where())


def reciprocal(data, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """1 / data on VectorE."""
    line = I.where()
    x = I.tile(data, "data", "reciprocal")
    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    return I.compute("nisa.reciprocal", RECIP, (VECTOR,), "reciprocal", [("data", x)], x._shape, dt, mask,
                     lambda a: np.float32(1.0) / a, line=line)


def memset(shape, value, dtype, mask=None, engine=unknown_engine, **kwargs) -> NkiTensor:
    """A new SBUF tile of `shape` (first dim = partitions) filled with `value`."""
    line = I.where()
    shape = tuple(int(n) for n in shape)
    dt = I.normalize_dtype(dtype)
    val = np.asarray(value).astype(dt)
    engines = engine_letters(engine) or (VECTOR, GPSIMD_ENGINE)
    return I.compute("nisa.memset", MEMSET, engines, "", [], shape, dt, mask, lambda: val, line=line)


def iota(expr, dtype, mask=None, **kwargs) -> NkiTensor:
    """A new SBUF tile holding the values of an index expression (GpSimd)."""
    line = I.where()
    dt = I.normalize_dtype(dtype)
    if is_int(expr):
        arr_fn, shape = (lambda: np.full((1, 1), int(expr))), (1, 1)
    elif isinstance(expr, IndexExpr):
        if len(expr.shape) < 2:
            raise errors.OneDimArangeError("nisa.iota with 1d arange is not supported; add an axis with [:, None]")
        shape = expr.shape
        arr_fn = expr.to_array
    else:
        raise errors.OperandTypeError(f"nisa.iota takes an nl.arange expression, got {type(expr).__name__}")
    return I.compute("nisa.iota", GPSIMD, (GPSIMD_ENGINE,), "iota", [], shape, dt, mask, lambda: arr_fn(), line=line)


def tensor_copy(src, mask=None, dtype=None, engine=unknown_engine, **kwargs) -> NkiTensor:
    """A copy of a tile (Vector, Scalar or GpSimd engine)."""
    line = I.where()
    x = I.tile(src, "src", "tensor_copy")
    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    engines = engine_letters(engine) or (VECTOR, SCALAR)
    if GPSIMD_ENGINE in engines and x._b.memory == PSUM:
        raise errors.UnsupportedMemoryError("GpSimd engine cannot access PSUM (operand 'src' of 'tensor_copy')")
    return I.compute("nisa.tensor_copy", COPY, engines, "copy", [("src", x)], x._shape, dt, mask, lambda a: a, line=line)


def dma_copy(dst, src, mask=None, **kwargs) -> None:
    """DMA between any two memories except PSUM."""
    m = machine()
    line = I.where()
    d = I.tile(dst, "dst", "dma_copy", (HBM, SBUF))
    s = I.tile(src, "src", "dma_copy", (HBM, SBUF))
    if d._b.memory == HBM:
        I.immutable_check(d)
    d2, s2 = T.as_tile_shape(d), T.as_tile_shape(s)
    I.check_assign_shape(d2, s2._shape, "operand 'src' of 'dma_copy'")
    shape = d2._shape
    box, wh = I.active(mask, shape)
    dv, sv = I.use(d2, box, shape, wh), I.use(s2, box, shape, wh)
    m.note_write(d._b, T.region(dv).box)
    if not m.shape_only and 0 not in dv._shape:
        T.write(dv, T.array(sv), wh)
    if 0 not in dv._shape:
        T.mark_written(dv, wh)
    n = T.count(dv) if wh is None else int(wh.sum())
    dma = I.dma_info(dv, sv, n, dv._shape[0])
    kind = DMA_STORE if d._b.memory == HBM else DMA_LOAD
    s_ = dv._shape
    m.emit(kind, "nisa.dma_copy", (DMA,), d._b.dtname, (s._b.dtname,), s_[0], T.prod(s_[1:]),
           (T.region(sv),), (T.region(dv),), line, "", None, dma, 0, False)


EXPORTS = [
    "nc_matmul", "nc_transpose", "activation", "activation_reduce", "tensor_scalar", "tensor_tensor",
    "scalar_tensor_tensor", "tensor_reduce", "tensor_tensor_scan", "reciprocal", "memset", "iota",
    "tensor_copy", "dma_copy",
    "unknown_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "tensor_engine",
    "activation_engine", "pool_engine",
]
