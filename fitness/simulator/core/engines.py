"""Instructions of the engines that front-end APIs share: DMA loads of HBM into SBUF,
constants embedded in the kernel, copies, TensorE matmul and transpose (against the
identity matrix the compiler loads once), ScalarE activation and VectorE free-axis
reductions, and how the compiler lowers the high-level element-wise, mean and broadcast APIs.
Each takes the API name the trace records (`api`) and the kernel line; the copies and the identity load that transposes add on their own are recorded as `nl.copy` and
`nl.load`, the names the compiler's lowering gives them in every trace so far.
"""

from __future__ import annotations

import numpy as np

from .. import errors
from . import instr as I
from . import ops
from . import subscript as S
from . import tensor as T
from .indexing import broadcast_shapes, is_int
from .runtime import machine
from .tensor import NkiTensor
from ..trace import (
    ACT,
    COPY,
    DMA,
    DMA_LOAD,
    GPSIMD_ENGINE,
    HBM,
    MM,
    MM_BCAST,
    MM_TRANSPOSE,
    PSUM,
    RED,
    SBUF,
    SCALAR,
    TENSOR,
    TS,
    TT,
    VECTOR,
    MatmulInfo,
)

F32 = np.dtype(np.float32)


# --- constants, DMA loads, copies ---------------------------------------------------------------------

def constant(value, dtype, line: int) -> NkiTensor:
    """An HBM tensor holding `value` (embedded in the kernel binary)."""
    m = machine()
    arr = np.asarray(value)
    dt = I.normalize_dtype(dtype if dtype is not None else (arr.dtype if arr.dtype != np.float64 else np.float32))
    buf = T.new_buffer(HBM, tuple(arr.shape), dt, 0, kind="constant", line=line)
    if not m.shape_only:
        buf.blocks[()] = np.ascontiguousarray(arr, dtype=dt)
    return T.whole(buf)


def load(api: str, src, mask, dtype, line: int) -> NkiTensor:
    """HBM -> a new SBUF tile (DMA)."""
    m = machine()
    src = T.as_tile_shape(I.tile(src, "src", "load", (HBM,)))
    shape = src._shape
    dt = I.normalize_dtype(dtype) if dtype is not None else src._b.dtype
    box, wh = I.active(mask, shape)
    sv = I.use(src, box, shape, wh)
    res = I.new_result(shape, dt, SBUF, DMA_LOAD, line)
    rv = res if box is None else T.restrict(res, box, shape)
    if not m.shape_only and 0 not in rv._shape:
        T.write(rv, T.array(sv), wh)
    n = T.count(rv) if wh is None else int(wh.sum())
    dma = I.dma_info(rv, sv, n, rv._shape[0])
    I.record(m, DMA_LOAD, api, (DMA,), res, rv, box, wh, [sv], line, dma=dma)
    return res


def copy(api: str, src, mask, dtype, line: int) -> NkiTensor:
    """A copy of a tile into a new SBUF tile (Vector or Scalar engine)."""
    src = I.tile(src, "src", "copy")
    dt = I.normalize_dtype(dtype) if dtype is not None else src._b.dtype
    return I.compute(api, COPY, (VECTOR, SCALAR), "copy", [("src", src)], src._shape, dt, mask,
                     lambda a: a, line=line)


# --- TensorE -------------------------------------------------------------------------------------------

_EYE: dict[int, tuple[np.ndarray, bytes]] = {}


def _is_identity(a: np.ndarray) -> bool:
    """`np.array_equal(a, identity)` for a float32 matrix. Equal bytes imply equal values (the
    identity holds no NaN), so the byte comparison answers the usual case (TensorE transposes
    against the identity tile) at memcmp speed; any other bytes (-0.0 for 0.0 is still equal)
    go to the element-wise comparison."""
    n = a.shape[0]
    if a.ndim != 2 or a.shape[1] != n:
        return False
    hit = _EYE.get(n)
    if hit is None:
        eye = np.identity(n, dtype=np.float32)
        hit = _EYE[n] = (eye, eye.tobytes())
    eye, raw = hit
    if a.dtype == eye.dtype and a.tobytes() == raw:
        return True
    return bool(np.array_equal(a, eye))


