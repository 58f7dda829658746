"""ALU instructions of the Vector, Scalar and GpSimd engines that front-ends share, in the
calling convention of the core (they return a fresh result tile): tensor_scalar,
tensor_tensor, scalar_tensor_tensor, tensor_tensor_scan, and the free-axis reduction an
activation can add to its result. Each takes the API name the trace records, an explicit
engine choice (engine letters; empty: the compiler's) where the API has one, and the line.
"""

from __future__ import annotations

import numpy as np

from .. import errors
from . import engines as E
from . import instr as I
from . import ops
from . import tensor as T
from .runtime import machine
from .tensor import NkiTensor
from ..trace import GPSIMD_ENGINE, PSUM, SBUF, SCALAR, TS, TT, TTS, VECTOR


def reduce_into(res: NkiTensor, reduce_op, reduce_res, line: int, api: str = "nisa.activation") -> None:
    """Add-reduce (or `reduce_op`) an instruction result along its free axes into `reduce_res`
    (P, 1), as part of the instruction (activation's, tensor_scalar_reduce's)."""
    m = machine()
    op = ops.reduce_name(reduce_op if reduce_op is not None else np.add, api)
    dst = _reduce_destination(res, reduce_res, api)
    ins = _writer(res)
    ins.func = f"{ins.func},reduce-{op}"
    values = None
    if not m.shape_only:
        a = I.fp32(res)
        active = _active(res)
        if active is not None:
            # a masked instruction computes its active elements only: the others add nothing,
            # and a partition without any keeps what reduce_res held
            a = np.where(active, a, np.float32(ops.REDUCE_IDENTITY.get(op, 0.0)))
        values = ops.REDUCE[op](a, axis=tuple(range(1, a.ndim)), keepdims=True)
        if active is not None:
            rows = active.reshape(active.shape[0], -1).any(axis=1)
            if not rows.all():
                values = np.where(rows.reshape(values.shape), values, I.fp32(dst).reshape(values.shape))
    _write_reduction(m, ins, dst, values)


def _active(res: NkiTensor) -> np.ndarray | None:
    """Which elements of fresh result `res` its (masked) instruction computed; None: all."""
    f = res._b.fresh
    if f is None or (f.box is None and f.where is None):
        return None
    if f.where is not None:
        return np.broadcast_to(f.where, res._shape)
    keep = np.zeros(res._shape, dtype=bool)
    keep[tuple(slice(lo, hi) for lo, hi in f.box)] = True
    return keep


def _reduce_destination(res: NkiTensor, reduce_res, api: str) -> NkiTensor:
    dst = I.tile(reduce_res, "reduce_res", api)
    E.check_vector_operand(dst, res._shape[0], "'reduce_res'", api, errors.BroadcastError)
    T.check_bounds(dst)
    return dst


def _writer(res: NkiTensor):
    return res._b.fresh.writers[-1][0]


def _write_reduction(m, ins, dst: NkiTensor, values) -> None:
    """The instruction also writes (P, 1) `values` (None in shape-only runs) into `dst`."""
    ins.writes = ins.writes + (T.region(dst),)
    m.note_write(dst._b, T.region(dst).box)
    if values is not None:
        T.write(dst, np.asarray(values, dtype=np.float32).reshape(dst._shape))


# --- ScalarE's accumulator registers (nisa.activation's reduce_cmd) -----------------------------------

# `nisa.reduce_cmd` values (legacy nki.isa: idle 0, reset 1, reduce 2, reset_reduce 3).
IDLE, RESET, REDUCE, RESET_REDUCE = 0, 1, 2, 3
CMD_NAMES = {IDLE: "idle", RESET: "reset", REDUCE: "reduce", RESET_REDUCE: "reset_reduce"}


class Accumulators:
    """ScalarE's 128 reduction registers, one per partition ("shared between activation and
    activation_accu calls"): their values (full-data runs) and which have been reset since the
    kernel started (before that they hold what an earlier program left)."""

    __slots__ = ("values", "ready")

    def __init__(self, shape_only: bool):
        self.values = None if shape_only else np.full(T.PMAX, np.nan, dtype=np.float32)
        self.ready = np.zeros(T.PMAX, dtype=bool)


