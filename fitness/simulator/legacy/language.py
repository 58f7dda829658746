"""`neuronxcc.nki.language` (nl): tensor creation, data movement, element-wise math,
reductions, matmul, broadcasting and loop reductions, selection (`where`), statistics (`var`,
`rms_norm`), gathers, the one-program `all_reduce` and randomness (core.rng), lowered to the
core's instructions the way the legacy NKI compiler does (nki-semantics.md §6,
trainium-perf-model.md §7.3).
What Python operators on tiles mean in this dialect (`operator`) lives here too.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from .. import errors
from ..core import engines as E
from ..core import gpsimd as G
from ..core import instr as I
from ..core import ops
from ..core import placement as P
from ..core import rng as RNG
from ..core import subscript as S
from ..core import tensor as T
from ..core.coverage import Coverage
from ..core.indexing import arange, broadcast_shapes, ds, is_int, mgrid  # noqa: F401 (re-exported as nl.*)
from ..core.runtime import LoopIndex, current, machine, no_method
from ..core.tensor import NkiTensor, _make
from ..emulation import APPROXIMATE, emulation
from ..trace import (
    COPY,
    DMA,
    DMA_LOAD,
    DMA_STORE,
    GPSIMD_ENGINE,
    HBM,
    MEMSET,
    PSUM,
    RECIP,
    SBUF,
    SCALAR,
    TS,
    TT,
    VECTOR,
)
from .isa import engine_letters, fp32  # noqa: F401 (nl.fp32 is nisa.fp32)
from .loops import affine_range, sequential_range, static_range  # noqa: F401 (re-exported as nl.*)

F32 = np.dtype(np.float32)


# --- buffers, dtypes, constants ---------------------------------------------------------------------

class BufferKind(str):
    """An NKI memory name used as `buffer=` (compares equal to its string form)."""


sbuf = BufferKind("sbuf")
psum = BufferKind("psum")
hbm = BufferKind("hbm")
private_hbm = BufferKind("private_hbm")
shared_hbm = BufferKind("shared_hbm")

_BUFFERS = {"sbuf": (SBUF, "scratch"), "psum": (PSUM, "scratch"), "hbm": (HBM, "scratch"),
            "private_hbm": (HBM, "scratch"), "shared_hbm": (HBM, "output")}


def _ml_dtype(name: str):
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, name))


class par_dim(int):
    """`nl.par_dim(n)`: marks the partition dimension inside a shape tuple."""

    def __repr__(self) -> str:
        return f"par_dim({int(self)})"


class _TileSize:
    """Hardware tile limits (`nl.tile_size`, NeuronCore-v2); the SBUF size is the running
    target's."""

    pmax = 128
    psum_fmax = 512
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_part_max = 128

    @property
    def total_available_sbuf_size(self) -> int:
        m = current()
        return (m.capacity.sbuf_usable_bytes if m is not None else T.SBUF_USABLE_BYTES) * 128


tile_size = _TileSize()


# --- creation ------------------------------------------------------------------------------------------

def _shape_and_pdim(shape, api: str) -> tuple[tuple[int, ...], int]:
    if is_int(shape):
        shape = (shape,)
    dims = []
    pdim = None
    for i, n in enumerate(shape):
        if isinstance(n, par_dim):
            if pdim is not None:
                raise errors.IndexNotSupportedError(f"{api}: a shape can have only one nl.par_dim")
            pdim = i
        if not is_int(n) or int(n) < 1:
            raise errors.OperandTypeError(f"{api}: shape dimensions must be positive integers, got {shape!r}")
        dims.append(int(n))
    return tuple(dims), (0 if pdim is None else pdim)


def _buffer(buffer) -> tuple[str, str, str]:
    if isinstance(buffer, P.Allocation):
        return buffer.api, buffer.memory, "scratch"
    name = "sbuf" if buffer is None else str(buffer)
    if name not in _BUFFERS:
        raise errors.OperandTypeError(f"unknown buffer {buffer!r}; use nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm")
    mem, kind = _BUFFERS[name]
    return name, mem, kind


