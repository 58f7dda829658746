"""`nki.language` (nl) of the current dialect: memory regions, dtypes, tile sizes, tensor
creation (`nl.ndarray`, uninitialised; `nl.zeros/ones/full`), the loop iterators (aliases
of Python `range`, unrolled), the device loop `nl.fori_loop`, `nl.load/store` wrappers,
and the high-level math APIs that return new tiles, lowered like their legacy namesakes.

PSUM holds 8 banks of 2 KiB per partition: a PSUM tensor may span several banks, and an
explicit `address=(partition, byte offset)` must start at a bank.
"""

from __future__ import annotations

import builtins
import dataclasses

import numpy as np

from .. import errors
from ..core import engines as E
from ..core import instr as I
from ..core import launch
from ..core import ops
from ..core import tensor as T
from ..core.coverage import Coverage
from ..core.indexing import ds, is_int  # noqa: F401 (nl.ds)
from ..core.loops import LoopRange, loop_range
from ..core.indexing import broadcast_shapes
from ..core.runtime import current, machine
from ..emulation import APPROXIMATE, EXACT, REFUSED, emulation
from ..core.tensor import NkiTensor
from . import isa, views
from ..trace import ACT, COPY, DMA, DMA_LOAD, GPSIMD_ENGINE, HBM, MEMSET, PSUM, RECIP, SBUF, SCALAR, TS, TT, VECTOR

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


def _sbuf_usable() -> int:
    """SBUF bytes per partition left to kernels on the running kernel's target (trn1 outside a run)."""
    m = current()
    return m.capacity.sbuf_usable_bytes if m is not None else T.SBUF_USABLE_BYTES


class _TileSize:
    """Hardware tile limits (`nl.tile_size`); the SBUF figures are the running target's."""

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

    @property
    def sbuf_fmax_bytes(self) -> int:
        return _sbuf_usable()

    @property
    def sbuf_fmax(self) -> int:
        return _sbuf_usable() // 4

    @property
    def sbuf_size_bytes(self) -> int:
        return _sbuf_usable() * 128

    @property
    def total_available_sbuf_size(self) -> int:
        return _sbuf_usable()


tile_size = _TileSize()


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
        if kind == "output":
            return T.whole(launch.shared_tensor(m, shape, dt, lambda: _hbm_tensor(m, shape, dt, kind, label, line)))
        return T.whole(_hbm_tensor(m, shape, dt, kind, label, line))
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
            _check_address(what, shape, per_partition, address, m.capacity.sbuf_usable_bytes, 1)
    buf = T.Buffer(m, mem, shape, dt, 0, name=label, line=line)
    if not m.stack:
        m.declare(T.prod(shape) * dt.itemsize)
    return T.whole(buf)


def _hbm_tensor(m, shape, dt, kind: str, label: str, line: int) -> T.Buffer:
    """A new HBM tensor: shared (`nl.shared_hbm`, an output of the kernel) or private (`nl.hbm`,
    `nl.private_hbm`), which a kernel may return too (the SDK's trn2 matmul tutorial does): it
    becomes an output when returned, and must then be written completely like a shared one."""
    buf = T.Buffer(m, HBM, shape, dt, 0, kind=kind, name=label, line=line)
    buf.written = Coverage(shape)
    if kind == "output":
        m.outputs.append(buf)
        if not m.shape_only:
            buf.blocks[()] = np.empty(shape, dtype=dt)
    else:
        m.state.setdefault(launch.RETURNABLE, set()).add(buf.id)
    return buf


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


DEVICE_LOOP = ("integer bounds only (bounds held in registers are refused) and the loop index is a Python int, "
               "not a VirtualRegister; the loop runs on the device as a sequential loop")


@emulation(APPROXIMATE, DEVICE_LOOP)
def dynamic_range(*args) -> LoopRange:
    """A loop that runs on the device (integer bounds only, here)."""
    _check_static_bounds(args, "nl.dynamic_range")
    return loop_range("sequential", args, "nl.dynamic_range")


@emulation(APPROXIMATE, DEVICE_LOOP)
def fori_loop(lower, upper, body_fun, step=1) -> None:
    """A device loop: `body_fun(i)` for i in range(lower, upper, step) (integer bounds only)."""
    _check_static_bounds((lower, upper, step), "nl.fori_loop")
    if not callable(body_fun):
        raise errors.OperandTypeError(f"body_fun of nl.fori_loop must be a function, got {type(body_fun).__name__}")
    for i in loop_range("sequential", (lower, upper, step), "nl.fori_loop"):
        body_fun(i)


