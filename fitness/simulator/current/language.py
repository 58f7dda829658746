"""`nki.language` (nl) of the current dialect: memory regions, dtypes, tile sizes, tensor
creation (`nl.ndarray`, uninitialised; `nl.zeros/ones/full`), the loop iterators (aliases
of Python `range`, unrolled), the device loop `nl.fori_loop`, `nl.load/store` wrappers,
and the high-level math APIs that return new tiles, lowered like their legacy namesakes.

PSUM holds 8 banks of 2 KiB per partition: a PSUM tensor may span several banks, and an
explicit `address=(partition, byte offset)` must start at a bank.
"""

from __future__ import annotations

import builtins

import numpy as np

from .. import errors
from ..core import engines as E
from ..core import instr as I
from ..core import ops
from ..core import tensor as T
from ..core.coverage import Coverage
from ..core.indexing import ds, is_int  # noqa: F401 (nl.ds)
from ..core.loops import LoopRange, loop_range
from ..core.runtime import current, machine
from ..core.tensor import NkiTensor
from . import isa
from ..trace import HBM, PSUM, SBUF

F32 = np.dtype(np.float32)
PSUM_BANKS = 8


# --- memory regions, dtypes, tile sizes --------------------------------------------------------

class MemoryRegion(str):
    """A memory name used as `buffer=` (compares equal to its string form)."""


sbuf = MemoryRegion("sbuf")
psum = MemoryRegion("psum")
hbm = MemoryRegion("hbm")
private_hbm = MemoryRegion("private_hbm")
shared_hbm = MemoryRegion("shared_hbm")

_BUFFERS = {"sbuf": (SBUF, "scratch"), "psum": (PSUM, "scratch"), "hbm": (HBM, "scratch"),
            "private_hbm": (HBM, "scratch"), "shared_hbm": (HBM, "output")}

float32 = np.float32
float16 = np.float16
tfloat32 = np.float32
int8, int16, int32 = np.int8, np.int16, np.int32
uint8, uint16, uint32 = np.uint8, np.uint16, np.uint32
bool_ = np.bool_


class tile_size:
    """Hardware tile limits (trn2, NeuronCore-v3)."""

    pmax = 128
    psum_fmax = 512
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = T.PSUM_BANK_BYTES
    psum_num_banks = PSUM_BANKS
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 1
    sbuf_fmax_bytes = T.SBUF_USABLE_BYTES
    sbuf_fmax = T.SBUF_USABLE_BYTES // 4
    sbuf_size_bytes = T.SBUF_USABLE_BYTES * 128
    total_available_sbuf_size = T.SBUF_USABLE_BYTES


# --- creation ----------------------------------------------------------------------------------------

def ndarray(shape, dtype=None, buffer=sbuf, name: str = "", address=None, **kwargs) -> NkiTensor:
    """A new, uninitialised tensor in `buffer`."""
    return _create(shape, dtype, buffer, name, address, "nl.ndarray", I.where(), kwargs)


def _create(shape, dtype, buffer, name, address, api: str, line: int, kwargs: dict) -> NkiTensor:
    m = machine()
    if kwargs:
        raise TypeError(f"{api}() got unexpected keyword arguments {sorted(kwargs)}")
    shape = _shape(shape, api)
    if dtype is None:
        raise errors.OperandTypeError(f"{api} needs a dtype in the current NKI (e.g. dtype=nl.float32)")
    dt = I.normalize_dtype(dtype)
    bname = "sbuf" if buffer is None else str(getattr(buffer, "value", buffer))
    if bname not in _BUFFERS:
        raise errors.OperandTypeError(f"unknown buffer {buffer!r}; use nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm")
    mem, kind = _BUFFERS[bname]
    label = str(name or "")
    if mem == HBM:
        buf = T.Buffer(m, HBM, shape, dt, 0, kind=kind, name=label, line=line)
        if kind == "output":
            buf.written = Coverage(shape)
            m.outputs.append(buf)
            if not m.shape_only:
                buf.blocks[()] = np.empty(shape, dtype=dt)
        return T.whole(buf)
    if len(shape) < 2:
        shape = shape + (1,) * (2 - len(shape))
    per_partition = T.prod(shape[1:]) * dt.itemsize
    what = f"{mem.upper()} tensor{' ' + repr(label) if label else ''} {list(shape)} {dt.name}"
    if shape[0] > T.PMAX:
        raise errors.PartitionLimitError(
            f"number of partitions {shape[0]} of {what} exceeds the architecture limit of {T.PMAX}")
    if mem == PSUM:
        _check_psum(what, shape, per_partition, address)
    else:
        T.check_tile_limits(SBUF, shape, dt, label)
        if address is not None:
            _check_address(what, shape, per_partition, address, T.SBUF_USABLE_BYTES, 1)
    buf = T.Buffer(m, mem, shape, dt, 0, name=label, line=line)
    if not m.stack:
        m.declare(T.prod(shape) * dt.itemsize)
    return T.whole(buf)