def activation_accumulate(res: NkiTensor, reduce_op, reduce_res, cmd: int, line: int,
                          api: str = "nisa.activation") -> None:
    """The accumulator side of an activation instruction that produced `res` (nisa.activation,
    legacy): `cmd` resets the registers of its partitions (to the reduce operator's identity:
    zero for add), accumulates `reduce_op` of the result along its free axes into them (after a
    reset for reset_reduce), or leaves them (idle); `reduce_res`, if given, then receives the
    registers' values. The reduction is "done after the activation function is applied", at no
    extra cost; reading the registers out costs a little (`func` gets `reduce-<op>` then, as
    activation_reduce's has, and `accumulate-<op>` for an accumulation without read-out)."""
    m = machine()
    regs = m.state.get("scalar_accumulators")
    if regs is None:
        regs = m.state["scalar_accumulators"] = Accumulators(m.shape_only)
    f = res._b.fresh
    if cmd != IDLE and (f.box is not None or f.where is not None):
        raise errors.UnsupportedApiError(
            f"a masked '{api}' with reduce_cmd={CMD_NAMES[cmd]} is not supported by the emulator (which "
            f"partitions' registers a mask leaves alone is not documented)")
    P = res._shape[0]
    ins = _writer(res)
    op = None
    if cmd in (REDUCE, RESET_REDUCE):
        if reduce_op is None:
            raise errors.OperandTypeError(
                f"'{api}' with reduce_cmd={CMD_NAMES[cmd]} accumulates with reduce_op, which is not given "
                f"(reduce_op=nl.add sums the activation's results)")
        op = ops.reduce_name(reduce_op, api)
    elif cmd == RESET and reduce_op is not None:
        op = ops.reduce_name(reduce_op, api)
    dst = _reduce_destination(res, reduce_res, api) if reduce_res is not None else None
    if cmd == REDUCE and not regs.ready[:P].all():
        raise errors.AccumulatorStateError(
            f"'{api}' with reduce_cmd=reduce accumulates onto ScalarE's accumulator registers, which no earlier "
            f"activation of this kernel has reset: start the accumulation with reduce_cmd=reset_reduce (or reset)")
    if cmd == IDLE and dst is not None and not regs.ready[:P].all():
        raise errors.AccumulatorStateError(
            f"'{api}' with reduce_res and reduce_cmd=idle (the default) reads ScalarE's accumulator registers "
            f"without using them, and no earlier activation of this kernel has set them: pass "
            f"reduce_cmd=nisa.reduce_cmd.reset_reduce to reduce this instruction's results into reduce_res (or "
            f"use nisa.activation_reduce)")
    if cmd != IDLE:
        regs.ready[:P] = True
        if regs.values is not None:
            if cmd == RESET:
                regs.values[:P] = ops.REDUCE_IDENTITY.get(op or "add", 0.0)
            else:
                a = I.fp32(res)
                red = ops.REDUCE[op](a.reshape(P, -1), axis=1)
                regs.values[:P] = red if cmd == RESET_REDUCE else ops.ALU[op](regs.values[:P], red)
    if dst is not None:
        ins.func = f"{ins.func},reduce-{op or 'read'}"
        _write_reduction(m, ins, dst, None if regs.values is None else regs.values[:P].reshape(P, 1))
    elif cmd in (REDUCE, RESET_REDUCE):
        ins.func = f"{ins.func},accumulate-{op}"


def tensor_scalar_reduce(api: str, data, op0, operand0, reverse0: bool, reduce_op, reduce_res, dtype, mask,
                         line: int) -> NkiTensor:
    """`data op0 operand0` (one arithmetic operator, operand a scalar or a (P, 1) vector) on
    VectorE, and `reduce_op` of that result along its free axes into `reduce_res` (P, 1), in
    one instruction (legacy nisa.tensor_scalar_reduce)."""
    if reverse0:
        raise errors.UnsupportedOpError(
            f"'reverse0' of '{api}' is not supported yet (the ISA documentation: operand0 is always the "
            f"right-hand side of op0)")
    name = ops.alu_name(op0, api, "op0")
    if name not in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "mod", "abs_max"):
        raise errors.UnsupportedOpError(
            f"'op0' of '{api}' must be an arithmetic operator (nl.add, nl.subtract, nl.multiply, nl.maximum, ...), "
            f"got '{name}'; bitvec and comparison operators are not supported")
    rname = ops.alu_name(reduce_op, api, "reduce_op")
    if rname == "subtract":
        raise errors.UnsupportedApiError(
            f"reduce_op=nl.subtract of '{api}' is not supported by the emulator (the order and the starting value "
            f"of a subtracting reduction are not documented)")
    if rname not in ("add", "multiply", "maximum", "minimum"):
        raise errors.UnsupportedOpError(
            f"'reduce_op' of '{api}' must be one of nl.add, nl.subtract, nl.multiply, nl.max, nl.min, got '{rname}'")
    if mask is not None:
        x = I.tile(data, "data", api)
        box, wh = I.active(mask, x._shape)
        if box is not None or wh is not None:
            raise errors.UnsupportedApiError(
                f"a masked '{api}' is not supported by the emulator (what the masked-out elements add to the "
                f"reduction is not documented)")
    res = tensor_scalar(api, data, name, operand0, False, None, None, False, dtype, None, (VECTOR,), line)
    reduce_into(res, rname, reduce_res, line, api)
    return res