def _check_static_bounds(args, api: str) -> None:
    if machine().state.get("no_reorder"):
        raise errors.UnsupportedApiError(
            f"{api} (a register-based dynamic loop) is not supported inside a `with nl.no_reorder():` block; use a "
            f"static loop (nl.affine_range, nl.sequential_range, nl.static_range) there")
    for a in args:
        if not is_int(a):
            raise errors.UnsupportedApiError(
                f"{api} with bounds held in registers is not supported by the emulator; use integer bounds")


WHILE_LOOP = ("nl.while_loop (a device loop controlled by a register the body returns) is not supported by the "
              "emulator: its trip count depends on data; use nl.fori_loop or a static loop with integer bounds")


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
        if op == "power" and not isinstance(y, NkiTensor):
            raise errors.DeviceUnsupportedError(POWER_SCALAR)
        return E.elementwise(f"nl.{op}", op, x, y, dtype, None, I.where())
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Element-wise {op} into a new tile."
    fn.nki_alu = op
    return fn


# The NKI release notes' known limitations of nki.language (release-notes/components/nki.rst, NKI
# 0.4-0.6): what fails on the device fails here, with the documented message.
DIVIDE = ("nki.language.divide is not supported: division is not available as a hardware instruction; "
          "as a workaround, multiply by the reciprocal: nl.multiply(x, nl.reciprocal(y))")
POWER_SCALAR = ("nki.language.power does not support scalar exponents: nl.power(tile, scalar) is not supported; "
                "use nl.power(tile, tile), where both operands are tiles")
COPY_ACROSS = ("nki.language.copy does not support cross-buffer copies (e.g. PSUM to SBUF); copy with "
               "nisa.tensor_copy(dst=..., src=...) into an SBUF tensor instead")


@emulation(REFUSED, DIVIDE)
def divide(x, y, dtype=None):
    """Refused as on the device (DIVIDE)."""
    raise errors.DeviceUnsupportedError(DIVIDE)


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