def _zero_one(a: np.ndarray) -> bool:
    """Every element of `a` is 0 or 1 (the identity, the usual case, by its bytes)."""
    return _is_identity(a) or bool(np.all((a == 0) | (a == 1)))


def _check_hints(api: str, stationary: np.ndarray, moving: np.ndarray, st1z: bool, mv_flag: str) -> None:
    """`mv_flag`: the flag that claims the moving holds only 0 and 1 ("" for none). The one-zero
    hints price an fp32 matmul at half its passes (the model reads them, and `is_transpose`
    too, whose moving is the identity); the ISA documents them as hints with no
    semantic effect and says nothing of what the hardware computes when they are false, so a
    false hint is an error here rather than a cheaper price for the exact product."""
    for flag, what, data in (("is_stationary_onezero" if st1z else "", "stationary", stationary),
                             (mv_flag, "moving", moving)):
        if flag and not _zero_one(data):
            raise errors.FalseHintError(
                f"'{api}' was told {flag}=True, but its {what} operand holds values other than 0 and 1; "
                "the hint makes TensorE skip passes an exact product needs: drop the flag")


_MM_INFOS: dict[tuple, MatmulInfo] = {}   # MatmulInfo is immutable: one per distinct value


def matmul(api: str, stationary, moving, mask, line: int, st1z: bool = False, mv1z: bool = False,
            is_transpose: bool = False, kind: str = MM) -> NkiTensor:
    m = machine()
    s = I.tile(stationary, "stationary", api, (SBUF,))
    mv = I.tile(moving, "moving", api, (SBUF,))
    sshape, mshape = s._shape, mv._shape
    K = sshape[0]
    if mshape[0] != K:
        raise errors.MatmulShapeError(
            f"contraction dimension (partitions) of '{api}' operands differ: stationary{list(s._shape)} has "
            f"{K}, moving{list(mv._shape)} has {mv._shape[0]}")
    M = sshape[1] if len(sshape) == 2 else T.prod(sshape[1:])
    N = mshape[1] if len(mshape) == 2 else T.prod(mshape[1:])
    if K > 128:
        raise errors.DimensionLimitError(
            f"size of dimension 0 (K) in 'stationary{list(s._shape)}' of '{api}' exceed architecture limitation of 128")
    if M > 128:
        raise errors.DimensionLimitError(
            f"size of the free dimension (M) in 'stationary{list(s._shape)}' of '{api}' exceed architecture "
            f"limitation of 128 (gemm_stationary_fmax)")
    if N > 512:
        raise errors.DimensionLimitError(
            f"size of the free dimension (N) in 'moving{list(mv._shape)}' of '{api}' exceed architecture limitation "
            f"of 512 (gemm_moving_fmax, one PSUM bank)")
    out_shape = (M,) + mshape[1:]
    sv, mvv = s, mv
    box = None
    if mask is not None:
        box, wh = I.active(mask, out_shape)
        if wh is not None:
            raise errors.MaskExpressionError(
                f"'{api}' masks must select a box of the (M, N) output (one comparison per axis)")
        if box is not None:
            if len(sshape) == 2:
                sv = T.restrict(s, ((0, K), box[0]), sshape)
            mvv = T.restrict(mv, ((0, K),) + box[1:], mshape)
    if sv._checks:
        T.check_bounds(sv)
    if mvv._checks:
        T.check_bounds(mvv)
    res = I.new_result(out_shape, F32, PSUM, kind, line)
    rv = res if box is None else T.restrict(res, box, out_shape)
    if not m.shape_only and 0 not in rv._shape:
        a = I.fp32(sv).reshape(K, -1)
        b = I.fp32(mvv).reshape(K, -1)
        identity = is_transpose and _is_identity(b)   # the usual transpose: its moving is 0/1 already
        _check_hints(api, a, b, st1z, "" if identity else "is_moving_onezero" if mv1z else
                     "is_transpose" if is_transpose else "")
        if identity:
            out = a.T
        else:
            out = np.matmul(a.T, b)
        I.store_result(rv, out if out.shape == rv._shape else out.reshape(rv._shape), None)
    Ma = M if box is None else T.prod(sv._shape[1:])
    Na = N if box is None else T.prod(mvv._shape[1:])
    mkey = (K, Ma, Na, bool(st1z), bool(mv1z), bool(is_transpose))
    mm = _MM_INFOS.get(mkey)
    if mm is None:
        mm = _MM_INFOS[mkey] = MatmulInfo(K, Ma, Na, False, *mkey[3:])
    I.record(m, kind, api, (TENSOR,), res, rv, box, None, [sv, mvv], line, "", partitions=K, free=Na, mm=mm)
    return res


