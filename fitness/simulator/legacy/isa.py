"""`neuronxcc.nki.isa` (nisa): single hardware instructions — TensorE matmul/transpose,
ScalarE activation, VectorE tensor_scalar / tensor_tensor / reduce / scan / reciprocal,
memset, iota and copies (nki-semantics.md §6.5-6.6) — in the legacy calling convention
(instructions return a new tile; the few documented with a `dst` write it in place), lowered
to the core's instructions; the VectorE/GpSimd instructions beyond the ALU ones
(bn_stats, max8, select_reduce, affine_select, local_gather, ...: core.vector, core.gpsimd),
dropout (core.rng), dma_transpose (core.dmaops); and the engine selectors
(`nisa.vector_engine`, `nisa.engine.vector`, ...).
"""

from __future__ import annotations

import enum

import numpy as np

from .. import errors
from ..core import alu as A
from ..core import dmaops as D
from ..core import engines as E
from ..core import gpsimd as G
from ..core import instr as I
from ..core import ops
from ..core import rng as RNG
from ..core import tensor as T
from ..core import vector as V
from ..core.indexing import IndexExpr, Mask, check_mask, is_int, mask_array
from ..core.runtime import machine
from ..core.tensor import NkiTensor
from ..emulation import APPROXIMATE, EXACT, emulation
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