def _shape(shape, api: str) -> tuple[int, ...]:
    if is_int(shape):
        shape = (shape,)
    dims = []
    for n in shape:
        if type(n).__name__ == "par_dim":
            raise errors.LegacyConstructError(f"{api}: nl.par_dim is legacy; the partition dimension is always dim 0")
        if not is_int(n) or int(n) < 1:
            raise errors.OperandTypeError(f"{api}: shape dimensions must be positive integers, got {tuple(shape)!r}")
        dims.append(int(n))
    return tuple(dims)


def _check_psum(what: str, shape, per_partition: int, address) -> None:
    total = PSUM_BANKS * T.PSUM_BANK_BYTES
    if per_partition > total:
        raise errors.PsumAllocationError(
            f"{what} needs {per_partition} bytes per partition; PSUM has {PSUM_BANKS} banks of "
            f"{T.PSUM_BANK_BYTES} bytes ({total} bytes) per partition")
    if address is not None:
        _check_address(what, shape, per_partition, address, total, T.PSUM_BANK_BYTES)


def _check_address(what: str, shape, per_partition: int, address, capacity: int, align: int) -> None:
    try:
        p0, f0 = (int(a) for a in address)
    except (TypeError, ValueError):
        raise errors.OperandTypeError(f"address of {what} must be (partition offset, byte offset), got {address!r}") from None
    if p0 < 0 or p0 + shape[0] > T.PMAX:
        raise errors.PartitionLimitError(f"{what} at partition offset {p0} exceeds the {T.PMAX} partitions")
    if f0 < 0 or f0 % align:
        raise errors.PsumAllocationError(
            f"{what} at byte offset {f0}: a PSUM address must start at a bank (a multiple of {align} bytes)")
    if f0 + per_partition > capacity:
        raise errors.PsumAllocationError(
            f"{what} at byte offset {f0} needs {per_partition} bytes per partition and ends past the {capacity} bytes "
            f"of each partition")


def _filled(shape, dtype, buffer, name, value, api: str) -> NkiTensor:
    line = I.where()
    t = _create(shape, dtype, buffer, name, None, api, line, {})
    if t._b.memory == HBM:
        raise errors.HbmInitValueError(f"{api} cannot create an initialised HBM tensor; fill an SBUF tile and "
                                       f"nisa.dma_copy it")
    isa.fill(t, value, api, line)
    return t


def zeros(shape, dtype=None, buffer=sbuf, name: str = "") -> NkiTensor:
    """A zero-filled tensor (a memset)."""
    return _filled(shape, dtype, buffer, name, 0, "nl.zeros")


def ones(shape, dtype=None, buffer=sbuf, name: str = "") -> NkiTensor:
    """A tensor of ones (a memset)."""
    return _filled(shape, dtype, buffer, name, 1, "nl.ones")


def full(shape, fill_value, dtype=None, buffer=sbuf, name: str = "") -> NkiTensor:
    """A tensor filled with `fill_value` (a memset)."""
    return _filled(shape, dtype, buffer, name, fill_value, "nl.full")