def identity_tile(m, line: int, api: str = "a TensorE transpose") -> NkiTensor:
    """The SBUF identity matrix the compiler loads once (at kernel level) for TensorE transposes."""
    if m.identity is None:
        # an allocated kernel cannot have it (checked when the kernel ends)
        m.state.setdefault("tensore_transpose", (f"'{api}'", line))
        saved = m.scope, m.path
        m.scope, m.path = (), ()   # kernel level: usable from every loop iteration
        try:
            const = constant(np.identity(128, dtype=np.float32), None, line)
            ident = load("nl.load", const, None, None, line)
        finally:
            m.scope, m.path = saved
        const._b.name = "identity"
        m.trace.tensors[const._b.id] = const._b.info()
        ident._b.name = "identity_local"
        f = ident._b.fresh
        f.meta = (f.meta[0], "identity_local") + f.meta[2:]
        f.state = f.USED
        m.identity = ident
    return m.identity


def transpose_tensore(api: str, x: NkiTensor, line: int, dtype=None) -> NkiTensor:
    """Transpose an SBUF tile on TensorE: matmul against the identity into PSUM."""
    m = machine()
    if x._b.memory != SBUF:
        x = copy("nl.copy", x, None, None, line)
    P, F = x._shape[0], T.prod(x._shape[1:])
    if P > 128 or F > 128:
        raise errors.DimensionLimitError(
            f"size of dimension {0 if P > 128 else 1} in 'x{list(x._shape)}' of 'transpose' exceed architecture "
            f"limitation of 128")
    ident = identity_tile(m, line, api)
    eye = ident if P == 128 else S.subscript(ident, (slice(0, P), slice(0, P)))
    res = matmul(api, x, eye, None, line, mv1z=True, is_transpose=True, kind=MM_TRANSPOSE)
    if dtype is not None and I.normalize_dtype(dtype) != F32:
        return copy("nl.copy", res, None, dtype, line)
    return res



# --- ScalarE -------------------------------------------------------------------------------------------

def check_vector_operand(t: NkiTensor, P: int, what: str, api: str, err) -> None:
    if t._shape[0] != P or T.prod(t._shape[1:]) != 1:
        raise err(f"{what} of '{api}' must be a scalar or a vector of shape [{P}, 1] spanning the partition "
                  f"dimension, got shape {list(t._shape)}")