BINARY = ("add", "subtract", "multiply", "maximum", "minimum", "power", "equal", "not_equal", "greater",
          "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
          "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
UNARY = ("exp", "log", "sqrt", "rsqrt", "square", "tanh", "sigmoid", "silu", "gelu", "gelu_apprx_tanh", "relu",
         "abs", "sin", "cos", "arctan", "erf", "softplus", "mish", "reciprocal", "sign", "negative")
REDUCTIONS = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply", "all": "logical_and"}

FUNCTIONS = {name: _binary(name) for name in BINARY}
FUNCTIONS["divide"] = divide
emulation(EXACT, "a scalar exponent is refused, as on the device")(FUNCTIONS["power"])
FUNCTIONS.update({name: _unary(name) for name in UNARY if name in ops.ACTIVATION})
FUNCTIONS.update({name: _reduction(name, op) for name, op in REDUCTIONS.items()})


@emulation(APPROXIMATE, "the no-op operator: nisa.activate2 skips an op0/op1 stage given it; the other instructions "
                        "refuse it as an operator they do not take; calling it is refused")
def bypass(*args, **kwargs):
    """`nl.bypass`: an operator value for an instruction's op0/op1 (a skipped stage), not a function."""
    raise errors.OperandTypeError("nl.bypass is an operator for the op0/op1 of an ISA instruction (a skipped stage), "
                                  "not a function to call", *errors.kernel_location(1))


FUNCTIONS["bypass"] = bypass


def mean(x, axis, dtype=None, keepdims=False) -> NkiTensor:
    """Average along free axes into a new tile."""
    return E.mean("nl.mean", x, axis, dtype, None, keepdims, I.where())


def copy(x, dtype=None) -> NkiTensor:
    """A copy of an SBUF tile into a new SBUF tile (the activation function `nl.copy` too); a PSUM
    tile is refused as on the device (COPY_ACROSS)."""
    t = I.tile(x, "x", "nl.copy", (SBUF, PSUM))
    if t._b.memory == PSUM:
        raise errors.DeviceUnsupportedError(COPY_ACROSS)
    return E.copy("nl.copy", x, None, dtype, I.where())


copy.nki_act = "copy"
emulation(EXACT, "a PSUM tile is refused, as on the device (cross-buffer copies are not supported)")(copy)


def transpose(x, dtype=None) -> NkiTensor:
    """Swap the partition and free axes of a 2-D tile (TensorE, into PSUM)."""
    x = I.tile(x, "x", "nl.transpose")
    if len(x._shape) != 2:
        raise errors.MaxDimensionError(f"parameter 'x{list(x._shape)}' of 'nl.transpose' must be 2-D")
    return E.transpose_tensore("nl.transpose", x, I.where(), dtype)


# --- more high-level math: activation-table functions, rounding, selection, norms --------------------

_GELU_SIGMOID = ops.GELU_SIGMOID   # the usual sigmoid approximation of GELU: x * sigmoid(1.702 x)


def _sigmoid(x):
    return ops.ACTIVATION["sigmoid"](x)


def _gelu_sigmoid_dx(x):
    s = _sigmoid(_GELU_SIGMOID * x)
    return s + _GELU_SIGMOID * x * s * (np.float32(1.0) - s)


# ScalarE functions of these nl calls: the core's activation table (shared with the legacy
# dialect), and the one only this dialect has: name -> f(x) on fp32 arrays.
ACTIVATIONS = {
    "erf_dx": ops.ACTIVATION["erf_dx"],
    "gelu_dx": ops.ACTIVATION["gelu_dx"],
    "gelu_apprx_sigmoid": ops.ACTIVATION["gelu_apprx_sigmoid"],
    "gelu_apprx_sigmoid_dx": _gelu_sigmoid_dx,
    "silu_dx": ops.ACTIVATION["silu_dx"],
    "ceil": ops.ACTIVATION["ceil"],
}


def _table_unary(name: str, fn, doc: str):
    """A unary nl function computed by one ScalarE activation (`fn` on fp32 values)."""
    api = f"nl.{name}"

    def f(x, dtype=None):
        line = I.where()
        x = I.tile(x, "x", api)
        dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
        return I.compute(api, ACT, (SCALAR,), name, [("x", x)], x._shape, dt, None, fn, line=line)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc + " (one ScalarE activation)"
    if name in ops.ACTIVATION:
        f.nki_act = name   # usable as the `op` of nisa.activation too
    return f


erf_dx = _table_unary("erf_dx", ACTIVATIONS["erf_dx"], "Derivative of erf: 2 / sqrt(pi) * exp(-x**2)")
gelu_dx = _table_unary("gelu_dx", ACTIVATIONS["gelu_dx"], "Derivative of the (erf) GELU: Phi(x) + x * phi(x)")
silu_dx = _table_unary("silu_dx", ACTIVATIONS["silu_dx"], "Derivative of SiLU: s * (1 + x * (1 - s)), s = sigmoid(x)")
gelu_apprx_sigmoid = emulation(
    APPROXIMATE, "x * sigmoid(1.702 * x), the usual sigmoid approximation of GELU (the documentation does not give "
                 "the constant), in exact fp32")(
    _table_unary("gelu_apprx_sigmoid", ACTIVATIONS["gelu_apprx_sigmoid"], "GELU with the sigmoid approximation"))
gelu_apprx_sigmoid_dx = emulation(
    APPROXIMATE, "the derivative of x * sigmoid(1.702 * x) (the documentation does not give the constant), in "
                 "exact fp32")(
    _table_unary("gelu_apprx_sigmoid_dx", ACTIVATIONS["gelu_apprx_sigmoid_dx"],
                 "Derivative of the sigmoid-approximated GELU"))
ceil = _table_unary("ceil", np.ceil, "The smallest integer >= x")


TRN3_ONLY = ("runs on every target: the emulator does not know the target while the kernel runs, and the device "
             "has it on NeuronCore-v4 (trn3) and newer only")


def _lift(a, ndim: int):
    """A (P, 1) operand array seen against an ndim-D tile (P, F1, F2...)."""
    if isinstance(a, np.ndarray) and a.ndim < ndim:
        return a.reshape(a.shape + (1,) * (ndim - a.ndim))
    return a


def custom_binary(api: str, func: str, fn, x, y, dtype, line: int, engines=(VECTOR,)) -> NkiTensor:
    """x (fn) y element-wise into a new tile, lowered like nl.add: tile and tile of the same
    shape -> tensor_tensor, a (P, 1) tile or a scalar -> tensor_scalar; a tile of one
    partition is broadcast across partitions first."""
    tx, ty = isinstance(x, NkiTensor), isinstance(y, NkiTensor)
    if not tx and not ty:
        if not (I.is_scalar(x) and I.is_scalar(y)):
            raise errors.OperandTypeError(f"'{api}' needs tiles or scalars, got {type(x).__name__} and {type(y).__name__}")
        return fn(np.float32(x), np.float32(y))
    dt = I.result_dtype([x, y], dtype)
    if tx and ty:
        x, y = I.tile(x, "x", api), I.tile(y, "y", api)
        px, py = x._shape[0], y._shape[0]
        if px != py:
            if px != 1 and py != 1:
                raise errors.PartitionMismatchError(
                    f"number of partitions (dimension 0 size of a tile) mismatch in parameters (x{list(x._shape)}, "
                    f"y{list(y._shape)}) of '{api}'")
            if px == 1:
                x = E.broadcast("broadcast_to", x, (py,) + x._shape[1:], line)
            else:
                y = E.broadcast("broadcast_to", y, (px,) + y._shape[1:], line)
        out = broadcast_shapes(x._shape, y._shape)
        if out is None or len(x._shape) != len(y._shape):
            raise errors.BroadcastError(
                f"Parameter shapes (x{list(x._shape)}, y{list(y._shape)}) of '{api}' could not be broadcast together")
        if x._shape == y._shape or (T.prod(x._shape[1:]) > 1 and T.prod(y._shape[1:]) > 1):
            return I.compute(api, TT, engines, func, [("x", x), ("y", y)], out, dt, None, fn, line=line)
        n = len(out)
        if T.prod(x._shape[1:]) == 1:
            return I.compute(api, TS, engines, f"{func}(reverse)", [("data", y), ("operand0", x)], out, dt, None,
                             lambda d, v: fn(_lift(v, n), d), line=line)
        return I.compute(api, TS, engines, func, [("data", x), ("operand0", y)], out, dt, None,
                         lambda d, v: fn(d, _lift(v, n)), line=line)
    data, s = (x, y) if tx else (y, x)
    if not I.is_scalar(s):
        raise errors.OperandTypeError(f"'{api}' cannot combine a tile with {type(s).__name__}")
    data = I.tile(data, "x" if tx else "y", api)
    sv = np.float32(s)
    return I.compute(api, TS, engines, func if tx else f"{func}(reverse)", [("data", data)], data._shape, dt, None,
                     (lambda d: fn(d, sv)) if tx else (lambda d: fn(sv, d)), line=line)


@emulation(APPROXIMATE, TRN3_ONLY)
def abs_max(x, y, dtype=None):
    """The input of larger magnitude, signed: x where |x| > |y|, else y (a tie gives y); VectorE."""
    return custom_binary("nl.abs_max", "abs_max_signed", lambda a, b: np.where(np.abs(a) > np.abs(b), a, b),
                         x, y, dtype, I.where())


@emulation(APPROXIMATE, TRN3_ONLY)
def abs_min(x, y, dtype=None):
    """The input of smaller magnitude, signed: x where |x| < |y|, else y (a tie gives y); VectorE."""
    return custom_binary("nl.abs_min", "abs_min_signed", lambda a, b: np.where(np.abs(a) < np.abs(b), a, b),
                         x, y, dtype, I.where())


def invert(x, dtype=None) -> NkiTensor:
    """Bitwise NOT of an integer tile: XOR with all ones (VectorE)."""
    line = I.where()
    t = I.tile(x, "x", "nl.invert")
    if t._b.dtype.kind not in "iub":
        raise errors.UnsupportedDtypeError(
            f"operand 'x' of 'nl.invert' must be integer typed, got {t._b.dtname} (nl.invert is XOR with all ones)")
    return E.elementwise("nl.invert", "bitwise_xor", t, -1, dtype, None, line)


def logical_not(x, dtype=None) -> NkiTensor:
    """NOT of a 0/1 tile: XOR with 1 (VectorE)."""
    return E.elementwise("nl.logical_not", "logical_xor", x, 1, dtype, None, I.where())


@emulation(APPROXIMATE, "priced as one VectorE instruction reading condition, x and y (the documentation does not "
                        "say which instructions it lowers to)")
def where(condition, x, y, dtype=None) -> NkiTensor:
    """x where condition is nonzero (1.0), else y; x and y tiles or scalars, broadcast like
    nl.add's operands."""
    return E.select("nl.where", condition, x, y, dtype, None, I.where())


def expand_dims(x, axis) -> NkiTensor:
    """A view of tile `x` with a new size-1 axis at `axis` (each of several, in order)."""
    t = I.tile(x, "x", "nl.expand_dims", (SBUF, PSUM, HBM))
    for a in sorted(int(a) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))):
        t = views.expand_dim(t, a)
    return t


