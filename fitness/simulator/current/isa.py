"""`nki.isa` (nisa) of the current dialect: single hardware instructions in the
destination-first convention (`nisa.activation(dst, op, data, ...)` writes `dst` and
returns nothing), lowered to the core's instructions with the same trace records as their
legacy counterparts; engines are `nisa.engine` members.

Each instruction computes its result in fp32 and casts it to `dst.dtype`. `nc_matmul`
accumulation: `accumulate=True` adds to what `dst` holds, `False` overwrites, and `None`
(the default) overwrites the PSUM locations no instruction wrote yet and adds elsewhere;
the written state of every PSUM location is tracked per kernel run.
"""

from __future__ import annotations

import enum
import weakref

import numpy as np

from .. import errors
from ..core import alu as A
from ..core import engines as E
from ..core import instr as I
from ..core import ops
from ..core import tensor as T
from ..core.runtime import machine
from ..core.tensor import NkiTensor
from ..trace import (
    COPY,
    DMA,
    DMA_LOAD,
    DMA_STORE,
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


class engine(enum.Enum):
    """Neuron Device engines (`nisa.engine.vector`, ...)."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


Engine = engine   # (instruction parameters named `engine` hide the class)

_LETTERS = {engine.unknown: (), engine.tensor: (TENSOR,), engine.scalar: (SCALAR,), engine.gpsimd: (GPSIMD_ENGINE,),
            engine.vector: (VECTOR,), engine.dma: (DMA,), engine.sync: (DMA,)}

tensor_engine, vector_engine, scalar_engine = engine.tensor, engine.vector, engine.scalar
gpsimd_engine, unknown_engine = engine.gpsimd, engine.unknown


def engine_letters(eng, api: str, allowed: tuple[engine, ...]) -> tuple[str, ...]:
    """Trace engine letters of an `nisa.engine` choice for `api` (() for unknown)."""
    if not isinstance(eng, engine):
        raise errors.EngineError(
            f"engine of '{api}' must be an nisa.engine member (nisa.engine.vector, ...), got {eng!r}")
    if eng is not engine.unknown and eng not in allowed:
        raise errors.EngineError(
            f"'{api}' cannot run on nisa.engine.{eng.name}; use one of "
            f"{', '.join('nisa.engine.' + e.name for e in allowed)}")
    return _LETTERS[eng]


# --- destinations ----------------------------------------------------------------------------------

def dst_tile(dst, api: str, memories=(SBUF, PSUM)) -> NkiTensor:
    """The `dst` operand: a tensor in one of `memories` (a missing one is the legacy convention)."""
    if dst is None:
        raise errors.LegacyConstructError(
            f"'{api}' needs a destination: current nisa instructions write `dst` and return nothing, e.g. "
            f"{api}(dst=out_tile, ...) where out_tile = nl.ndarray(shape, dtype, buffer=nl.sbuf)")
    if not isinstance(dst, NkiTensor):
        raise errors.LegacyConstructError(
            f"the first operand of '{api}' is its destination (a tensor from nl.ndarray), got "
            f"{type(dst).__name__}; current nisa instructions write `dst` and return nothing: {api}(dst=out, ...)")
    if dst._b.memory not in memories:
        hint = "; write HBM with nisa.dma_copy" if dst._b.memory == HBM else ""
        raise errors.UnsupportedMemoryError(
            f"Expected operand 'dst' of '{api}' to be in address space '{'|'.join(memories)}', but got a tensor in "
            f"'{dst._b.memory}' instead{hint}")
    return dst


def fit(dst: NkiTensor, shape: tuple[int, ...], api: str) -> NkiTensor:
    """`dst` seen with the result `shape`: equal shapes, or the same partitions and elements
    per partition through a contiguous view."""
    if dst._shape == shape:
        return dst
    if dst._shape[0] != shape[0] or T.prod(dst._shape[1:]) != T.prod(shape[1:]):
        raise errors.ShapeMismatchError(
            f"destination shape {list(dst._shape)} of '{api}' does not match the shape of its result {list(shape)} "
            f"(the partition count and the elements per partition must agree)")
    return dst.reshape(shape)


def into(api: str, dst: NkiTensor, res: NkiTensor, line: int) -> None:
    """Write instruction result `res` (a fresh tile) into `dst`: the instruction writes `dst`."""
    d = fit(dst, res._shape, api)
    I.assign(d, res, line)
    if d._b.memory == PSUM:
        _written(d)[...] = True


def _written(v: NkiTensor) -> np.ndarray:
    """Per element of PSUM view `v`: has an instruction written it in this run?"""
    m = machine()
    table = m.state.get("psum_written")
    if table is None:
        table = m.state["psum_written"] = weakref.WeakKeyDictionary()
    b = v._b
    blocks = table.get(b)
    if blocks is None:
        blocks = table[b] = {}
    w = blocks.get(v._key)
    if w is None:
        w = blocks[v._key] = np.zeros(T.prod(b.local), dtype=bool)
    return np.ndarray(v._shape, dtype=bool, buffer=w, offset=v._off, strides=v._st)


# --- TensorE ------------------------------------------------------------------------------------------

def nc_matmul(dst=None, stationary=None, moving=None, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(), perf_mode=None, name=None,
              **kwargs) -> None:
    """dst (PSUM) = stationary.T @ moving (stationary [K, M], moving [K, N]); see the module
    docstring for `accumulate`."""
    line = I.where()
    api = "nisa.nc_matmul"
    _no_legacy_kwargs(api, kwargs)
    d = dst_tile(dst, api, (PSUM,))
    if tile_position or tile_size:
        raise errors.UnsupportedApiError("nisa.nc_matmul tile_position / tile_size (TensorE tiling) is not supported "
                                         "by the emulator")
    kind = MM_TRANSPOSE if is_transpose else MM
    res = E.matmul(api, stationary, moving, None, line, is_stationary_onezero, is_moving_onezero, is_transpose, kind)
    d = fit(d, res._shape, api)
    if accumulate is None:
        seen = _written(d)
        add = seen.copy() if seen.any() else False
    else:
        add = bool(accumulate)
    if add is False:
        into(api, d, res, line)
        return
    I.accumulate_into(machine(), d, res, add)
    _written(d)[...] = True


def nc_transpose(dst=None, data=None, engine=engine.unknown, name=None, **kwargs) -> None:
    """dst = data with partition and free axes swapped: VectorE for tiles up to 32x32, else
    TensorE through the identity matrix (into PSUM)."""
    line = I.where()
    api = "nisa.nc_transpose"
    _no_legacy_kwargs(api, kwargs)
    d = dst_tile(dst, api)
    letters = engine_letters(engine, api, (Engine.vector, Engine.tensor))
    x = I.tile(data, "data", api)
    if len(x._shape) != 2:
        raise errors.MaxDimensionError(f"parameter 'data{list(x._shape)}' of '{api}' must be 2-D")
    P, F = x._shape
    if letters == (VECTOR,) or (not letters and P <= 32 and F <= 32 and d._b.memory == SBUF):
        if P > 32 or F > 32:
            raise errors.DimensionLimitError(f"VectorE nc_transpose supports tiles up to 32x32, got data{list(x._shape)}")
        res = I.compute(api, COPY, (VECTOR,), "transpose", [("data", x)], (F, P), d._b.dtype, None,
                        lambda a: a.T, line=line)
    else:
        if d._b.memory != PSUM:
            raise errors.UnsupportedMemoryError(f"'dst' of TensorE '{api}' must be in PSUM")
        res = E.transpose_tensore(api, x, line)
    into(api, d, res, line)


# --- ScalarE -----------------------------------------------------------------------------------------

def activation(dst=None, op=None, data=None, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=None, name=None, **kwargs) -> None:
    """dst = op(data * scale + bias) on ScalarE; with `reduce_res`, also reduce the result
    along the free axes into it."""
    line = I.where()
    api = "nisa.activation"
    _no_legacy_kwargs(api, kwargs)
    d = dst_tile(dst, api)
    func = ops.activation_name(op, api)
    res = E.activation(api, func, data, bias, scale, None, d._b.dtype, line)
    if reduce_res is not None:
        A.reduce_into(res, reduce_op, reduce_res, line)
    into(api, d, res, line)


def activation_reduce(dst=None, op=None, data=None, reduce_op=None, reduce_res=None, bias=None, scale=1.0,
                      name=None, **kwargs) -> None:
    """activation() plus a free-axis reduction of the result into `reduce_res`."""
    activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res, **kwargs)


# --- VectorE / GpSimd -----------------------------------------------------------------------------

_VSG = (Engine.vector, Engine.scalar, Engine.gpsimd)


def tensor_scalar(dst=None, data=None, op0=None, operand0=None, reverse0=False, op1=None, operand1=None,
                  reverse1=False, engine=engine.unknown, name=None, **kwargs) -> None:
    """dst = (data op0 operand0) op1 operand1; operands scalars or (P, 1) vectors."""
    line = I.where()
    api = "nisa.tensor_scalar"
    _no_legacy_kwargs(api, kwargs)
    d = dst_tile(dst, api)
    res = A.tensor_scalar(api, data, op0, operand0, reverse0, op1, operand1, reverse1, d._b.dtype, None,
                          engine_letters(engine, api, _VSG), line)
    into(api, d, res, line)


def tensor_tensor(dst=None, data1=None, data2=None, op=None, engine=engine.unknown, name=None, **kwargs) -> None:
    """dst = data1 op data2, element-wise."""
    line = I.where()
    api = "nisa.tensor_tensor"
    _no_legacy_kwargs(api, kwargs)
    d = dst_tile(dst, api)
    res = A.tensor_tensor(api, data1, data2, op, d._b.dtype, None,
                          engine_letters(engine, api, (Engine.vector, Engine.gpsimd)), line)
    into(api, d, res, line)


def scalar_tensor_tensor(dst=None, data=None, op0=None, operand0=None, op1=None, operand1=None, reverse0=False,
                         reverse1=False, name=None, **kwargs) -> None:
    """dst = (data op0 operand0) op1 operand1; operand0 a scalar or (P, 1) vector, operand1 a tile."""
    line = I.where()
    api = "nisa.scalar_tensor_tensor"
    _no_legacy_kwargs(api, kwargs)
    d = dst_tile(dst, api)
    res = A.scalar_tensor_tensor(api, data, op0, operand0, op1, operand1, reverse0, reverse1, d._b.dtype, None, line)
    into(api, d, res, line)


def tensor_tensor_scan(dst=None, data0=None, data1=None, initial=None, op0=None, op1=None, reverse0=False,
                       reverse1=False, name=None, **kwargs) -> None:
    """Per partition: dst[:, i] = op1(op0(data0[:, i], dst[:, i-1]), data1[:, i]), starting from `initial`."""
    line = I.where()
    api = "nisa.tensor_tensor_scan"
    _no_legacy_kwargs(api, kwargs)
    d = dst_tile(dst, api)
    res = A.tensor_tensor_scan(api, data0, data1, initial, op0, op1, reverse0, reverse1, d._b.dtype, None, line)
    into(api, d, res, line)


def tensor_reduce(dst=None, op=None, data=None, axis=None, negate=False, keepdims=False, name=None,
                  **kwargs) -> None:
    """dst = reduction of data along free axes with an ALU op (VectorE)."""
    line = I.where()
    api = "nisa.tensor_reduce"
    _no_legacy_kwargs(api, kwargs)
    d = dst_tile(dst, api)
    opname = ops.reduce_name(op, api)
    if negate and opname not in ops.ARITHMETIC:
        raise errors.UnsupportedOpError(f"negate option can only be used with arithmetic ops, unsupported op={opname}")
    res = E.reduce(api, opname, data, axis, d._b.dtype, None, keepdims, line, negate)
    into(api, d, res, line)


def reciprocal(dst=None, data=None, name=None, **kwargs) -> None:
    """dst = 1 / data (VectorE)."""
    line = I.where()
    api = "nisa.reciprocal"
    d = dst_tile(dst, api)
    x = I.tile(data, "data", api)
    res = I.compute(api, RECIP, (VECTOR,), "reciprocal", [("data", x)], x._shape, d._b.dtype, None,
                    lambda a: np.float32(1.0) / a, line=line)
    into(api, d, res, line)


def tensor_copy(dst=None, src=None, engine=engine.unknown, name=None, **kwargs) -> None:
    """dst = src on Vector, Scalar or GpSimd engine (a cast when the dtypes differ)."""
    line = I.where()
    api = "nisa.tensor_copy"
    _no_legacy_kwargs(api, kwargs)
    d = dst_tile(dst, api)
    x = I.tile(src, "src", api)
    letters = engine_letters(engine, api, _VSG) or (VECTOR, SCALAR)
    if GPSIMD_ENGINE in letters and PSUM in (x._b.memory, d._b.memory):
        raise errors.EngineError(f"'{api}' on nisa.engine.gpsimd cannot access PSUM; use the vector or scalar engine")
    res = I.compute(api, COPY, letters, "copy", [("src", x)], x._shape, d._b.dtype, None, lambda a: a, line=line)
    into(api, d, res, line)


def memset(dst=None, value=None, engine=engine.unknown, name=None, **kwargs) -> None:
    """Fill `dst` with a constant (Vector or GpSimd engine)."""
    fill(dst, value, "nisa.memset", I.where(), engine)


def fill(dst, value, api: str, line: int, eng=Engine.unknown) -> None:
    """A memset of `dst` recorded as `api` (nisa.memset, nl.zeros, ...)."""
    _no_legacy_kwargs(api, {})
    d = dst_tile(dst, api)
    if not I.is_scalar(value):
        raise errors.OperandTypeError(f"'value' of '{api}' must be a constant scalar, got {type(value).__name__}")
    letters = engine_letters(eng, api, (Engine.vector, Engine.gpsimd))
    letters = letters or ((VECTOR,) if d._b.memory == PSUM else (VECTOR, GPSIMD_ENGINE))
    val = np.asarray(value).astype(d._b.dtype)
    res = I.compute(api, MEMSET, letters, "", [], d._shape, d._b.dtype, None, lambda: val, line=line)
    into(api, d, res, line)


def iota(dst=None, expr=None, name=None, **kwargs) -> None:
    """Refused: the current iota takes an access-pattern expression the emulator does not model."""
    raise errors.UnsupportedApiError("nisa.iota is not supported by the emulator for the current NKI")


# --- DMA ---------------------------------------------------------------------------------------------

def dma_copy(dst=None, src=None, priority=None, oob_mode=None, dge_mode=None, engine=None, name=None,
             **kwargs) -> None:
    """dst = src by DMA between HBM and SBUF (either way, or within one); the element counts
    must agree (the shapes may differ); the values are converted to dst.dtype."""
    copy_by_dma("nisa.dma_copy", dst, src, I.where(), kwargs)


def copy_by_dma(api: str, dst, src, line: int, kwargs=None) -> None:
    """A DMA transfer recorded as `api` (nisa.dma_copy, nl.store)."""
    _no_legacy_kwargs(api, kwargs or {})
    m = machine()
    for what, x in (("dst", dst), ("src", src)):
        if isinstance(x, NkiTensor) and x._b.memory == PSUM:
            raise errors.UnsupportedMemoryError(
                f"'{what}' of '{api}' is in PSUM, which DMA cannot access; copy between PSUM and SBUF with "
                f"nisa.tensor_copy")
    d = I.tile(dst, "dst", api, (HBM, SBUF))
    s = I.tile(src, "src", api, (HBM, SBUF))
    if T.prod(d._shape) != T.prod(s._shape):
        raise errors.ShapeMismatchError(
            f"'{api}' copies {T.prod(s._shape)} elements (src{list(s._shape)}) into {T.prod(d._shape)} "
            f"(dst{list(d._shape)}); the element counts must agree")
    d2, s2 = T.as_tile_shape(d), T.as_tile_shape(s)
    if not m.shape_only and T.prod(d._shape):
        T.write(d2, T.array(s2).reshape(d2._shape))
    if T.prod(d._shape):
        T.mark_written(d2)
    n = T.prod(d._shape)
    onchip = d2 if d._b.memory == SBUF else s2
    p = onchip._shape[0]
    dma = I.dma_info(d2, s2, n, p)
    kind = DMA_STORE if d._b.memory == HBM else DMA_LOAD
    m.emit(kind, api, (DMA,), d._b.dtname, (s._b.dtname,), p, n // p if p else 0,
           (T.region(s2),), (T.region(d2),), line, "", None, dma, 0, False)


def _no_legacy_kwargs(api: str, kwargs: dict) -> None:
    """Legacy-only keyword arguments (mask=, dtype=) name the current way."""
    if "mask" in kwargs:
        raise errors.LegacyConstructError(
            f"'{api}' has no mask= in the current NKI; restrict the operands with (clipped) slices instead")
    if "dtype" in kwargs:
        raise errors.LegacyConstructError(
            f"'{api}' has no dtype= in the current NKI; the result takes the dtype of `dst`")
    if kwargs:
        raise TypeError(f"{api}() got unexpected keyword arguments {sorted(kwargs)}")


EXPORTS = [
    "engine", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "unknown_engine",
    "nc_matmul", "nc_transpose", "activation", "activation_reduce", "tensor_scalar", "tensor_tensor",
    "scalar_tensor_tensor", "tensor_tensor_scan", "tensor_reduce", "reciprocal", "tensor_copy", "memset", "iota",
    "dma_copy",
]