def activation(api: str, func: str, data, bias, scale, mask, dtype, line: int) -> NkiTensor:
    x = I.tile(data, "data", api)
    P = x._shape[0]
    operands = [("data", x)]
    has_scale_tile = isinstance(scale, NkiTensor)
    if has_scale_tile:
        s = I.tile(scale, "scale", api)
        if s._b.dtype != F32:
            raise errors.ActivationScaleTypeError(
                f"'scale' param of '{api}' must be a scalar or vector of type float32, got '{s._b.dtname}'")
        check_vector_operand(s, P, "'scale'", api, errors.ActivationScaleShapeError)
        operands.append(("scale", s))
    elif isinstance(scale, np.generic) and scale.dtype != F32 and scale.dtype.kind == "f":
        raise errors.ActivationScaleTypeError(
            f"'scale' param of '{api}' must be a scalar or vector of type float32, got '{scale.dtype.name}'")
    elif not I.is_scalar(scale):
        raise errors.ActivationScaleShapeError(
            f"'scale' param of '{api}' must be a float32 scalar or a [P, 1] tile, got {type(scale).__name__}")
    has_bias_tile = isinstance(bias, NkiTensor)
    if has_bias_tile:
        b = I.tile(bias, "bias", api)
        if b._b.dtname not in ("float32", "float16", "bfloat16"):
            raise errors.ActivationBiasTypeError(
                f"'bias' param of '{api}' must be a vector of type float32, float16, or bfloat16, got "
                f"'{b._b.dtname}'")
        check_vector_operand(b, P, "'bias'", api, errors.BroadcastError)
        operands.append(("bias", b))
    elif bias is not None and not I.is_scalar(bias):
        raise errors.ActivationBiasTypeError(f"'bias' param of '{api}' must be a [P, 1] tile, got {type(bias).__name__}")
    if not has_bias_tile:
        # an allocated kernel must pass its own bias tensor (checked when the kernel ends)
        machine().state.setdefault("activation_without_bias", (api, line))
    f = ops.ACTIVATION[func]
    scale_c = None if has_scale_tile else np.float32(scale)
    bias_c = None if (has_bias_tile or bias is None) else np.float32(bias)

    def fn(d, *rest):
        rest = list(rest)
        sc = rest.pop(0) if has_scale_tile else scale_c
        bi = rest.pop(0) if has_bias_tile else bias_c
        y = d
        if has_scale_tile or sc != 1.0:
            y = y * sc
        if bi is not None:
            y = y + bi
        return f(y)

    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    return I.compute(api, ACT, (SCALAR,), func, operands, x._shape, dt, mask, fn, line=line)



# --- VectorE reductions --------------------------------------------------------------------------------

def free_axes(axis, ndim: int, api: str) -> tuple[int, ...]:
    if axis is None:
        axes = tuple(range(1, ndim))
    elif is_int(axis):
        axes = (int(axis),)
    else:
        axes = tuple(int(a) for a in axis)
    axes = tuple(a + ndim if a < 0 else a for a in axes)
    for a in axes:
        if a == 0:
            raise errors.ReduceAxisError(
                f"'{api}' cannot reduce along the partition dimension (axis 0); transpose the tile (nc_transpose / "
                f"nl.transpose) or use a matmul with a ones vector")
        if not 0 < a < ndim:
            raise errors.IndexNotSupportedError(f"axis {a} out of range for a tile of rank {ndim} in '{api}'")
    return tuple(sorted(set(axes)))


_REDUCED: dict[tuple, tuple] = {}