@emulation(APPROXIMATE, "an out-of-bounds index gives NaN (uninitialised memory; the device: undefined values); "
                        "priced as one GpSimdE pass over the result")
def gather_flattened(data, indices, axis=0, dtype=None) -> NkiTensor:
    """Per partition, the elements of `data`'s flattened free dimensions at `indices`
    (integers): out[p, j...] = data[p].flat[indices[p, j...]]; the result has the shape of
    `indices`."""
    line = I.where()
    api = "nl.gather_flattened"
    if axis != 0:
        raise errors.UnsupportedApiError(f"'{api}' with axis={axis!r} is not supported by the emulator (the flattened "
                                         f"gather, axis=0, is)")
    d, ix = I.tile(data, "data", api), I.tile(indices, "indices", api)
    if ix._b.dtype.kind not in "iu":
        raise errors.UnsupportedDtypeError(f"'indices' of '{api}' must hold integers (uint32), got {ix._b.dtname}")
    for name, t in (("data", d), ("indices", ix)):
        if not 2 <= len(t._shape) <= 4:
            raise errors.MaxDimensionError(f"'{name}{list(t._shape)}' of '{api}' must have 2 to 4 dimensions")
    if d._shape[0] != ix._shape[0]:
        raise errors.PartitionMismatchError(
            f"'data{list(d._shape)}' and 'indices{list(ix._shape)}' of '{api}' have different partition counts")
    dt = I.normalize_dtype(dtype) if dtype is not None else d._b.dtype
    P = d._shape[0]

    def fn(a, idx):
        flat = a.reshape(P, -1)
        k = idx.reshape(P, -1).astype(np.int64)
        ok = (k >= 0) & (k < flat.shape[1])
        got = np.take_along_axis(flat, np.where(ok, k, 0), axis=1)
        return np.where(ok, got, np.float32(np.nan)).reshape(idx.shape)
    return I.compute(api, TT, (GPSIMD_ENGINE,), "gather", [("data", d), ("indices", ix)], ix._shape, dt, None, fn,
                     line=line, memories=(SBUF,))


