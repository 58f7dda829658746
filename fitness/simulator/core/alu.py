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


def reduce_into(res: NkiTensor, reduce_op, reduce_res, line: int) -> None:
    """Add-reduce (or `reduce_op`) an activation result along its free axes into `reduce_res`
    (P, 1), as part of the activation instruction."""
    m = machine()
    op = ops.reduce_name(reduce_op if reduce_op is not None else np.add, "nisa.activation")
    dst = I.tile(reduce_res, "reduce_res", "nisa.activation")
    E.check_vector_operand(dst, res._shape[0], "'reduce_res'", "nisa.activation", errors.BroadcastError)
    T.check_bounds(dst)
    ins = res._b.fresh.writers[-1][0]
    ins.writes = ins.writes + (T.region(dst),)
    ins.func = f"{ins.func},reduce-{op}"
    m.note_write(dst._b, T.region(dst).box)
    if not m.shape_only:
        a = I.fp32(res)
        T.write(dst, ops.REDUCE[op](a, axis=tuple(range(1, a.ndim)), keepdims=True).reshape(dst._shape))


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