def zeros_like(x, dtype=None, buffer=None, name: str = "") -> NkiTensor:
    return _filled(x.shape, dtype or x.dtype, buffer or x.buffer, name, 0, "nl.zeros_like")


def empty_like(x, dtype=None, buffer=None, name: str = "") -> NkiTensor:
    return _create(x.shape, dtype or x.dtype, buffer or x.buffer, name, None, "nl.empty_like", I.where(), {})


def shared_constant(constant, dtype=None) -> NkiTensor:
    """An HBM tensor holding `constant` (embedded in the kernel)."""
    return E.constant(constant, dtype, I.where())


# --- loops ------------------------------------------------------------------------------------------

def _loop(args: tuple, api: str) -> LoopRange:
    """All range-like iterators of the current NKI are Python `range`, unrolled by the compiler."""
    return loop_range("static", args, api)


def affine_range(*args) -> LoopRange:
    """An unrolled loop (an alias of Python `range`)."""
    return _loop(args, "nl.affine_range")


def sequential_range(*args) -> LoopRange:
    """An unrolled loop (an alias of Python `range`)."""
    return _loop(args, "nl.sequential_range")


def static_range(*args) -> LoopRange:
    """An unrolled loop (an alias of Python `range`)."""
    return _loop(args, "nl.static_range")


def kernel_range(*args):
    """Python `range` in kernel code: an unrolled loop while a kernel runs."""
    if current() is None:
        return builtins.range(*args)
    return _loop(args, "range")


def dynamic_range(*args) -> LoopRange:
    """A loop that runs on the device (integer bounds only, here)."""
    _check_static_bounds(args, "nl.dynamic_range")
    return loop_range("sequential", args, "nl.dynamic_range")


def fori_loop(lower, upper, body_fun, step=1) -> None:
    """A device loop: `body_fun(i)` for i in range(lower, upper, step) (integer bounds only)."""
    _check_static_bounds((lower, upper, step), "nl.fori_loop")
    if not callable(body_fun):
        raise errors.OperandTypeError(f"body_fun of nl.fori_loop must be a function, got {type(body_fun).__name__}")
    for i in loop_range("sequential", (lower, upper, step), "nl.fori_loop"):
        body_fun(i)


def _check_static_bounds(args, api: str) -> None:
    for a in args:
        if not is_int(a):
            raise errors.UnsupportedApiError(
                f"{api} with bounds held in registers is not supported by the emulator; use integer bounds")


def while_loop(init, body_fun) -> None:
    raise errors.UnsupportedApiError("nl.while_loop (a register-controlled device loop) is not supported by the emulator")


# --- data movement ----------------------------------------------------------------------------------

def load(src, dtype=None, **kwargs) -> NkiTensor:
    """HBM -> a new SBUF tile (DMA)."""
    if "mask" in kwargs:
        raise errors.LegacyConstructError("nl.load has no mask= in the current NKI; clip the source slice instead")
    return E.load("nl.load", src, None, dtype, I.where())


def store(dst, value, **kwargs) -> None:
    """An SBUF tile -> HBM (DMA)."""
    isa.copy_by_dma("nl.store", dst, value, I.where(), kwargs)


# --- high-level math (new tiles) -----------------------------------------------------------------------

def operator(t: NkiTensor, other, op: str, reverse: bool) -> NkiTensor:
    """Python operators on tiles (`a + b`, `t * 2`) behave like the nl calls."""
    x, y = (other, t) if reverse else (t, other)
    return E.elementwise(f"operator {op}", op, x, y, None, None, I.where(), operator=True)


def broadcast_to(x, shape, dtype=None) -> NkiTensor:
    """A new tile holding `x` broadcast to `shape` (across partitions through TensorE)."""
    line = I.where()
    res = E.broadcast("nl.broadcast_to", x, shape, line)
    if dtype is not None and I.normalize_dtype(dtype) != res._b.dtype:
        return E.copy("nl.broadcast_to", res, None, dtype, line)
    return res