class engine(enum.IntEnum):
    """`nisa.engine`: the NeuronCore's engines, by their documented numbers (an instruction's
    `engine=` takes these or the `nisa.*_engine` selectors)."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    vector = 5
    sync = 6


EngineId = engine   # (instruction parameters named `engine` hide the class)

emulation(EXACT, "the documented members; an instruction's engine= accepts them like the nisa.*_engine selectors "
                 "(sync, which runs no compute instruction, is refused where an engine computes)")(engine)

_ENGINE_LETTERS = {engine.unknown: (), engine.tensor: (TENSOR,), engine.scalar: (SCALAR,),
                   engine.gpsimd: (GPSIMD_ENGINE,), engine.vector: (VECTOR,)}


def engine_letters(engine) -> tuple[str, ...]:
    """Trace engine letters of an explicit selector (`nisa.vector_engine` or `nisa.engine.vector`);
    () for none/unknown."""
    if engine is None:
        return ()
    if isinstance(engine, Engine):
        return engine.letters
    if isinstance(engine, EngineId):
        if engine not in _ENGINE_LETTERS:
            raise errors.OperandTypeError(f"nki.isa.engine.{engine.name} runs no compute instruction; pass "
                                          f"engine=nisa.vector_engine, scalar_engine or gpsimd_engine")
        return _ENGINE_LETTERS[engine]
    raise errors.OperandTypeError(f"engine must be one of nki.isa.*_engine or nki.isa.engine.*, got {engine!r}")


class dge_mode(enum.IntEnum):
    """`nisa.dge_mode`: which descriptor-generation engine a DMA uses."""

    none = 0      # no DGE
    swdge = 1     # software DGE
    hwdge = 2     # hardware DGE (NeuronCore-v3+)
    unknown = 3   # the compiler chooses


DgeMode = dge_mode   # (dma_transpose's parameter of that name hides the class)

emulation(EXACT, "the documented members; dma_transpose checks the hardware-DGE constraints, the performance model "
                 "prices every mode alike")(dge_mode)


class nc_version(enum.IntEnum):
    """`nisa.nc_version`: the NeuronCore generation of the target."""

    gen2 = 2   # Trn1/Inf2
    gen3 = 3   # Trn2


emulation(EXACT, "the documented members")(nc_version)


@emulation(APPROXIMATE, "the emulator has no target: gen2 (trn1, whose tile limits nl.tile_size gives in this "
                        "dialect), whatever target the performance model prices")
def get_nc_version() -> nc_version:
    """The NeuronCore version of the target (the emulator's: gen2)."""
    machine()
    return nc_version.gen2


class _Fp32:
    """`nisa.fp32` / `nl.fp32`: FP32 constants (`.min`, the most negative finite float32)."""

    __slots__ = ()
    min = V.FP32_MIN

    def __repr__(self) -> str:
        return "nki.language.fp32"


fp32 = _Fp32()


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

class reduce_cmd(enum.IntEnum):
    """`nisa.reduce_cmd`: what an instruction does with its engine's accumulator registers."""

    idle = A.IDLE                   # not using the accumulator registers
    reset = A.RESET                 # reset them to their initial state (zero)
    reduce = A.REDUCE               # keep accumulating over their current values
    reset_reduce = A.RESET_REDUCE   # reset them, then accumulate this instruction's results


def _reduce_cmd(cmd, api: str) -> int:
    if isinstance(cmd, bool) or not isinstance(cmd, (int, np.integer)) or int(cmd) not in A.CMD_NAMES:
        raise errors.OperandTypeError(f"'reduce_cmd' of '{api}' must be a member of nisa.reduce_cmd, got {cmd!r}")
    return int(cmd)


def activation(op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               mask=None, dtype=None, **kwargs) -> NkiTensor:
    """op(data * scale + bias) on ScalarE; scale a float32 scalar or (P, 1) vector, bias a (P, 1) vector.
    `reduce_cmd` drives ScalarE's accumulator registers (reset, accumulate `reduce_op` of the
    result along the free axes, both, or idle: the default); `reduce_res`, if given, receives
    the registers' values after the instruction (core.alu.activation_accumulate)."""
    line = I.where()
    cmd = _reduce_cmd(reduce_cmd, "nisa.activation")
    func = ops.activation_name(op, "nisa.activation")
    res = E.activation("nisa.activation", func, data, bias, scale, mask, dtype, line)
    if reduce_res is not None or cmd != A.IDLE:
        A.activation_accumulate(res, reduce_op, reduce_res, cmd, line)
    return res


def activation_reduce(op, data, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **kwargs):
    """activation() plus a free-axis reduction of the result into `reduce_res` (one instruction):
    "equivalent to calling nisa.activation with reduce_cmd=nisa.reduce_cmd.reset_reduce and
    passing in reduce_res" (it leaves the registers holding the reduction)."""
    line = I.where()
    func = ops.activation_name(op, "nisa.activation_reduce")
    res = E.activation("nisa.activation_reduce", func, data, bias, scale, mask, dtype, line)
    f = res._b.fresh
    if f.box is not None or f.where is not None:   # (registers of masked instructions: not documented)
        A.reduce_into(res, reduce_op, reduce_res, line, "nisa.activation_reduce")
    else:
        A.activation_accumulate(res, np.add if reduce_op is None else reduce_op, reduce_res, A.RESET_REDUCE, line,
                                "nisa.activation_reduce")
    return res


# --- VectorE / any engine ----------------------------------------------------------------------------

def tensor_scalar(data, op0, operand0, reverse0: bool = False, op1=None, operand1=None, reverse1: bool = False,
                  dtype=None, mask=None, engine=unknown_engine, **kwargs) -> NkiTensor:
    """(data op0 operand0) op1 operand1, operands scalars or (P, 1) vectors; reverse swaps sides."""
    return A.tensor_scalar("nisa.tensor_scalar", data, op0, operand0, reverse0, op1, operand1, reverse1, dtype, mask,
                           engine_letters(engine), I.where())


def tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, reverse0: bool = False, dtype=None, mask=None,
                         **kwargs) -> NkiTensor:
    """data op0 operand0 on VectorE (one arithmetic operator), and reduce_op of that result along
    all its free axes into `reduce_res` (P, 1), in one instruction."""
    return A.tensor_scalar_reduce("nisa.tensor_scalar_reduce", data, op0, operand0, reverse0, reduce_op, reduce_res,
                                  dtype, mask, I.where())


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


def _copy_engines(engine, api: str) -> tuple[str, ...]:
    """The engines a copy may run on: Vector, Scalar or GpSimd (the compiler's choice: Vector or
    Scalar)."""
    engines = engine_letters(engine) or (VECTOR, SCALAR)
    if TENSOR in engines:
        raise errors.OperandTypeError(f"'{api}' runs on the Vector, Scalar or GpSimd engine, not on TensorE")
    return engines


def tensor_copy(src, mask=None, dtype=None, engine=unknown_engine, **kwargs) -> NkiTensor:
    """A copy of a tile (Vector, Scalar or GpSimd engine)."""
    line = I.where()
    x = I.tile(src, "src", "tensor_copy")
    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    engines = _copy_engines(engine, "nisa.tensor_copy")
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


# --- VectorE: statistics, top-8, selections, shuffle --------------------------------------------------

def _dst(dst, api: str) -> NkiTensor:
    """The in-place destination of a legacy instruction (an SBUF/PSUM tile)."""
    d = I.tile(dst, "dst", api)
    I.check_dst(d, api)
    return d


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); priced as a "
                        "VectorE tensor_reduce over data's elements per partition")