def reduced(shape: tuple[int, ...], axis, keepdims: bool, api: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(reduced axes, result shape) of a free-axis reduction of a `shape` tile (cached:
    kernels repeat the same reductions)."""
    akey = axis if axis is None or is_int(axis) else tuple(axis)
    key = (shape, akey, bool(keepdims))
    hit = _REDUCED.get(key)
    if hit is None:
        axes = free_axes(axis, len(shape), api)
        if keepdims:
            out_shape = tuple(1 if k in axes else n for k, n in enumerate(shape))
        else:
            out_shape = tuple(n for k, n in enumerate(shape) if k not in axes)
            if len(out_shape) < 2:
                out_shape = out_shape + (1,) * (2 - len(out_shape))
        hit = _REDUCED[key] = (axes, out_shape)
    return hit


def reduce(api: str, op: str, x, axis, dtype, mask, keepdims: bool, line: int, negate: bool = False,
           kind: str = RED) -> NkiTensor:
    """Free-axis reduction (VectorE). The result keeps at least two dimensions."""
    m = machine()
    x = I.tile(x, "data", api)
    shape = x._shape
    axes, out_shape = reduced(shape, axis, keepdims, api)
    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    box, wh = (None, None) if mask is None else I.active(mask, shape)
    xv = x if box is None and not x._checks else I.use(x, box, shape, wh)
    res = I.new_result(out_shape, dt, SBUF, kind, line)
    obox = None
    if box is not None:
        kept = [box[k] for k in range(len(shape)) if k not in axes] if not keepdims else \
            [(0, 1) if k in axes else box[k] for k in range(len(shape))]
        kept = kept + [(0, 1)] * (len(out_shape) - len(kept))
        obox = tuple(kept)
    rv = res if obox is None else T.restrict(res, obox, out_shape)
    if not m.shape_only and 0 not in rv._shape:
        a = I.fp32(xv)
        if wh is not None:
            a = np.where(I.align(wh, xv._shape), a, np.float32(ops.REDUCE_IDENTITY.get(op, 0.0)))
        r = ops.REDUCE[op](a, axis=axes, keepdims=True) if a.size else a
        r = r.reshape(rv._shape)
        if negate:
            r = -r
        T.write(rv, r)
    free = T.prod(xv._shape[1:])
    I.record(m, kind, api, (VECTOR,), res, rv, obox, None, [xv], line, op + (",negate" if negate else ""),
             partitions=xv._shape[0], free=free)
    return res


# --- element-wise lowering of the high-level APIs ------------------------------------------------

def elementwise(api: str, op: str, x, y, dtype, mask, line: int, *, operator: bool = False,
                engines: tuple[str, ...] = ()) -> NkiTensor:
    """x (op) y for the high-level APIs (`nl.add`, operators): tile (op) tile -> TT; tile (op)
    scalar or (P, 1) vector -> TS; P=1 operands are broadcast across partitions first (APIs
    only; operators raise). `engines`: an explicit engine choice, else the compiler's."""
    tx, ty = isinstance(x, NkiTensor), isinstance(y, NkiTensor)
    fn = ops.ALU[op]
    if not tx and not ty:
        if not (I.is_scalar(x) and I.is_scalar(y)):
            raise errors.OperandTypeError(f"'{api}' needs tiles or scalars, got {type(x).__name__} and {type(y).__name__}")
        return fn(np.float32(x), np.float32(y))
    dt = I.result_dtype([x, y], dtype)
    if tx and ty:
        x = I.tile(x, "x", api)
        y = I.tile(y, "y", api)
        px, py = x._shape[0], y._shape[0]
        if px != py:
            if operator or (px != 1 and py != 1):
                raise errors.PartitionMismatchError(
                    f"number of partitions (dimension 0 size of a tile) mismatch in parameters (x{list(x._shape)}, "
                    f"y{list(y._shape)}) of '{api}'; use .broadcast_to(...) to broadcast along partitions")
            if px == 1:
                x = broadcast("broadcast_to", x, (py,) + x._shape[1:], line)
            else:
                y = broadcast("broadcast_to", y, (px,) + y._shape[1:], line)
        out_shape = broadcast_shapes(x._shape, y._shape)
        if out_shape is None or len(x._shape) != len(y._shape):
            raise errors.BroadcastError(
                f"Parameter shapes (x{list(x._shape)}, y{list(y._shape)}) of '{api}' could not be broadcast together")
        if x._shape == y._shape or (T.prod(x._shape[1:]) > 1 and T.prod(y._shape[1:]) > 1):
            chosen = engines or ((GPSIMD_ENGINE,) if op == "power" else (VECTOR,))
            return I.compute(api, TT, chosen, op, [("x", x), ("y", y)], out_shape, dt, mask, fn, line=line)
        # one operand is a per-partition vector (P, 1): tensor_scalar
        vec_first = T.prod(x._shape[1:]) == 1
        data, vec = (y, x) if vec_first else (x, y)
        func = op if not vec_first else f"{op}(reverse)"
        f2 = (lambda d, v: fn(v, d)) if vec_first else fn
        return I.compute(api, TS, engines or (VECTOR, SCALAR), func, [("data", data), ("operand0", vec)],
                         out_shape, dt, mask, f2, line=line)
    data, s = (x, y) if tx else (y, x)
    if not I.is_scalar(s):
        raise errors.OperandTypeError(f"'{api}' cannot combine a tile with {type(s).__name__}")
    data = I.tile(data, "x" if tx else "y", api)
    sv = np.float32(s)

    def f1(d):
        return fn(d, sv) if tx else fn(sv, d)

    func = op if tx else f"{op}(reverse)"
    return I.compute(api, TS, engines or (VECTOR, SCALAR), func, [("data", data)], data._shape, dt, mask,
                     f1, line=line)


def unary_activation(api: str, func: str, x, dtype, mask, line: int) -> NkiTensor:
    """A high-level unary math API (`nl.exp`, ...): one ScalarE activation."""
    x = I.tile(x, "x", api)
    dt = I.normalize_dtype(dtype) if dtype is not None else x._b.dtype
    return I.compute(api, ACT, (SCALAR,), func, [("x", x)], x._shape, dt, mask, ops.ACTIVATION[func], line=line)


def mean(api: str, x, axis, dtype, mask, keepdims: bool, line: int) -> NkiTensor:
    """Average along free axes: a sum reduction then a multiply by 1/n."""
    s = reduce(api, "add", x, axis, dtype, mask, keepdims, line)
    axes = free_axes(axis, len(x.shape), api)
    n = T.prod(x.shape[a] for a in axes)
    inv = np.float32(1.0 / n)
    return I.compute(api, TS, (VECTOR, SCALAR), "multiply", [("data", s)], s._shape, s._b.dtype, None,
                     lambda a: a * inv, line=line)


def broadcast(api: str, src, shape, line: int) -> NkiTensor:
    """Broadcast a tile to `shape`. Across partitions ((1, F) -> (P, F)) the compiler uses
    TensorE: a K=1 matmul with a ones stationary into PSUM and a copy back, per 512 columns."""
    m = machine()
    x = I.tile(src, "src", api)
    shape = tuple(int(n) for n in shape)
    if shape == x._shape:
        return x
    if len(shape) != len(x._shape) or broadcast_shapes(x._shape, shape) != shape:
        raise errors.BroadcastError(f"cannot broadcast tile of shape {list(x._shape)} to {list(shape)}")
    res = I.new_result(shape, x._b.dtype, SBUF, COPY, line)
    f = res._b.fresh
    if x._shape[0] == shape[0]:
        # free-dimension broadcast: one copy with a stride-0 read
        if not m.shape_only:
            T.write(res, T.array(x))
        I.record(m, COPY, api, (VECTOR, SCALAR), res, res, None, None, [x], line, "copy")
        return res
    if x._shape[0] != 1:
        raise errors.PartitionMismatchError(
            f"cannot broadcast {list(x._shape)} to {list(shape)}: the partition dimension can only be broadcast from 1")
    P = shape[0]
    free_shape = shape[1:]
    F = T.prod(free_shape)
    if not m.shape_only:
        T.write(res, T.array(x))
    chunk = 512
    n_chunks = -(-F // chunk)
    for c in range(n_chunks):
        f0, f1 = c * chunk, min(F, (c + 1) * chunk)
        ps = I.new_result((P, f1 - f0), F32, PSUM, MM_BCAST, line)
        sub = flat_box(free_shape, f0, f1)
        xs = x if x._shape[1:] == (1,) * len(free_shape) else T.restrict(x, ((0, 1),) + sub, x._shape)
        mm = MatmulInfo(1, P, f1 - f0, False, stationary_onezero=True)
        I.record(m, MM_BCAST, api, (TENSOR,), ps, ps, None, None, [xs], line, "", partitions=1,
                 free=f1 - f0, mm=mm)
        ps._b.fresh.state = ps._b.fresh.USED
        rbox = ((0, P),) + sub
        rv = T.restrict(res, rbox, shape)
        ins = m.emit(COPY, api, (VECTOR, SCALAR), res._b.dtname, ("float32",), P, f1 - f0,
                     (T.region(ps),), (T.region(rv),), line, "copy", None, None, 1, False)
        f.writers.append((ins, 0, rbox, T.region(rv)))
    f.kind = COPY
    return res


def flat_box(free_shape: tuple[int, ...], f0: int, f1: int) -> tuple[tuple[int, int], ...]:
    """Bounding box (over the free dims) of flat free positions [f0, f1)."""
    if len(free_shape) == 1:
        return ((f0, f1),)
    first = np.unravel_index(f0, free_shape)
    last = np.unravel_index(f1 - 1, free_shape)
    out, same = [], True
    for a, z, n in zip(first, last, free_shape):
        out.append((int(a), int(z) + 1) if same else (0, n))
        same = same and a == z
    return tuple(out)


def _lift(a, ndim: int):
    """A (P, 1) operand array seen against an ndim-D tile (P, F1, F2...)."""
    if isinstance(a, np.ndarray) and a.ndim < ndim:
        return a.reshape(a.shape + (1,) * (ndim - a.ndim))
    return a


def select(api: str, condition, x, y, dtype, mask, line: int) -> NkiTensor:
    """x where `condition` is nonzero, else y (nl.where of both dialects): x and y tiles,
    broadcast like nl.add's operands (the same partitions), or scalars; one VectorE
    instruction reading all three."""
    c = I.tile(condition, "condition", api)
    tiles = [("condition", c)]
    for name, v in (("x", x), ("y", y)):
        if isinstance(v, NkiTensor):
            tiles.append((name, I.tile(v, name, api)))
        elif not I.is_scalar(v):
            raise errors.OperandTypeError(f"'{name}' of '{api}' must be a tile or a scalar, got {type(v).__name__}")
    out = c._shape
    for _, t in tiles[1:]:
        shape = broadcast_shapes(out, t._shape)
        if shape is None or len(t._shape) != len(out) or t._shape[0] != out[0]:
            raise errors.BroadcastError(
                f"Parameter shapes ({', '.join(f'{n}{list(t._shape)}' for n, t in tiles)}) of '{api}' could not be "
                f"broadcast together (the partition dimension must agree)")
        out = shape
    dt = I.result_dtype([x, y], dtype)
    n = len(out)
    xt, yt = isinstance(x, NkiTensor), isinstance(y, NkiTensor)
    xs = None if xt else np.float32(x)
    ys = None if yt else np.float32(y)

    def fn(cond, *rest):
        rest = list(rest)
        a = _lift(rest.pop(0), n) if xt else xs
        b = _lift(rest.pop(0), n) if yt else ys
        return np.where(_lift(cond, n) != 0, a, b)
    return I.compute(api, TT, (VECTOR,), "select", tiles, out, dt, mask, fn, line=line)


def variance(api: str, x, axis, dtype, mask, keepdims: bool, line: int) -> NkiTensor:
    """nl.var of both dialects: the mean of squared deviations along free axes, in fp32 (a
    mean, a subtract, a square and a mean), in `dtype` (default: x's)."""
    x = I.tile(x, "x", api)
    m = mean(api, x, axis, F32, mask, True, line)
    d = elementwise(api, "subtract", x, m, F32, mask, line)
    sq = unary_activation(api, "square", d, F32, mask, line)
    return mean(api, sq, axis, dtype if dtype is not None else x._b.dtype, mask, keepdims, line)