def _all_free_axes(x: NkiTensor, axis, api: str) -> tuple[int, ...]:
    axes = E.free_axes(axis, len(x._shape), api)
    if axes != tuple(range(1, len(x._shape))):
        raise errors.UnsupportedApiError(
            f"'{api}' along axes {list(axes)} of a tile of shape {list(x._shape)} is not supported by the emulator: "
            f"reduce along all free axes (axis={tuple(range(1, len(x._shape)))})")
    return axes


def _as_2d(x: NkiTensor, api: str) -> NkiTensor:
    if len(x._shape) == 2:
        return x
    return views.reshape(x, (x._shape[0], T.prod(x._shape[1:])))


def softmax(x, axis=-1, dtype=None) -> NkiTensor:
    """exp(x - max) / sum(exp(x - max)) along all free axes: a max reduction, ScalarE's exp with
    the negated maximum as bias, a sum reduction, a reciprocal and a multiply."""
    line = I.where()
    api = "nl.softmax"
    x = I.tile(x, "x", api)
    shape = x._shape
    _all_free_axes(x, axis, api)
    x2 = _as_2d(x, api)
    mx = E.reduce(api, "maximum", x2, 1, F32, None, False, line)
    neg = I.compute(api, TS, (VECTOR, SCALAR), "multiply", [("data", mx)], mx._shape, F32, None, lambda a: -a,
                    line=line)
    e = E.activation(api, "exp", x2, neg, 1.0, None, F32, line)
    s = E.reduce(api, "add", e, 1, F32, None, False, line)
    r = I.compute(api, RECIP, (VECTOR,), "reciprocal", [("data", s)], s._shape, F32, None,
                  lambda a: np.float32(1.0) / a, line=line)
    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    out = I.compute(api, TS, (VECTOR, SCALAR), "multiply", [("data", e), ("operand0", r)], e._shape, dt, None,
                    np.multiply, line=line)
    return out if out._shape == shape else views.reshape(out, shape)


def var(x, axis, dtype=None, keepdims=False) -> NkiTensor:
    """Variance (the mean of squared deviations) along free axes, in fp32: a mean, a subtract,
    a square and a mean. As documented, the result keeps the reduced axes (size 1) whatever
    `keepdims` says."""
    return E.variance("nl.var", x, axis, dtype, None, True, I.where())


@emulation(APPROXIMATE, "RMS(x) = sqrt(sum(x**2 along axis) / n + epsilon), epsilon inside the square root as in "
                        "RMSNorm (the documentation does not spell the formula out); a square, a sum, one ScalarE "
                        "rsqrt and two multiplies")
def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None) -> NkiTensor:
    """x / RMS(x) * w, RMS along `axis` over `n` values."""
    line = I.where()
    api = "nl.rms_norm"
    x = I.tile(x, "x", api)
    if not is_int(n) or int(n) < 1:
        raise errors.OperandTypeError(f"'n' of '{api}' must be a positive integer, got {n!r}")
    cdt = I.normalize_dtype(compute_dtype) if compute_dtype is not None else F32
    sq = E.unary_activation(api, "square", x, cdt, None, line)
    s = E.reduce(api, "add", sq, axis, cdt, None, True, line)
    r = E.activation(api, "rsqrt", s, float(epsilon), np.float32(1.0 / int(n)), None, cdt, line)
    y = E.elementwise(api, "multiply", x, r, cdt, None, line)
    return E.elementwise(api, "multiply", y, w, dtype if dtype is not None else x._b.dtype, None, line)