def bn_stats(data, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """Per partition (count, mean, variance * count) of the even- and of the odd-indexed elements
    of data (VectorE; at most 512 elements per partition): a (P, 6) tile."""
    return V.bn_stats("nisa.bn_stats", data, dtype, mask, I.where())


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); priced as a "
                        "VectorE tensor_reduce over data's elements per partition")
def bn_aggr(data, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """Per partition (mean, variance) of the elements that data's bn_stats triples describe:
    a (P, 2) tile (VectorE)."""
    return V.bn_aggr("nisa.bn_aggr", data, dtype, mask, I.where())


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); priced as a "
                        "VectorE tensor_reduce over src's elements per partition")
def max8(src=None, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """The 8 largest values of each partition of src, descending (VectorE; 8 to 16384 elements)."""
    return V.max8("nisa.max8", src, dtype, mask, I.where())


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); a value not "
                        "found gives the all-ones index (the device: undefined); priced as a VectorE tensor_reduce over"
                        " data's elements per partition")
def nc_find_index8(data=None, vals=None, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """Per partition, the index of the first occurrence of each of the 8 values of vals in data
    (VectorE; uint32 indices unless dtype says uint16)."""
    return V.find_index8("nisa.nc_find_index8", data, vals, dtype, mask, I.where())


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); priced as a "
                        "VectorE tensor_reduce over data's elements per partition")
def nc_match_replace8(data=None, vals=None, imm=None, dst_idx=None, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """data with the first occurrence of each of the 8 values of vals (per partition) replaced by
    imm (VectorE); the matched indices go into dst_idx if given."""
    return V.match_replace8("nisa.nc_match_replace8", data, vals, imm, dst_idx, dtype, mask, I.where())


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); priced as a "
                        "VectorE tensor_tensor over dst")
def tensor_copy_predicated(src=None, dst=None, predicate=None, reverse_pred: bool = False, mask=None, dtype=None,
                           **kwargs) -> None:
    """dst = src where predicate is nonzero (zero with reverse_pred), dst unchanged elsewhere;
    src a tile or a scalar (VectorE)."""
    api = "nisa.tensor_copy_predicated"
    line = I.where()
    d = _dst(dst, api)
    V.refuse_mask(mask, d._shape, api, "what a mask does to the predicated copy is not documented")
    V.copy_predicated(api, d, src, predicate, bool(reverse_pred), line)


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); priced as a "
                        "VectorE tensor_tensor over dst (plus the reduce_res read-out)")
def select_reduce(dst=None, predicate=None, on_true=None, on_false=None, reduce_res=None,
                  reduce_cmd=reduce_cmd.idle, reduce_op=np.amax, reverse_pred: bool = False, mask=None, dtype=None,
                  **kwargs) -> None:
    """dst = on_true where predicate else on_false (a scalar or (P, 1) vector), the max of each
    partition of the result reduced into VectorE's accumulator registers as reduce_cmd says
    (reduce_res receives them)."""
    api = "nisa.select_reduce"
    line = I.where()
    d = _dst(dst, api)
    cmd = V.reduce_command(reduce_cmd, api, (V.IDLE, V.REDUCE, V.RESET_REDUCE))
    V.select_reduce(api, d, predicate, on_true, on_false, reduce_res, cmd, reduce_op, bool(reverse_pred), dtype,
                    mask, line)


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); priced as a "
                        "VectorE tensor_scalar over on_true_tile (plus the reduce_res read-out)")
def range_select(on_true_tile=None, comp_op0=None, comp_op1=None, bound0=None, bound1=None,
                 reduce_cmd=reduce_cmd.idle, reduce_res=None, reduce_op=np.amax, range_start=0,
                 on_false_value=fp32.min, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """on_true_tile where comp_op0(range_start + i, bound0) and comp_op1(range_start + i, bound1)
    (i the flattened free index) else fp32.min, the max of each partition reduced into VectorE's
    accumulator registers as reduce_cmd says (VectorE)."""
    api = "nisa.range_select"
    cmd = V.reduce_command(reduce_cmd, api, (V.IDLE, V.REDUCE, V.RESET_REDUCE))
    return V.range_select(api, on_true_tile, comp_op0, comp_op1, bound0, bound1, cmd, reduce_res, reduce_op,
                          range_start, on_false_value, dtype, mask, I.where())


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); priced as a "
                        "VectorE tensor_copy over dst")