def vector_operand(x, P: int, name: str, api: str):
    """A scalar (as float32) or a (P, 1) tile operand of a tensor_scalar-like instruction."""
    if isinstance(x, NkiTensor):
        t = I.tile(x, name, api)
        E.check_vector_operand(t, P, f"'{name}'", api, errors.ShapeMismatchError)
        return t
    if I.is_scalar(x):
        return np.float32(x)
    raise errors.OperandTypeError(f"'{name}' of '{api}' must be a scalar or a [P, 1] tile, got {type(x).__name__}")


def tensor_scalar(api: str, data, op0, operand0, reverse0: bool, op1, operand1, reverse1: bool, dtype, mask,
                  engines: tuple[str, ...], line: int) -> NkiTensor:
    """(data op0 operand0) op1 operand1, operands scalars or (P, 1) vectors; reverse swaps sides."""
    x = I.tile(data, "data", api)
    P = x._shape[0]
    n0 = ops.alu_name(op0, api, "op0")
    o0 = vector_operand(operand0, P, "operand0", api)
    n1 = ops.alu_name(op1, api, "op1") if op1 is not None else None
    o1 = vector_operand(operand1, P, "operand1", api) if op1 is not None else None
    f0 = ops.ALU[n0]
    f1 = ops.ALU[n1] if n1 else None
    operands = [("data", x)]
    t0, t1 = isinstance(o0, NkiTensor), isinstance(o1, NkiTensor)
    if t0:
        operands.append(("operand0", o0))
    if t1:
        operands.append(("operand1", o1))

    def fn(d, *rest):
        rest = list(rest)
        if rest and d.ndim > 2:   # (P, 1) vectors along every free axis of a (P, F1, F2...) tile
            rest = [r.reshape((r.shape[0],) + (1,) * (d.ndim - 1)) for r in rest]
        a0 = rest.pop(0) if t0 else o0
        y = f0(a0, d) if reverse0 else f0(d, a0)
        if f1 is not None:
            a1 = rest.pop(0) if t1 else o1
            y = f1(a1, y) if reverse1 else f1(y, a1)
        return y

    func = n0 + ("(reverse)" if reverse0 else "") + (("," + n1 + ("(reverse)" if reverse1 else "")) if n1 else "")
    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    engines = engines or (VECTOR, SCALAR)
    return I.compute(api, TS, engines, func, operands, x._shape, dt, mask, fn, line=line)


def tensor_tensor(api: str, data1, data2, op, dtype, mask, engines: tuple[str, ...], line: int) -> NkiTensor:
    """data1 op data2 element-wise (same partitions and free sizes; not both in PSUM)."""
    a = I.tile(data1, "data1", api)
    b = I.tile(data2, "data2", api)
    if a._shape[0] != b._shape[0]:
        raise errors.PartitionMismatchError(
            f"number of partitions (dimension 0 size of a tile) mismatch in parameters (data1{list(a._shape)}, "
            f"data2{list(b._shape)}) of 'tensor_tensor'")
    if a._shape != b._shape:
        raise errors.ShapeMismatchError(
            f"Parameter shapes (data1{list(a._shape)}, data2{list(b._shape)}) of 'tensor_tensor' has mismatched "
            f"shapes; use tensor_scalar to broadcast a [P, 1] vector along the free dimension")
    if a._b.memory == PSUM and b._b.memory == PSUM:
        raise errors.UnsupportedMemoryError(
            "operands 'data1' and 'data2' of 'tensor_tensor' cannot both be in 'psum'; copy one to SBUF first")
    name = ops.alu_name(op, api)
    engines = engines or ((GPSIMD_ENGINE,) if name == "power" else (VECTOR,))
    dt = I.result_dtype([a, b], dtype)
    return I.compute(api, TT, engines, name, [("data1", a), ("data2", b)], a._shape, dt, mask, ops.ALU[name],
                     line=line)