def matmul(x, y, transpose_x=False) -> NkiTensor:
    """x @ y (x.T @ y with transpose_x) into a new PSUM tile; without transpose_x, x is first
    transposed on TensorE and copied to SBUF (nc_matmul contracts over partitions)."""
    line = I.where()
    api = "nl.matmul"
    x = I.tile(x, "x", api, (SBUF,))
    y = I.tile(y, "y", api, (SBUF,))
    if len(x._shape) != 2 or len(y._shape) != 2:
        raise errors.MaxDimensionError(
            f"parameters 'x{list(x._shape)}', 'y{list(y._shape)}' of '{api}' exceed max supported number of "
            f"dimensions of 2")
    stationary = x
    if not transpose_x:
        if x._shape[1] != y._shape[0]:
            raise errors.MatmulShapeError(
                f"contraction sizes of '{api}' operands x{list(x._shape)} (K = {x._shape[1]}) and y{list(y._shape)} "
                f"(K = {y._shape[0]}) differ")
        xt = E.transpose_tensore(api, x, line)
        stationary = I.compute(api, COPY, (VECTOR, SCALAR), "copy", [("src", xt)], xt._shape, F32, None,
                               lambda a: a, line=line)
    return E.matmul(api, stationary, y, None, line)


def load_transpose2d(src, dtype=None) -> NkiTensor:
    """HBM [F, P] -> a new SBUF tile [P, F], transposed by the DMA engine (element-wise
    descriptors)."""
    m = machine()
    line = I.where()
    api = "nl.load_transpose2d"
    src = I.tile(src, "src", api, (HBM,))
    if len(src._shape) != 2:
        raise errors.MaxDimensionError(f"parameter 'src{list(src._shape)}' of '{api}' must be 2-D")
    if src._checks:
        T.check_bounds(src)
    shape = (src._shape[1], src._shape[0])
    dt = I.normalize_dtype(dtype) if dtype is not None else src._b.dtype
    res = I.new_result(shape, dt, SBUF, DMA_LOAD, line)
    if not m.shape_only and 0 not in shape:
        T.write(res, T.array(src).T)
    n = T.count(res)
    dma = I.dma_info(res, src, n, shape[0])
    dma = dataclasses.replace(dma, run_bytes=src._b.itemsize, runs=n)   # element-wise transposing descriptors
    I.record(m, DMA_LOAD, api, (DMA,), res, res, None, None, [src], line, "transpose", dma=dma)
    return res


def shared_identity_matrix(n, dtype=None, dst=None) -> NkiTensor:
    """The n x n identity in SBUF (one per size and dtype: later calls return the same tile),
    or written into `dst` (an SBUF tensor) by DMA."""
    m = machine()
    line = I.where()
    api = "nl.shared_identity_matrix"
    if not is_int(n) or not 1 <= int(n) <= T.PMAX:
        raise errors.PartitionLimitError(f"'n' of '{api}' must be an integer from 1 to {T.PMAX}, got {n!r}")
    n = int(n)
    dt = I.normalize_dtype(dtype if dtype is not None else np.uint8)
    if dst is not None:
        const = E.constant(np.identity(n), dt, line)
        isa.copy_by_dma(api, dst, const, line)
        return dst
    cache = m.state.setdefault("shared_identity", {})
    hit = cache.get((n, dt))
    if hit is None:
        saved = m.scope, m.path
        m.scope, m.path = (), ()   # kernel level: usable anywhere
        try:
            hit = cache[(n, dt)] = E.load("nl.load", E.constant(np.identity(n), dt, line), None, None, line)
        finally:
            m.scope, m.path = saved
    return hit


# --- randomness ---------------------------------------------------------------------------------------

RANDOM = ("values from the emulator's own generator (NumPy PCG64, seeded by nl.random_seed's value, 0 until a "
          "seed is set): not the device's random stream")


def _rng(m):
    g = m.state.get("nl_rng")
    if g is None:
        g = m.state["nl_rng"] = np.random.Generator(np.random.PCG64(0))
    return g


@emulation(APPROXIMATE, RANDOM + "; records no instruction")
def random_seed(seed) -> None:
    """Seed the random number generator with the 32-bit value of a [1, 1] SBUF/PSUM tensor."""
    m = machine()
    t = I.tile(seed, "seed", "nl.random_seed")
    if t._shape != (1, 1):
        raise errors.ShapeMismatchError(f"'seed' of 'nl.random_seed' must be a [1, 1] tensor, got {list(t._shape)}")
    if not m.shape_only:
        value = int(np.asarray(T.array(t)).reshape(-1)[0].astype(np.int64)) & 0xFFFFFFFF
        m.state["nl_rng"] = np.random.Generator(np.random.PCG64(value))