def _create(shape, dtype, buffer, name, fill, api: str, line: int, lazy: bool = False) -> NkiTensor:
    m = machine()
    shape, pdim = _shape_and_pdim(shape, api)
    dt = I.normalize_dtype(dtype if dtype is not None else np.float32)
    bname, mem, kind = _buffer(buffer)
    if mem == HBM:
        if fill is not None:
            raise errors.HbmInitValueError(f"Creating HBM tensor with init value is not supported ({api} with buffer={bname})")
        if kind == "output":
            frame = errors.kernel_frame(1)
            if m.scope or (m.kernel_code is not None and frame is not None and frame.f_code is not m.kernel_code):
                raise errors.SharedHbmScopeError(
                    "shared_hbm buffer can only be created in the top level kernel scope (not inside a loop, an "
                    "if-block or a helper function); create kernel outputs at the start of the kernel")
        buf = T.new_buffer(HBM, shape, dt, 0, kind=kind, name=str(name or ""), line=line)
        if kind == "scratch" and not m.stack:
            m.declare(T.prod(shape) * dt.itemsize)
        if kind == "output":
            buf.written = Coverage(shape)
            m.outputs.append(buf)
            if not m.shape_only:
                # outputs must be written completely (checked at the end), so no NaN fill is needed
                buf.blocks[()] = np.empty(shape, dtype=dt)
        return T.whole(buf)
    if isinstance(buffer, P.Allocation):
        if fill is not None:
            raise errors.AllocatedInitValueError(
                f"Creating SBUF/PSUM tensor with init value is not supported in allocated NKI kernels ({api} with "
                f"buffer={buffer.api}(...)); create it with nl.ndarray and fill it with an instruction (nisa.memset, "
                f"t[...] = 0)")
        buf = T.new_buffer(mem, shape, dt, pdim, name=str(name or ""), line=line)
        P.of(m).place(m, buf, buffer, line)   # its blocks are views of physical bytes: nothing to declare
        return T.whole(buf)
    buf = T.new_buffer(mem, shape, dt, pdim, name=str(name or ""), line=line, fill=fill)
    if not m.stack:
        m.declare(T.prod(shape) * dt.itemsize)
    if fill is not None and not (mem == PSUM and lazy):
        # the compiler initialises each block with a memset (PSUM accumulators marked
        # lazy_initialization are overwritten by their first matmul instead)
        engines = (VECTOR,) if mem == PSUM else (VECTOR, GPSIMD_ENGINE)
        p = buf.local[0]
        free = T.prod(buf.local[1:])
        local_box = tuple((0, n) for n in buf.local)
        for key in itertools.product(*(range(n) for n in shape[:pdim])):
            box = tuple((k, k + 1) for k in key) + local_box
            m.emit(MEMSET, api, engines, dt.name, (), p, free, (), (T.Region(buf.id, box),), line)
    return T.whole(buf)