def nc_stream_shuffle(src, dst, shuffle_mask, dtype=None, mask=None, **kwargs) -> None:
    """Within each 32-partition quadrant, dst partition i = src partition shuffle_mask[i] (255:
    unchanged), the same mask for every quadrant (VectorE)."""
    api = "nisa.nc_stream_shuffle"
    line = I.where()
    d = _dst(dst, api)
    V.refuse_mask(mask, d._shape, api, "which elements a mask leaves unmodified is not modelled")
    if dtype is not None and I.normalize_dtype(dtype) != d._b.dtype:
        raise errors.UnsupportedDtypeError(f"'dst' of '{api}' has the data type of 'src' ({d._b.dtname}); it cannot "
                                           f"be cast to '{T.dtype_name(I.normalize_dtype(dtype))}'")
    V.stream_shuffle(api, src, d, [getattr(k, "value", k) for k in shuffle_mask], line)


# --- copies at dynamic offsets -------------------------------------------------------------------------

_DYNAMIC = ("the dynamic offset is the one the kernel's subscript of the tile holds (the emulator resolves it as the "
            "kernel runs); priced as nisa.tensor_copy on the chosen engine, without the documented ~600-cycle "
            "minimum initiation interval of dynamically addressed instructions")


@emulation(APPROXIMATE, _DYNAMIC)
def tensor_copy_dynamic_src(src, mask=None, dtype=None, engine=unknown_engine, **kwargs) -> NkiTensor:
    """A copy of src, a tile at a dynamic offset within each partition (Vector, Scalar or GpSimd)."""
    line = I.where()
    api = "nisa.tensor_copy_dynamic_src"
    x = I.tile(src, "src", api)
    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    engines = _copy_engines(engine, api)
    if GPSIMD_ENGINE in engines and x._b.memory == PSUM:
        raise errors.UnsupportedMemoryError(f"GpSimd engine cannot access PSUM (operand 'src' of '{api}')")
    return I.compute(api, COPY, engines, "copy", [("src", x)], x._shape, dt, mask, lambda a: a, line=line)


@emulation(APPROXIMATE, _DYNAMIC)
def tensor_copy_dynamic_dst(dst=None, src=None, mask=None, dtype=None, engine=unknown_engine, **kwargs) -> None:
    """dst (a tile at a dynamic offset within each partition) = src: same partitions and
    elements per partition (Vector, Scalar or GpSimd)."""
    line = I.where()
    api = "nisa.tensor_copy_dynamic_dst"
    d = _dst(dst, api)
    s = I.tile(src, "src", api)
    if s._shape[0] != d._shape[0] or V.free_size(s) != V.free_size(d):
        raise errors.ShapeMismatchError(
            f"'src{list(s._shape)}' and 'dst{list(d._shape)}' of '{api}' must have the same partitions and elements "
            f"per partition")
    V.refuse_mask(mask, d._shape, api, "a masked dynamic copy is not modelled")
    engines = _copy_engines(engine, api)
    if GPSIMD_ENGINE in engines and PSUM in (s._b.memory, d._b.memory):
        raise errors.UnsupportedMemoryError(f"GpSimd engine cannot access PSUM (operands of '{api}')")
    V.in_place(api, COPY, engines, "copy", d, [("src", s, "raw")], lambda cur, a: a.reshape(d._shape), line,
               reads_dst=False)


# --- GpSimd ---------------------------------------------------------------------------------------------

def _affine_predicate(pred, api: str):
    """The predicate function of the legacy affine_select: a comparison of nl.arange expressions
    (a mask), or an affine expression whose positive values select on_true_tile."""
    if isinstance(pred, Mask):
        mk = check_mask(pred)
        return lambda shape: mask_array(mk, shape)
    if isinstance(pred, IndexExpr):
        return lambda shape: np.broadcast_to(pred.to_array() > 0, shape)
    raise errors.OperandTypeError(
        f"'pred' of '{api}' must be an affine expression of nl.arange indices (e.g. i_p - i_f >= 0), got "
        f"{type(pred).__name__}; for a run-time predicate use nl.where")


@emulation(EXACT, "priced as a GpSimd pass over on_true_tile (like nisa.iota); int32/uint32 tiles are refused as "
                  "documented")
def affine_select(pred, on_true_tile, on_false_value, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """on_true_tile where the affine predicate holds, else on_false_value (a float32 constant)
    (GpSimd; SBUF; float or 8/16-bit integer tiles)."""
    api = "nisa.affine_select"
    return G.affine_select(api, _affine_predicate(pred, api), on_true_tile, on_false_value, dtype, mask, I.where(),
                           allow_int32=False)


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); an "
                        "out-of-bounds index is refused (the device: undefined); priced as a GpSimd pass over the "
                        "gathered elements (like nisa.iota)")