@emulation(APPROXIMATE, RANDOM + "; priced as a VectorE fill")
def rand(shape, dtype, buffer=sbuf, name="") -> NkiTensor:
    """A new on-chip tensor of uniform random values in [0, 1)."""
    m = machine()
    line = I.where()
    t = _create(shape, dtype, buffer, name, None, "nl.rand", line, {})
    if t._b.memory == HBM:
        raise errors.HbmInitValueError("nl.rand cannot create an HBM tensor; create it in SBUF and nisa.dma_copy it")
    values = None if m.shape_only else _rng(m).random(t._shape, dtype=np.float32)
    res = I.compute("nl.rand", MEMSET, (VECTOR,), "rand", [], t._shape, t._b.dtype, None, lambda: values, line=line)
    isa.into("nl.rand", t, res, line)
    return t


@emulation(APPROXIMATE, RANDOM + "; elements are zeroed with probability `rate` and the others kept unscaled "
                                 "(nisa.dropout's documented behaviour), on VectorE")
def dropout(x, rate, dtype=None) -> NkiTensor:
    """x with each element zeroed with probability `rate` (a scalar or a (P, 1) tile)."""
    m = machine()
    line = I.where()
    api = "nl.dropout"
    x = I.tile(x, "x", api)
    P = x._shape[0]
    operands = [("data", x)]
    if isinstance(rate, NkiTensor):
        r = I.tile(rate, "rate", api)
        E.check_vector_operand(r, P, "'rate'", api, errors.ShapeMismatchError)
        operands.append(("rate", r))
    elif not I.is_scalar(rate):
        raise errors.OperandTypeError(f"'rate' of '{api}' must be a scalar or a [P, 1] tile, got {type(rate).__name__}")
    u = None if m.shape_only else _rng(m).random(x._shape, dtype=np.float32)
    n = len(x._shape)

    def fn(d, *rest):
        p = _lift(rest[0], n) if rest else np.float32(rate)
        return np.where(u < p, np.float32(0.0), d)
    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    return I.compute(api, TS, (VECTOR,), "dropout", operands, x._shape, dt, None, fn, line=line)


# --- buffers, scheduling, objects ---------------------------------------------------------------------

def _buffer_name(buffer) -> str:
    if isinstance(buffer, NkiTensor):
        raise errors.OperandTypeError("nl.is_* take a buffer (nl.sbuf, t.buffer, ...), not a tensor")
    return str(getattr(buffer, "value", buffer))


def is_hbm(buffer) -> bool:
    """Whether `buffer` is an HBM region (nl.hbm, nl.private_hbm, nl.shared_hbm)."""
    return _buffer_name(buffer) in ("hbm", "private_hbm", "shared_hbm")


def is_on_chip(buffer) -> bool:
    """Whether `buffer` is SBUF or PSUM."""
    return _buffer_name(buffer) in ("sbuf", "psum")


def is_psum(buffer) -> bool:
    return _buffer_name(buffer) == "psum"


def is_sbuf(buffer) -> bool:
    return _buffer_name(buffer) == "sbuf"


class no_reorder:
    """`with nl.no_reorder():` the instructions of the block issue in program order on their
    engines (the performance model gives them no reorder window, as for a legacy loop with
    directives=no_reorder()); device loops (nl.fori_loop, nl.dynamic_range) are refused in it."""

    def __init__(self):
        self._it = None

    def __enter__(self):
        m = machine()
        self._it = iter(m.loop("static", builtins.range(1), I.where(), ("no_reorder",)))
        next(self._it)
        m.state["no_reorder"] = m.state.get("no_reorder", 0) + 1
        return self

    def __exit__(self, *exc) -> None:
        m = machine()
        m.state["no_reorder"] -= 1
        for _ in self._it:
            pass
        return None


class NKIObject:
    """Base class of NKI kernel dataclasses and configuration objects (`class Cfg(nl.NKIObject)`):
    a plain Python class here; `NKIObject(**kwargs)` sets each keyword as an attribute."""

    def __init__(self, **kwargs) -> None:
        for k, v in kwargs.items():
            setattr(self, k, v)


emulation(APPROXIMATE, "a plain Python base class; NKIObject(**kwargs) sets each keyword as an attribute (what "
                       "the real class does with them is not documented)")(NKIObject)