def ndarray(shape, dtype=np.float32, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    """An uninitialised tensor (SBUF by default)."""
    return _create(shape, dtype, buffer, name, None, "nl.ndarray", I.where())


def empty_like(a, dtype=None, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return _create(a.shape, dtype or a.dtype, buffer, name, None, "nl.empty_like", I.where())


def zeros(shape, dtype=np.float32, buffer=None, name: str = "", lazy_initialization: bool = False, **kwargs) -> NkiTensor:
    """A zero-filled tensor."""
    return _create(shape, dtype, buffer, name, 0, "nl.zeros", I.where(), lazy_initialization)


def ones(shape, dtype=np.float32, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return _create(shape, dtype, buffer, name, 1, "nl.ones", I.where())


def full(shape, fill_value, dtype=np.float32, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return _create(shape, dtype, buffer, name, fill_value, "nl.full", I.where())


def zeros_like(a, dtype=None, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return _create(a.shape, dtype or a.dtype, buffer, name, 0, "nl.zeros_like", I.where())


def ones_like(a, dtype=None, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return _create(a.shape, dtype or a.dtype, buffer, name, 1, "nl.ones_like", I.where())


def full_like(a, fill_value, dtype=None, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return _create(a.shape, dtype or a.dtype, buffer, name, fill_value, "nl.full_like", I.where())


def shared_constant(constant, dtype=None, **kwargs) -> NkiTensor:
    """An HBM tensor holding `constant` (embedded in the kernel binary)."""
    return E.constant(constant, dtype, I.where())


def shared_identity_matrix(n: int, dtype=np.float32, **kwargs) -> NkiTensor:
    return shared_constant(np.identity(n), dtype)


# --- data movement -----------------------------------------------------------------------------------

def load(src, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """HBM -> a new SBUF tile (DMA)."""
    return E.load("nl.load", src, mask, dtype, I.where())


def load_transpose2d(src, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """HBM [F, P] -> SBUF tile [P, F] transposed by the DMA engine."""
    m = machine()
    line = I.where()
    src = I.tile(src, "src", "load_transpose2d", (HBM,))
    if len(src._shape) != 2:
        raise errors.MaxDimensionError(f"parameter 'src{list(src._shape)}' of 'load_transpose2d' must be 2-D")
    shape = (src._shape[1], src._shape[0])
    dt = I.normalize_dtype(dtype) if dtype is not None else src._b.dtype
    box, wh = I.active(mask, shape)
    sbox = None if box is None else (box[1], box[0])
    sv = I.use(src, sbox, src._shape, None if wh is None else wh.T)
    res = I.new_result(shape, dt, SBUF, DMA_LOAD, line)
    rv = res if box is None else T.restrict(res, box, shape)
    if not m.shape_only and 0 not in rv._shape:
        T.write(rv, T.array(sv).T, wh)
    n = T.count(rv) if wh is None else int(wh.sum())
    dma = I.dma_info(rv, sv, n, rv._shape[0])
    dma = dataclasses.replace(dma, run_bytes=src._b.itemsize, runs=n)   # element-wise transposing descriptors
    I.record(m, DMA_LOAD, "nl.load_transpose2d", (DMA,), res, rv, box, wh, [sv], line, "transpose", dma=dma)
    return res


def store(dst, value, mask=None, **kwargs) -> None:
    """SBUF tile (or scalar) -> HBM (DMA)."""
    m = machine()
    line = I.where()
    dst = T.as_tile_shape(I.tile(dst, "dst", "store", (HBM,)))
    I.immutable_check(dst)
    if isinstance(value, NkiTensor):
        if value._b.memory == PSUM:
            raise errors.UnsupportedMemoryError(
                "Expected operand 'value' of 'store' to be in address space 'sbuf', but got a tile in 'psum' "
                "instead; DMA cannot read PSUM: copy the tile to SBUF first (nl.copy)")
        value = I.tile(value, "value", "store", (SBUF,))
        vshape = value._shape
        if dst._shape != vshape:
            dst = S.squeeze_to(dst, vshape)    # e.g. out[i] of shape (1, P, F) for a (P, F) tile
            I.check_assign_shape(dst, vshape, f"the stored tile '{value._b.label}'")
    elif not I.is_scalar(value):
        raise errors.OperandTypeError(f"operand 'value' of 'store' must be an SBUF tile or a scalar, got "
                                      f"{type(value).__name__}")
    shape = dst._shape
    box, wh = (None, None) if mask is None else I.active(mask, shape)
    dv = dst if box is None and not dst._checks else I.use(dst, box, shape, wh)
    reads = []
    if isinstance(value, NkiTensor):
        vv = value if box is None and not value._checks else I.use(value, box, shape, wh)
        reads.append(vv)
    dreg = T.region(dv)
    m.note_write(dst._b, dreg.box, view=dst)
    if not m.shape_only and 0 not in dv._shape:
        T.write(dv, T.array(reads[0]) if reads else np.asarray(value), wh)
    if 0 not in dv._shape:
        T.mark_written(dv, wh)
    n = T.count(dv) if wh is None else int(wh.sum())
    p = reads[0]._shape[0] if reads else dv._shape[0]
    dma = I.dma_info(dv, reads[0] if reads else dv, n, p)
    m.emit(DMA_STORE, "nl.store", (DMA,), dst._b.dtname, tuple(r._b.dtname for r in reads), p,
           n // p if p else 0, tuple(T.region(r) for r in reads), (dreg,), line, "", None, dma, 0, False)


def copy(src, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """A copy of a tile into a new SBUF tile (Vector or Scalar engine)."""
    return E.copy("nl.copy", src, mask, dtype, I.where())


def static_cast(src, dtype, mask=None, **kwargs) -> NkiTensor:
    """Convert a tile to `dtype` (a copy with a cast)."""
    line = I.where()
    src = I.tile(src, "src", "static_cast")
    return I.compute("nl.static_cast", COPY, (VECTOR, SCALAR), "copy", [("src", src)], src._shape,
                     I.normalize_dtype(dtype), mask, lambda a: a, line=line)


# --- element-wise ------------------------------------------------------------------------------------------

def _elementwise_binary(api: str, op: str, x, y, dtype, mask, line: int, *, operator: bool = False,
                        engine=None) -> NkiTensor:
    """nl.add and friends (see core.engines.elementwise); `engine` an nisa engine selector."""
    return E.elementwise(api, op, x, y, dtype, mask, line, operator=operator, engines=engine_letters(engine))


def operator(t: NkiTensor, other, op: str, reverse: bool) -> NkiTensor:
    """Python operators on tiles (`a + b`, `t / 2`), which behave like the nl calls (the
    legacy front-end's `operator` handler)."""
    line = I.where()
    x, y = (other, t) if reverse else (t, other)
    return _elementwise_binary(f"operator {op}", op, x, y, None, None, line, operator=True)


def _make_binary(op: str, doc: str):
    def fn(x, y, dtype=None, mask=None, **kwargs):
        return _elementwise_binary(f"nl.{op}", op, x, y, dtype, mask, I.where(), engine=kwargs.get("engine"))
    fn.__name__ = op
    fn.__qualname__ = op
    fn.__doc__ = doc
    fn.nki_alu = op
    return fn


add = _make_binary("add", "x + y, element-wise.")
subtract = _make_binary("subtract", "x - y, element-wise.")
multiply = _make_binary("multiply", "x * y, element-wise.")
divide = _make_binary("divide", "x / y, element-wise.")
maximum = _make_binary("maximum", "max(x, y), element-wise.")
minimum = _make_binary("minimum", "min(x, y), element-wise.")
power = _make_binary("power", "x ** y, element-wise.")
equal = _make_binary("equal", "1.0 where x == y else 0.0.")
not_equal = _make_binary("not_equal", "1.0 where x != y else 0.0.")
greater = _make_binary("greater", "1.0 where x > y else 0.0.")
greater_equal = _make_binary("greater_equal", "1.0 where x >= y else 0.0.")
less = _make_binary("less", "1.0 where x < y else 0.0.")
less_equal = _make_binary("less_equal", "1.0 where x <= y else 0.0.")
logical_and = _make_binary("logical_and", "x and y (as 1.0 / 0.0).")
logical_or = _make_binary("logical_or", "x or y (as 1.0 / 0.0).")
logical_xor = _make_binary("logical_xor", "x xor y (as 1.0 / 0.0).")
bitwise_and = _make_binary("bitwise_and", "x & y on integers.")
bitwise_or = _make_binary("bitwise_or", "x | y on integers.")
bitwise_xor = _make_binary("bitwise_xor", "x ^ y on integers.")
left_shift = _make_binary("left_shift", "x << y on integers.")
right_shift = _make_binary("right_shift", "x >> y on integers.")


def _unary_act(func: str, x, dtype, mask, api: str, line: int) -> NkiTensor:
    return E.unary_activation(api, func, x, dtype, mask, line)


def _make_activation(name: str, doc: str):
    def fn(x, dtype=None, mask=None, **kwargs):
        return _unary_act(name, x, dtype, mask, f"nl.{name}", I.where())
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = doc + " (ScalarE activation)"
    fn.nki_act = name
    return fn


exp = _make_activation("exp", "e ** x.")
log = _make_activation("log", "Natural logarithm.")
sqrt = _make_activation("sqrt", "Square root.")
rsqrt = _make_activation("rsqrt", "1 / sqrt(x).")
square = _make_activation("square", "x * x.")
tanh = _make_activation("tanh", "Hyperbolic tangent.")
sigmoid = _make_activation("sigmoid", "1 / (1 + exp(-x)).")
silu = _make_activation("silu", "x * sigmoid(x).")
gelu = _make_activation("gelu", "Gaussian error linear unit.")
gelu_apprx_tanh = _make_activation("gelu_apprx_tanh", "GELU, tanh approximation.")
relu = _make_activation("relu", "max(x, 0).")
abs = _make_activation("abs", "|x|.")
sin = _make_activation("sin", "Sine.")
cos = _make_activation("cos", "Cosine.")
arctan = _make_activation("arctan", "Arc tangent.")
erf = _make_activation("erf", "Error function.")
softplus = _make_activation("softplus", "log(1 + exp(x)).")
mish = _make_activation("mish", "x * tanh(softplus(x)).")
reciprocal = _make_activation("reciprocal", "1 / x.")
sign = _make_activation("sign", "Sign of x.")


def negative(x, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """-x (a tensor_scalar multiply by -1)."""
    line = I.where()
    x = I.tile(x, "x", "nl.negative")
    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    return I.compute("nl.negative", TS, (VECTOR, SCALAR), "multiply", [("x", x)], x._shape, dt, mask,
                     np.negative, line=line)


negative.nki_act = "negative"


# --- reductions -------------------------------------------------------------------------------------------

def _make_reduce(name: str, op: str):
    def fn(x, axis, dtype=None, mask=None, keepdims=False, **kwargs):
        return E.reduce(f"nl.{name}", op, x, axis, dtype, mask, keepdims, I.where())
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"Reduce with {op} along free axes (VectorE)."
    fn.nki_alu = op
    return fn


sum = _make_reduce("sum", "add")
max = _make_reduce("max", "maximum")
min = _make_reduce("min", "minimum")
prod = _make_reduce("prod", "multiply")
all = _make_reduce("all", "logical_and")
any = _make_reduce("any", "logical_or")


def mean(x, axis, dtype=None, mask=None, keepdims=False, **kwargs) -> NkiTensor:
    """Average along free axes: a sum reduction then a multiply by 1/n."""
    return E.mean("nl.mean", x, axis, dtype, mask, keepdims, I.where())


mean.nki_alu = None


def softmax(x, axis=-1, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """exp(x - max) / sum(exp(x - max)) along the last free axis (several instructions)."""
    line = I.where()
    x = I.tile(x, "x", "nl.softmax")
    ax = E.free_axes(axis, len(x._shape), "nl.softmax")
    if ax != (len(x._shape) - 1,) or len(x._shape) != 2:
        raise errors.IndexNotSupportedError("nl.softmax supports 2-D tiles along the last axis (axis=1)")
    mx = E.reduce("nl.softmax", "maximum", x, 1, F32, mask, False, line)
    neg = I.compute("nl.softmax", TS, (VECTOR, SCALAR), "multiply", [("data", mx)], mx._shape, F32, None,
                    lambda a: -a, line=line)
    e = E.activation("nl.softmax", "exp", x, neg, 1.0, mask, F32, line)
    s = E.reduce("nl.softmax", "add", e, 1, F32, mask, False, line)
    r = I.compute("nl.softmax", RECIP, (VECTOR,), "reciprocal", [("data", s)], s._shape, F32, None,
                  lambda a: np.float32(1.0) / a, line=line)
    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    return I.compute("nl.softmax", TS, (VECTOR, SCALAR), "multiply", [("data", e), ("operand0", r)], e._shape, dt,
                     mask, np.multiply, line=line)


# --- matmul, transpose, broadcast ------------------------------------------------------------------------

def matmul(x, y, transpose_x: bool = False, mask=None, **kwargs) -> NkiTensor:
    """x @ y into a new PSUM tile. Without `transpose_x` the compiler first transposes x on
    TensorE (matmul with an identity) and copies it to SBUF."""
    line = I.where()
    x = I.tile(x, "x", "matmul")
    y = I.tile(y, "y", "matmul")
    if len(x._shape) != 2 or len(y._shape) != 2:
        raise errors.MaxDimensionError(
            f"parameters 'x{list(x._shape)}', 'y{list(y._shape)}' of 'matmul' exceed max supported number of "
            f"dimensions of 2")
    if x._b.memory != SBUF:
        x = copy(x)
    if y._b.memory != SBUF:
        y = copy(y)
    if transpose_x:
        stationary = x
    else:
        Mx, Kx = x._shape
        if Kx != y._shape[0]:
            raise errors.MatmulShapeError(
                f"contraction sizes of 'matmul' operands x{list(x._shape)} (K = {Kx}) and y{list(y._shape)} "
                f"(K = {y._shape[0]}) differ")
        if Kx > 128:
            raise errors.DimensionLimitError(
                f"size of dimension 1 in 'x{list(x._shape)}' of 'matmul' exceed architecture limitation of 128")
        xt = E.transpose_tensore("nl.matmul", x, line)
        stationary = I.compute("nl.matmul", COPY, (VECTOR, SCALAR), "copy", [("src", xt)], xt._shape, F32, None,
                               lambda a: a, line=line)
    return E.matmul("nl.matmul", stationary, y, mask, line)


def transpose(x, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Swap partition and free axes of a 2-D tile (TensorE, via the identity matrix)."""
    line = I.where()
    x = I.tile(x, "x", "transpose")
    if len(x._shape) != 2:
        raise errors.MaxDimensionError(
            f"parameter 'x{list(x._shape)}' of 'transpose' exceed max supported number of dimensions of 2")
    return E.transpose_tensore("nl.transpose", x, line, dtype)


def broadcast_to(src, shape, _line: int | None = None, **kwargs) -> NkiTensor:
    """Broadcast a tile to `shape` (see core.engines.broadcast)."""
    return E.broadcast("broadcast_to", src, shape, I.where() if _line is None else _line)


def tensor_method(t: NkiTensor, name: str):
    """The legacy front-end's `method` handler: legacy tensors have one view method,
    `reshape`, on HBM tensors only."""
    if name == "reshape":
        return lambda shape: T.reshape(t, tuple(int(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,))))
    return no_method(t, name)


# --- loop reductions and misc ------------------------------------------------------------------------------

def loop_reduce(x, op, loop_indices, dtype=None, mask=None, **kwargs):
    """Reduce `x` into the assigned destination across iterations of `loop_indices`:
    the first iteration writes x, later ones dst = op(dst, x) (one VectorE tensor_tensor)."""
    line = I.where()
    x = I.tile(x, "x", "loop_reduce")
    name = ops.alu_name(op, "loop_reduce")
    loops = tuple(loop_indices) if isinstance(loop_indices, (list, tuple)) else (loop_indices,)
    for li in loops:
        if not isinstance(li, LoopIndex):
            raise errors.OperandTypeError(
                f"loop_indices of nl.loop_reduce must be loop variables of nl.affine_range/sequential_range loops, "
                f"got {li!r}")
    return PendingLoopReduce(x, name, loops, dtype, mask, line)


class PendingLoopReduce(I.Deferred):
    """The value of `nl.loop_reduce(...)`: it reduces into the destination it is assigned to."""

    def __init__(self, x: NkiTensor, op: str, loops: tuple, dtype, mask, line: int):
        self.x, self.op, self.loops, self.dtype, self.mask, self.line = x, op, loops, dtype, mask, line

    def apply(self, dst: NkiTensor, line: int) -> None:
        m = machine()
        I.check_dst(dst, "nl.loop_reduce")
        if dst._b.memory == HBM:
            raise errors.UnsupportedMemoryError("the destination of nl.loop_reduce must be in SBUF or PSUM")
        x = self.x
        shape = dst._shape
        I.check_assign_shape(dst, x._shape, "nl.loop_reduce's input")
        box, wh = (None, None) if self.mask is None else I.active(self.mask, shape)
        dv = dst if box is None and not dst._checks else I.use(dst, box, shape, wh)
        xv = x if box is None and not x._checks else I.use(x, box, shape, wh)
        first = True
        exempt = set()
        for li in self.loops:
            loop = li._loop
            first = first and li == loop.start
            exempt.add(loop.uid)
        dreg = T.region(dv)
        m.note_write(dst._b, dreg.box, exempt, view=dst)
        if not m.shape_only and 0 not in dv._shape:
            xa = I.fp32(xv)
            out = xa if first else ops.ALU[self.op](I.fp32(dv), xa)
            T.write(dv, out, wh)
        db, xb = dst._b, x._b
        psum = (db.memory == PSUM) + (xb.memory == PSUM)
        s = dv._shape
        m.emit(TT, "nl.loop_reduce", (VECTOR,), db.dtname, (db.dtname, xb.dtname), s[0], T.prod(s[1:]),
               (dreg, T.region(xv)), (dreg,), line, self.op, None, None, psum,
               T.minor_stride_bytes(xv) > 16 or T.minor_stride_bytes(dv) > 16)

    def _misuse(self, *a, **k):
        raise errors.OperandTypeError(
            f"the result of nl.loop_reduce (line {self.line}) must be assigned to a tensor: dst[...] = nl.loop_reduce(...)")

    __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __getitem__ = __bool__ = _misuse


def program_id(axis: int = 0) -> int:
    """SPMD program index: kernels run as a single program here."""
    machine()
    return 0


def num_programs(axes=None) -> int:
    machine()
    return 1


def program_ndim() -> int:
    machine()
    return 0


def device_print(prefix: str, x, **kwargs) -> None:
    """Print a tile's values (full-data runs only)."""
    m = machine()
    x = I.tile(x, "x", "device_print", (SBUF, PSUM, HBM))
    if not m.shape_only:
        print(prefix, T.array(x))


# --- more element-wise math, selection, statistics --------------------------------------------------

fmod = _make_binary("fmod", "The remainder of x / y with the sign of x (C fmod), element-wise.")
mod = _make_binary("mod", "x mod y with the sign of y (Python's %), element-wise.")

ceil = _make_activation("ceil", "The smallest integer >= x.")
floor = _make_activation("floor", "The largest integer <= x.")
trunc = _make_activation("trunc", "x with its fractional part discarded.")
tan = _make_activation("tan", "Tangent.")
erf_dx = _make_activation("erf_dx", "Derivative of erf: 2 / sqrt(pi) * exp(-x**2).")
gelu_dx = _make_activation("gelu_dx", "Derivative of the (erf) GELU: Phi(x) + x * phi(x).")
silu_dx = _make_activation("silu_dx", "Derivative of SiLU: s * (1 + x * (1 - s)), s = sigmoid(x).")
gelu_apprx_sigmoid = emulation(
    APPROXIMATE, "x * sigmoid(1.702 * x), the usual sigmoid approximation of GELU (the documentation does not give "
                 "the constant), in fp32; one ScalarE activation")(
    _make_activation("gelu_apprx_sigmoid", "GELU with the sigmoid approximation."))


def invert(x, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Bitwise NOT of an integer tile (`~x`): an XOR with all ones (VectorE)."""
    line = I.where()
    t = I.tile(x, "x", "nl.invert")
    if t._b.dtype.kind not in "iub":
        raise errors.UnsupportedDtypeError(
            f"operand 'x' of 'nl.invert' must be integer typed, got {t._b.dtname} (bitwise NOT of integers)")
    return E.elementwise("nl.invert", "bitwise_xor", t, -1, dtype, mask, line)


def logical_not(x, dtype=np.bool_, mask=None, **kwargs) -> NkiTensor:
    """NOT x: 1 where x is zero, else 0 (a logical XOR with 1 of x != 0; VectorE)."""
    line = I.where()
    t = I.tile(x, "x", "nl.logical_not")
    dt = I.normalize_dtype(dtype) if dtype is not None else t._b.dtype
    return I.compute("nl.logical_not", TS, (VECTOR,), "logical_xor", [("x", t)], t._shape, dt, mask,
                     lambda a: (a == 0).astype(np.float32), line=line)


def _lift(a, ndim: int):
    """A (P, 1) operand array seen against an ndim-D tile (P, F1, F2...)."""
    if isinstance(a, np.ndarray) and a.ndim < ndim:
        return a.reshape(a.shape + (1,) * (ndim - a.ndim))
    return a


@emulation(APPROXIMATE, "priced as one VectorE tensor_tensor reading condition, x and y (the documentation does not "
                        "say which instructions it lowers to)")
def where(condition, x, y, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """x where condition is nonzero, else y; x and y tiles (broadcast like nl.add's operands: the
    same partitions) or scalars."""
    return E.select("nl.where", condition, x, y, dtype, mask, I.where())


def var(x, axis, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Variance (the mean of squared deviations) along free axes, the axes removed: a mean, a
    subtract, a square and a mean, in fp32."""
    return E.variance("nl.var", x, axis, dtype, mask, False, I.where())


def expand_dims(data, axis) -> NkiTensor:
    """A view of `data` with new size-1 axes after its last one (the only position NKI supports)."""
    t = I.tile(data, "data", "nl.expand_dims", (SBUF, PSUM, HBM))
    axes = sorted(int(a) for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    n = len(t._shape)
    if axes != list(range(n, n + len(axes))):
        raise errors.IndexNotSupportedError(
            f"nl.expand_dims inserts axes after the last index of the tile only (axis {n}"
            f"{f' to {n + len(axes) - 1}' if len(axes) > 1 else ''} for data{list(t._shape)}), got axis={axis!r}")
    if t._gat is not None:
        raise errors.UnsupportedApiError(f"nl.expand_dims of a gathered (indirectly indexed) view of "
                                         f"'{t._b.label}' is not supported by the emulator")
    k = len(axes)
    a = tuple(row + (0,) * k for row in t._a)
    return _make(t._b, t._key, t._dims, t._dstr, t._base, t._c, a, t._shape + (1,) * k, (), None, t._alias)


@emulation(APPROXIMATE, "RMS(x) = sqrt(sum(x**2 along axis) / n + epsilon), epsilon inside the square root as in "
                        "RMSNorm (the documentation does not spell the formula out); a square, a sum, one ScalarE "
                        "rsqrt and two multiplies")
def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None, mask=None, **kwargs) -> NkiTensor:
    """x / RMS(x) * w, RMS along `axis` over `n` values; dtype and compute_dtype (the same, as
    documented) set the computation's and the result's type."""
    line = I.where()
    api = "nl.rms_norm"
    x = I.tile(x, "x", api)
    if not is_int(n) or int(n) < 1:
        raise errors.OperandTypeError(f"'n' of '{api}' must be a positive integer, got {n!r}")
    cd = compute_dtype if compute_dtype is not None else dtype
    cdt = I.normalize_dtype(cd) if cd is not None else F32
    sq = E.unary_activation(api, "square", x, cdt, mask, line)
    s = E.reduce(api, "add", sq, axis, cdt, mask, True, line)
    r = E.activation(api, "rsqrt", s, float(epsilon), np.float32(1.0 / int(n)), mask, cdt, line)
    y = E.elementwise(api, "multiply", x, r, cdt, mask, line)
    return E.elementwise(api, "multiply", y, w, dtype if dtype is not None else x._b.dtype, mask, line)


@emulation(APPROXIMATE, "per partition, the elements of data's flattened free dimensions at the uint32 indices, as "
                        "documented; an out-of-bounds index is refused (the device returns garbage); priced as "
                        "nisa.nc_n_gather (one GpSimd pass over the result)")
def gather_flattened(data, indices, mask=None, dtype=None, **kwargs) -> NkiTensor:
    """out[p, j...] = data[p].flat[indices[p, j...]]: the shape of indices, data's dtype (GpSimd)."""
    line = I.where()
    api = "nl.gather_flattened"
    d, ix = I.tile(data, "data", api, (SBUF,)), I.tile(indices, "indices", api, (SBUF,))
    for name, t in (("data", d), ("indices", ix)):
        if not 2 <= len(t._shape) <= 4:
            raise errors.MaxDimensionError(f"'{name}{list(t._shape)}' of '{api}' must have 2 to 4 dimensions")
    box, wh = I.active(mask, ix._shape)
    if box is not None or wh is not None:
        raise errors.UnsupportedApiError(f"a masked '{api}' is not supported by the emulator")
    return G.n_gather(api, d, ix, dtype, line)


@emulation(APPROXIMATE, "the emulator runs one SPMD program, so the reduction over the program axes is x itself: "
                        "a copy, priced as nl.copy (no collective traffic)")
def all_reduce(x, op, program_axes, dtype=None, mask=None, parallel_reduce=True, asynchronous=False,
               **kwargs) -> NkiTensor:
    """op-reduce x over the SPMD programs along program_axes (one program here: a copy of x)."""
    line = I.where()
    api = "nl.all_reduce"
    ops.alu_name(op, api)
    t = I.tile(x, "x", api)
    dt = I.normalize_dtype(dtype) if dtype is not None else t._b.dtype
    return I.compute(api, COPY, (VECTOR, SCALAR), "copy", [("x", t)], t._shape, dt, mask, lambda a: a, line=line)


# --- randomness -------------------------------------------------------------------------------------------

_RANDOM = ("values from the emulator's generator (NumPy PCG64 seeded from VectorE's per-lane state, seed 0 at kernel "
           "start, nl.random_seed reseeds it): reproducible, never the device's random stream")


@emulation(APPROXIMATE, _RANDOM + "; priced as a VectorE memset")
def rand(shape, dtype=np.float32, **kwargs) -> NkiTensor:
    """A new SBUF tile of uniform random values in [0, 1)."""
    dims, _ = _shape_and_pdim(shape, "nl.rand")
    return RNG.rand2("nl.rand", dims, I.normalize_dtype(dtype), 0.0, 1.0, I.where())


@emulation(APPROXIMATE, _RANDOM + "; a tile seed is priced as a one-element VectorE copy, a Python int records "
                                  "no instruction")
def random_seed(seed, mask=None, **kwargs) -> None:
    """Seed the random number generator with a 32-bit value (a [1, 1] tile or an integer)."""
    m = machine()
    line = I.where()
    if isinstance(seed, NkiTensor):
        RNG.set_seed("nl.random_seed", seed, line)
        return
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise errors.OperandTypeError(f"'seed' of 'nl.random_seed' must be a 32-bit integer or a [1, 1] tile, got "
                                      f"{type(seed).__name__}")
    if not m.shape_only:
        w = RNG.WORDS[VECTOR]
        RNG._state(VECTOR)[...] = np.random.SeedSequence(int(seed) & 0xFFFFFFFF).generate_state(
            T.PMAX * w).reshape(T.PMAX, w)


@emulation(APPROXIMATE, _RANDOM + "; each element is zeroed with probability rate and the others kept unscaled "
                                  "(nisa.dropout's documented behaviour), priced as a VectorE tensor_scalar")
def dropout(x, rate, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """x with each element zeroed with probability `rate`: a scalar, a tile with one element
    (broadcast across x's partitions first, as nl.broadcast_to does) or a (P, 1) tile."""
    line = I.where()
    api = "nl.dropout"
    t = I.tile(x, "x", api)
    if isinstance(rate, NkiTensor):
        r = I.tile(rate, "rate", api)
        if T.prod(r._shape) == 1 and len(r._shape) == 2 and t._shape[0] != 1:
            rate = E.broadcast("broadcast_to", r, (t._shape[0], 1), line)
    return RNG.dropout(api, t, rate, dtype, mask, line)


# Supported dtypes (NumPy dtypes; bf16 / fp8 from ml_dtypes, resolved on first use).
float32 = np.float32
float16 = np.float16
tfloat32 = np.float32
int8, int16, int32 = np.int8, np.int16, np.int32
uint8, uint16, uint32 = np.uint8, np.uint16, np.uint32
bool_ = np.bool_


def __getattr__(name: str):
    # bf16/fp8 dtypes come from ml_dtypes, imported only when a kernel asks for them
    lazy = {"bfloat16": "bfloat16", "float8_e4m3": "float8_e4m3", "float8_e5m2": "float8_e5m2",
            "float8_e4m3fn": "float8_e4m3fn"}
    if name in lazy:
        return _ml_dtype(lazy[name])
    raise AttributeError(name)


EXPORTS = [
    # buffers, dtypes, constants
    "sbuf", "psum", "hbm", "private_hbm", "shared_hbm", "par_dim", "tile_size",
    "float32", "float16", "tfloat32", "int8", "int16", "int32", "uint8", "uint16", "uint32", "bool_",
    # indexing and loops
    "arange", "mgrid", "ds", "affine_range", "sequential_range", "static_range",
    # creation
    "ndarray", "empty_like", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
    "shared_constant", "shared_identity_matrix",
    # data movement
    "load", "load_transpose2d", "store", "copy", "static_cast",
    # element-wise
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "equal", "not_equal",
    "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift",
    "exp", "log", "sqrt", "rsqrt", "square", "tanh", "sigmoid", "silu", "gelu", "gelu_apprx_tanh", "relu",
    "abs", "sin", "cos", "arctan", "erf", "softplus", "mish", "reciprocal", "sign", "negative",
    # reductions
    "sum", "max", "min", "prod", "all", "any", "mean", "softmax", "loop_reduce",
    # matmul, transpose, broadcast
    "matmul", "transpose", "broadcast_to",
    # SPMD / debug
    "program_id", "num_programs", "program_ndim", "device_print",
    # more math, selection, statistics, randomness
    "fmod", "mod", "ceil", "floor", "trunc", "tan", "erf_dx", "gelu_dx", "silu_dx", "gelu_apprx_sigmoid",
    "invert", "logical_not", "where", "var", "expand_dims", "rms_norm", "gather_flattened", "all_reduce",
    "rand", "random_seed", "dropout", "fp32",
]
LAZY_EXPORTS = ["bfloat16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn"]