def local_gather(src_buffer, index, num_elem_per_idx: int = 1, num_valid_indices=None, mask=None,
                 **kwargs) -> NkiTensor:
    """Each GpSimd core (16 partitions) gathers num_elem_per_idx elements at each of its uint16
    indices from each of its partitions of src_buffer (SBUF)."""
    api = "nisa.local_gather"
    line = I.where()
    x = I.tile(src_buffer, "src_buffer", api, (SBUF,))
    V.refuse_mask(mask, x._shape, api, "what a mask does to the gather is not documented")
    return G.local_gather(api, x, index, num_elem_per_idx, num_valid_indices, None, line)


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); priced as a "
                        "GpSimd pass over data's elements per partition (like nisa.iota), on data's partitions")
def tensor_partition_reduce(op, data, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """The reduction of data across its partitions (add, maximum, bitwise_or, bitwise_and): a
    (1, ...) tile of data's free shape (GpSimd; SBUF)."""
    return G.partition_reduce("nisa.tensor_partition_reduce", op, data, dtype, mask, I.where())


@emulation(EXACT, "priced as a GpSimd pass over the segment ids (like nisa.iota)")
def sequence_bounds(segment_ids=None, dtype=None, **kwargs) -> NkiTensor:
    """(1, n) segment ids -> (1, 2, n): each element's segment start and (exclusive) end; padding
    (id 0) gets start n and end -1 (GpSimd)."""
    return G.sequence_bounds("nisa.sequence_bounds", segment_ids, dtype, I.where())


# --- random numbers, DMA transpose ------------------------------------------------------------------------

@emulation(APPROXIMATE, "each element is zeroed with probability prob and kept unscaled otherwise, as documented, "
                        "but the random stream is the emulator's (NumPy PCG64 seeded from VectorE's per-lane state, "
                        "seed 0 at kernel start): reproducible, never the device's numbers; priced as a VectorE "
                        "tensor_scalar")
def dropout(data, prob, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """data with each element replaced by 0 with probability prob (a scalar or a (P, 1) tile), VectorE."""
    return RNG.dropout("nisa.dropout", data, prob, dtype, mask, I.where())


@emulation(APPROXIMATE, "a mask that leaves elements inactive is refused (its effect is not documented); priced as "
                        "nl.load_transpose2d (element-wise transposing descriptors), every dge_mode alike")
def dma_transpose(src, axes=None, mask=None, dtype=None, dge_mode=None, **kwargs) -> NkiTensor:
    """src (HBM or SBUF) permuted by the documented axes of its rank ((1, 0), (2, 1, 0),
    (3, 1, 2, 0)) into a new SBUF tile by DMA; dge_mode=hwdge checks the hardware-DGE limits."""
    api = "nisa.dma_transpose"
    line = I.where()
    s = I.tile(src, "src", api, (HBM, SBUF))
    V.refuse_mask(mask, s._shape, api, "what a mask does to the transposing DMA is not documented")
    if dge_mode is not None and not isinstance(dge_mode, DgeMode):
        raise errors.OperandTypeError(f"'dge_mode' of '{api}' must be a member of nisa.dge_mode, got {dge_mode!r}")
    if dtype is not None and I.normalize_dtype(dtype) != s._b.dtype:
        raise errors.UnsupportedDtypeError(
            f"'{api}' moves bytes: the result has the data type of 'src' ({s._b.dtname}), not "
            f"'{T.dtype_name(I.normalize_dtype(dtype))}'; cast it with nisa.tensor_copy")
    return D.transpose(api, None, s, axes, None, line, hwdge=dge_mode is DgeMode.hwdge)


EXPORTS = [
    "nc_matmul", "nc_transpose", "activation", "activation_reduce", "reduce_cmd", "tensor_scalar",
    "tensor_scalar_reduce", "tensor_tensor",
    "scalar_tensor_tensor", "tensor_reduce", "tensor_tensor_scan", "reciprocal", "memset", "iota",
    "tensor_copy", "dma_copy",
    "unknown_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "tensor_engine",
    "activation_engine", "pool_engine", "engine", "dge_mode", "nc_version", "get_nc_version", "fp32",
    "bn_stats", "bn_aggr", "max8", "nc_find_index8", "nc_match_replace8", "tensor_copy_predicated",
    "select_reduce", "range_select", "nc_stream_shuffle", "tensor_copy_dynamic_src", "tensor_copy_dynamic_dst",
    "affine_select", "local_gather", "tensor_partition_reduce", "sequence_bounds", "dropout", "dma_transpose",
]