def scalar_tensor_tensor(api: str, data, op0, operand0, op1, operand1, reverse0: bool, reverse1: bool, dtype,
                         mask, line: int) -> NkiTensor:
    """(data op0 operand0) op1 operand1 where operand0 is a scalar/(P, 1) vector and operand1 a tile."""
    x = I.tile(data, "data", api)
    P = x._shape[0]
    n0, n1 = ops.alu_name(op0, api, "op0"), ops.alu_name(op1, api, "op1")
    o0 = vector_operand(operand0, P, "operand0", api)
    o1 = I.tile(operand1, "operand1", api)
    if o1._shape != x._shape:
        raise errors.ShapeMismatchError(
            f"Parameter shapes (data{list(x._shape)}, operand1{list(o1._shape)}) of '{api}' has mismatched shapes")
    t0 = isinstance(o0, NkiTensor)
    f0, f1 = ops.ALU[n0], ops.ALU[n1]
    operands = [("data", x)] + ([("operand0", o0)] if t0 else []) + [("operand1", o1)]

    def fn(d, *rest):
        rest = list(rest)
        a0 = rest.pop(0) if t0 else o0
        y = f0(a0, d) if reverse0 else f0(d, a0)
        a1 = rest.pop(0)
        return f1(a1, y) if reverse1 else f1(y, a1)

    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    return I.compute(api, TT, (VECTOR,), f"{n0},{n1}", operands, x._shape, dt, mask, fn, line=line)


def tensor_tensor_scan(api: str, data0, data1, initial, op0, op1, reverse0: bool, reverse1: bool, dtype, mask,
                       line: int) -> NkiTensor:
    """Per partition: out[:, i] = op1(op0(data0[:, i], out[:, i-1]), data1[:, i]), out[:, -1] = initial."""
    m = machine()
    a = I.tile(data0, "data0", api)
    b = I.tile(data1, "data1", api)
    if a._shape != b._shape:
        raise errors.ShapeMismatchError(
            f"Parameter shapes (data0{list(a._shape)}, data1{list(b._shape)}) of '{api}' has mismatched shapes")
    if a._b.memory == PSUM and b._b.memory == PSUM:
        raise errors.UnsupportedMemoryError(f"operands 'data0' and 'data1' of '{api}' cannot both be in 'psum'")
    P = a._shape[0]
    init = vector_operand(initial, P, "initial", api)
    n0, n1 = ops.alu_name(op0, api, "op0"), ops.alu_name(op1, api, "op1")
    shape = a._shape
    box, wh = I.active(mask, shape)
    if wh is not None:
        raise errors.MaskExpressionError(f"'{api}' masks must select a box")
    av, bv = I.use(a, box, shape), I.use(b, box, shape)
    reads = [av, bv]
    if isinstance(init, NkiTensor):
        init = I.use(init, None if box is None else (box[0], (0, 1)), init._shape)
        reads.append(init)
    dt = I.normalize_dtype(dtype) if dtype is not None else a._b.dtype
    res = I.new_result(shape, dt, SBUF, TTS, line)
    rv = res if box is None else T.restrict(res, box, shape)
    if not m.shape_only and 0 not in rv._shape:
        p = rv._shape[0]
        x0 = np.ascontiguousarray(I.fp32(av).reshape(p, -1).T)
        x1 = np.ascontiguousarray(I.fp32(bv).reshape(p, -1).T)
        h = (I.fp32(init).reshape(p) if isinstance(init, NkiTensor) else np.full(p, init, np.float32)).copy()
        out = np.empty_like(x0)
        if n0 == "multiply" and n1 == "add":
            # h = a_i * h + b_i (operand order is irrelevant here), computed in its output row
            for a_i, b_i, o in zip(x0, x1, out):
                np.multiply(a_i, h, out=o)
                np.add(o, b_i, out=o)
                h = o
        else:
            f0, f1 = ops.ALU[n0], ops.ALU[n1]
            for i in range(x0.shape[0]):
                t = f0(h, x0[i]) if reverse0 else f0(x0[i], h)
                h = f1(x1[i], t) if reverse1 else f1(t, x1[i])
                out[i] = h
        T.write(rv, out.T.reshape(rv._shape))
    I.record(m, TTS, api, (VECTOR,), res, rv, box, None, reads, line, f"{n0},{n1}")
    return res