def tensor_broadcast_to(t: NkiTensor, shape) -> NkiTensor:
    """`t.broadcast_to(shape)` (the FrontEnd's handler)."""
    return E.broadcast("broadcast_to", t, shape, I.where())


def _binary(op: str):
    def fn(x, y, dtype=None):
        return E.elementwise(f"nl.{op}", op, x, y, dtype, None, I.where())
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Element-wise {op} into a new tile."
    fn.nki_alu = op
    return fn


def _unary(func: str):
    def fn(x, dtype=None):
        return E.unary_activation(f"nl.{func}", func, x, dtype, None, I.where())
    fn.__name__ = fn.__qualname__ = func
    fn.__doc__ = f"{func} of each element into a new tile (ScalarE)."
    fn.nki_act = func
    return fn


def _reduction(name: str, op: str):
    def fn(x, axis, dtype=None, keepdims=False):
        return E.reduce(f"nl.{name}", op, x, axis, dtype, None, keepdims, I.where())
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Reduce with {op} along free axes into a new tile (VectorE)."
    fn.nki_alu = op
    return fn


BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "equal", "not_equal", "greater",
          "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
          "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
UNARY = ("exp", "log", "sqrt", "rsqrt", "square", "tanh", "sigmoid", "silu", "gelu", "gelu_apprx_tanh", "relu",
         "abs", "sin", "cos", "arctan", "erf", "softplus", "mish", "reciprocal", "sign", "negative")
REDUCTIONS = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply", "all": "logical_and"}

FUNCTIONS = {name: _binary(name) for name in BINARY}
FUNCTIONS.update({name: _unary(name) for name in UNARY if name in ops.ACTIVATION})
FUNCTIONS.update({name: _reduction(name, op) for name, op in REDUCTIONS.items()})


def mean(x, axis, dtype=None, keepdims=False) -> NkiTensor:
    """Average along free axes into a new tile."""
    return E.mean("nl.mean", x, axis, dtype, None, keepdims, I.where())


def copy(x, dtype=None) -> NkiTensor:
    """A copy of a tile into a new SBUF tile (the activation function `nl.copy` too)."""
    return E.copy("nl.copy", x, None, dtype, I.where())


copy.nki_act = "copy"


def transpose(x, dtype=None) -> NkiTensor:
    """Swap the partition and free axes of a 2-D tile (TensorE, into PSUM)."""
    x = I.tile(x, "x", "nl.transpose")
    if len(x._shape) != 2:
        raise errors.MaxDimensionError(f"parameter 'x{list(x._shape)}' of 'nl.transpose' must be 2-D")
    return E.transpose_tensore("nl.transpose", x, I.where(), dtype)


# --- SPMD and debugging -------------------------------------------------------------------------------

def program_id(axis=0) -> int:
    """The logical core running the kernel (launches run one core here)."""
    machine()
    return 0


def num_programs(axes=0) -> int:
    machine()
    return 1


def program_ndim() -> int:
    machine()
    return 0


def device_print(print_prefix, tensor) -> None:
    """Print a tile's values (full-data runs only)."""
    m = machine()
    x = I.tile(tensor, "tensor", "device_print", (SBUF, PSUM, HBM))
    if not m.shape_only:
        print(print_prefix, T.array(x))


def __getattr__(name: str):
    if name in FUNCTIONS:
        return FUNCTIONS[name]
    lazy = {"bfloat16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn"}
    if name in lazy:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))
    raise AttributeError(name)


EXPORTS = [
    "sbuf", "psum", "hbm", "private_hbm", "shared_hbm", "tile_size", "MemoryRegion",
    "float32", "float16", "tfloat32", "int8", "int16", "int32", "uint8", "uint16", "uint32", "bool_",
    "ds", "affine_range", "sequential_range", "static_range", "dynamic_range", "fori_loop", "while_loop",
    "ndarray", "zeros", "ones", "full", "zeros_like", "empty_like", "shared_constant",
    "load", "store", "broadcast_to", "mean", "copy", "transpose",
    "program_id", "num_programs", "program_ndim", "device_print",
] + list(FUNCTIONS)