emulation(APPROXIMATE, "the emulator's tensor class: isinstance checks, annotations, the attributes shape, dtype, "
                       "ndim, size and buffer, and the view methods; constructing one from a storage handle is not "
                       "supported (create tensors with nl.ndarray)")(NkiTensor)


class PackedType:
    """An NKI packed MX dtype (`nl.float8_e4m3fn_x4`, ...): what NumPy sees as its storage dtype
    (`np.dtype(nl.float8_e4m3fn_x4)`, a structured dtype of one uint32 field)."""

    __slots__ = ("name", "dtype", "__nki_emulation__")

    def __init__(self, name: str):
        self.name = name
        self.dtype = T.packed_dtype(name)

    def __repr__(self) -> str:
        return f"nl.{self.name}"


PACKED = {name: emulation(APPROXIMATE, "a 4-byte storage type (4 packed values per element): tensors of it are "
                                       "created, DMA-copied and reinterpreted (t.view) as raw words, and only "
                                       "nisa.nc_matmul_mx unpacks them; " + TRN3_ONLY)(PackedType(name))
          for name in T.PACKED_X4}


# --- SPMD and debugging -------------------------------------------------------------------------------

def _grid(api: str):
    """(this program's index, the launch grid) of the running kernel; ((), ()) without a grid."""
    return machine().state.get(launch.SPMD) or ((), ())


def _axes(axes, ndim: int, api: str) -> tuple[int, ...]:
    out = tuple(int(a) for a in (axes if isinstance(axes, (tuple, list)) else (axes,)))
    for a in out:
        if not (ndim == 0 or -ndim <= a < ndim):
            raise errors.OperandTypeError(f"axis {a} of '{api}' is outside the launch grid of {ndim} dimensions")
    return out


@emulation(APPROXIMATE, "the programs of an LNC2 launch (`kernel[2](...)`) run one after the other on one "
                        "NeuronCore, and the performance model times their instructions on one core")
def program_id(axis=0) -> int:
    """The index of the running program along `axis` of the launch grid (0 without a grid)."""
    pid, grid = _grid("nl.program_id")
    (a,) = _axes(axis, len(grid), "nl.program_id")
    return int(pid[a]) if grid else 0


@emulation(APPROXIMATE, "the programs of an LNC2 launch (`kernel[2](...)`) run one after the other on one "
                        "NeuronCore, and the performance model times their instructions on one core")
def num_programs(axes=0) -> int:
    """The number of programs along `axes` of the launch grid (1 without a grid)."""
    pid, grid = _grid("nl.num_programs")
    if axes is None:
        return T.prod(grid)
    return T.prod(grid[a] for a in _axes(axes, len(grid), "nl.num_programs")) if grid else 1


def program_ndim() -> int:
    """The number of dimensions of the launch grid (0 without one; 1 for `kernel[2]`)."""
    return len(_grid("nl.program_ndim")[1])


def device_print(print_prefix, tensor) -> None:
    """Print a tile's values (full-data runs only)."""
    m = machine()
    x = I.tile(tensor, "tensor", "device_print", (SBUF, PSUM, HBM))
    if not m.shape_only:
        print(print_prefix, T.array(x))


def __getattr__(name: str):
    if name in FUNCTIONS:
        return FUNCTIONS[name]
    lazy = {"bfloat16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float8_e8m0fnu"}
    if name in lazy:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))
    if name in PACKED:
        return PACKED[name]
    if name == "while_loop":
        raise errors.UnsupportedApiError(WHILE_LOOP, *errors.kernel_location(2))
    raise AttributeError(name)


EXPORTS = [
    "sbuf", "psum", "hbm", "private_hbm", "shared_hbm", "tile_size", "MemoryRegion",
    "float32", "float16", "tfloat32", "int8", "int16", "int32", "uint8", "uint16", "uint32", "bool_",
    "ds", "affine_range", "sequential_range", "static_range", "dynamic_range", "fori_loop",
    "ndarray", "zeros", "ones", "full", "zeros_like", "empty_like", "shared_constant", "shared_identity_matrix",
    "load", "load_transpose2d", "store", "broadcast_to", "mean", "var", "copy", "transpose", "matmul", "softmax",
    "rms_norm", "where", "expand_dims", "gather_flattened", "abs_max", "abs_min", "invert", "logical_not",
    "erf_dx", "gelu_dx", "silu_dx", "gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx", "ceil",
    "rand", "random_seed", "dropout", "is_hbm", "is_on_chip", "is_psum", "is_sbuf", "no_reorder", "NKIObject",
    "NkiTensor", "program_id", "num_programs", "program_ndim", "device_print",
] + list(FUNCTIONS)
