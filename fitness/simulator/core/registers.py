"""Virtual registers of the engine sequencers (`nisa.register_alloc`, `register_move`,
`register_load`, `register_store`): a 32-bit integer the kernel sets from a constant, another
register or a one-element tensor, and stores back to memory; used for dynamic loop bounds and
dynamic (scalar) DMA offsets.

The emulator runs the kernel eagerly, so a register holds its value as the kernel runs: loaded
from memory in full-data runs, unknown in shape-only runs (`value` refuses to guess it). As
under NKI's tracer front-end, Python control flow on a register (`if reg`, `int(reg)`,
`range(reg)`) is a TypeError; the constructs that take registers (dynamic loops, scalar DMA
offsets) read them through `value`. Register instructions run on the engine sequencers, which
the performance model does not have: they are not priced.
"""

from __future__ import annotations

import numpy as np

from .. import errors
from ..trace import HBM, SBUF
from . import instr as I
from . import tensor as T
from .runtime import machine

UNKNOWN = object()   # a register loaded from memory in a shape-only run


class VirtualRegister:
    """A virtual register (`nisa.register_alloc()`)."""

    __slots__ = ("_line", "_value")

    def __init__(self, state=None, frozen=False):
        self._value = None if state is None else _int32(state, "register_alloc")
        self._line = 0

    def __repr__(self) -> str:
        v = self._value
        return f"VirtualRegister({'uninitialized' if v is None else 'unknown' if v is UNKNOWN else v})"

    def _control_flow(self, *args):
        raise TypeError(
            "a VirtualRegister's value is not known while the kernel is being built: it cannot be used in Python "
            "control flow or converted with int()/range(); use nl.dynamic_range / nl.fori_loop, or "
            "nisa.register_store it to memory")

    __bool__ = __int__ = __index__ = __float__ = __iter__ = _control_flow


def _int32(x, api: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise errors.OperandTypeError(f"'{api}' takes an integer constant or a VirtualRegister, got {x!r}")
    v = int(x)
    if not -2 ** 31 <= v < 2 ** 32:
        raise errors.OperandTypeError(f"'{api}': {v} does not fit a 32-bit register")
    return v


def _reg(x, name: str, api: str) -> VirtualRegister:
    if not isinstance(x, VirtualRegister):
        raise errors.OperandTypeError(
            f"'{name}' of '{api}' must be a VirtualRegister (from nisa.register_alloc), got {type(x).__name__}")
    return x


def value(reg: VirtualRegister, what: str = "register") -> int:
    """The integer a register holds now (what a dynamic loop bound or offset reads)."""
    v = reg._value
    if v is None:
        raise errors.OperandTypeError(f"the {what} is read before any value was put in it (nisa.register_move / "
                                      f"register_load)")
    if v is UNKNOWN:
        raise errors.UnsupportedApiError(
            f"the {what} holds a value loaded from memory, which a shape-only run does not have: a register-driven "
            f"construct cannot be traced without data by the emulator")
    return v


def alloc(x=None) -> VirtualRegister:
    machine()
    return VirtualRegister(x)


def move(dst, src) -> None:
    machine()
    d = _reg(dst, "dst", "nisa.register_move")
    d._value = src._value if isinstance(src, VirtualRegister) else _int32(src, "nisa.register_move")


def load(dst, src) -> None:
    """dst = the one element of tensor `src` (HBM or SBUF), as a 32-bit integer."""
    m = machine()
    api = "nisa.register_load"
    d = _reg(dst, "dst", api)
    s = I.tile(src, "src", api, (HBM, SBUF))
    if T.prod(s._shape) != 1:
        raise errors.ShapeMismatchError(f"'src' of '{api}' must have exactly one element, got shape {list(s._shape)}")
    if s._b.itemsize > 4:
        raise errors.UnsupportedDtypeError(f"'{api}' loads values of up to 32 bits, got '{s._b.dtname}'")
    if s._checks:
        T.check_bounds(s)
    if m.shape_only:
        d._value = UNKNOWN
        return
    a = T.array(s).reshape(-1)[0]
    d._value = int(np.asarray(a).astype(np.int64)) if s._b.dtype.kind in "iub" else int(np.float32(a))


def store(dst, src) -> None:
    """The register's value into the one element of tensor `dst` (HBM or SBUF)."""
    m = machine()
    api = "nisa.register_store"
    r = _reg(src, "src", api)
    d = I.tile(dst, "dst", api, (HBM, SBUF))
    if T.prod(d._shape) != 1:
        raise errors.ShapeMismatchError(f"'dst' of '{api}' must have exactly one element, got shape {list(d._shape)}")
    if d._b.memory == HBM:
        I.immutable_check(d)
    if d._checks:
        T.check_bounds(d)
    m.note_write(d._b, T.region(d).box, view=d)
    if not m.shape_only:
        T.write(d, np.asarray(value(r, "register")))
    if d._b.memory == HBM:
        T.mark_written(T.as_tile_shape(d))
