"""VectorE instructions beyond the ALU ones (core.alu), in the calling convention of the core
(a fresh result tile, or a write into a given destination for the in-place ones), shared by
both dialects: batch-norm statistics (bn_stats, bn_aggr), the top-8 family (max8,
nc_find_index8, nc_match_replace8), selections (select_reduce, range_select,
tensor_copy_predicated), the cross-partition shuffle (nc_stream_shuffle), exponential and
tensor_scalar_cumulative, and VectorE's accumulator registers that the reducing ones share
("The accumulator registers are shared across Vector Engine accumulation instructions including
exponential, range_select, select_reduce, tensor_scalar_reduce and tensor_scalar_cumulative",
nki.isa documentation, NKI 0.6). Each takes the API name the trace records and the kernel line.

Semantics and limits are those of the nki.isa documentation (NKI 0.6, aws-neuron-sdk
nki/api/nki/isa/__init__.py at 81ce03a; legacy: general/nki/api/nki/isa at 0521004).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import errors
from ..trace import COPY, PSUM, RED, SBUF, TS, TT, TTS, VECTOR
from . import instr as I
from . import ops
from . import tensor as T
from .runtime import machine
from .tensor import NkiTensor

F32 = np.dtype(np.float32)
FP32_MIN = float(np.finfo(np.float32).min)

# reduce_cmd values (nisa.reduce_cmd; load_reduce is the current dialect's)
IDLE, RESET, REDUCE, RESET_REDUCE, LOAD_REDUCE = 0, 1, 2, 3, 4
CMD_NAMES = {IDLE: "idle", RESET: "reset", REDUCE: "reduce", RESET_REDUCE: "reset_reduce",
             LOAD_REDUCE: "load_reduce"}


# --- helpers shared by the new instruction modules -------------------------------------------------

def _operands(operands: Sequence[tuple[str, object]], api: str, memories=I.ONCHIP) -> tuple[list, list, list]:
    """(operand views or scalars, the tile operands, which are `raw`) of an instruction's
    `(name, value[, "raw"])` operands; each tile checked in its memory and bounds."""
    views, tiles, raw = [], [], []
    for op in operands:
        name, x = op[0], op[1]
        if isinstance(x, NkiTensor):
            v = I.tile(x, name, api, memories)
            if v._checks:
                T.check_bounds(v)
            views.append(v)
            tiles.append(v)
            raw.append(len(op) > 2)
        else:
            views.append(x)
            raw.append(False)
    return views, tiles, raw


def _arrays(views: list, raw: list) -> list:
    """The operands' values: fp32 arrays of the tiles (as stored when raw), scalars as given."""
    return [(T.array(v) if r else I.fp32(v)) if isinstance(v, NkiTensor) else v for v, r in zip(views, raw)]


def instruction(api: str, kind: str, engines: tuple[str, ...], func: str, operands: Sequence[tuple[str, object]],
                out_shape: tuple[int, ...], out_dtype: np.dtype, fn: Callable, line: int, *,
                free: int | None = None, memories=I.ONCHIP, partitions: int | None = None) -> NkiTensor:
    """An unmasked instruction into a fresh SBUF tile of `out_shape`: `fn(*arrays)` on the fp32
    (or, for `("name", tile, "raw")` operands, unconverted) arrays of the tile operands; `free`
    (default: the result's elements per partition) is the work per partition the trace prices."""
    m = machine()
    out_shape = tuple(int(n) for n in out_shape)
    views, tiles, raw = _operands(operands, api, memories)
    res = I.new_result(out_shape, out_dtype, SBUF, kind, line)
    if not m.shape_only and 0 not in out_shape:
        value = fn(*_arrays(views, raw))
        I.store_result(res, np.asarray(value).reshape(out_shape) if np.shape(value) != out_shape else value, None)
    I.record(m, kind, api, engines, res, res, None, None, tiles, line, func, free=free, partitions=partitions)
    return res


def writer(res: NkiTensor):
    """The trace record of the instruction that produced fresh result `res`."""
    return res._b.fresh.writers[-1][0]


def extra_output(ins, dst: NkiTensor, values, api: str, what: str) -> None:
    """Instruction `ins` also writes `values` (None in shape-only runs) into tile `dst`."""
    m = machine()
    d = I.tile(dst, what, api)
    T.check_bounds(d)
    ins.writes = ins.writes + (T.region(d),)
    m.note_write(d._b, T.region(d).box, view=d)
    if values is not None:
        T.write(d, np.asarray(values).reshape(d._shape))


def in_place(api: str, kind: str, engines: tuple[str, ...], func: str, dst: NkiTensor,
             operands: Sequence[tuple[str, object]], fn: Callable, line: int, *, where=None,
             reads_dst: bool = True, free: int | None = None) -> object:
    """An instruction that writes tile `dst` in place (elements it leaves keep their values):
    `fn(dst_array, *operand arrays)` gives the new values (fp32 arrays; `raw` operands as
    stored). Returns the trace record."""
    m = machine()
    I.check_dst(dst, api)
    if dst._b.memory not in I.ONCHIP:
        raise errors.UnsupportedMemoryError(
            f"Expected operand 'dst' of '{api}' to be in address space 'sbuf|psum', but got a tile in "
            f"'{dst._b.memory}' instead")
    T.check_bounds(dst)
    views, tiles, raw = _operands(operands, api)
    if not m.shape_only and 0 not in dst._shape:
        cur = I.fp32(dst) if reads_dst else None
        T.write(dst, np.asarray(fn(cur, *_arrays(views, raw))).reshape(dst._shape))
    m.note_write(dst._b, T.region(dst).box, view=dst)
    reads = tiles + ([dst] if reads_dst else [])
    shape = dst._shape
    p = shape[0]
    n = T.prod(shape[1:]) if free is None else free
    psum = sum(1 for v in tiles if v._b.memory == PSUM)
    strided = any(T.minor_stride_bytes(v) > 16 for v in reads) or T.minor_stride_bytes(dst) > 16
    return m.emit(kind, api, engines, dst._b.dtname, tuple(v._b.dtname for v in reads), p, n,
                  tuple(T.region(v) for v in reads), (T.region(dst),), line, func, None, None, psum, strided)


def refuse_mask(mask, shape, api: str, why: str) -> None:
    """A legacy `mask=` the emulator does not model for `api` (one that leaves every element
    active is fine)."""
    if mask is None:
        return
    box, wh = I.active(mask, shape)
    if box is not None or wh is not None:
        raise errors.UnsupportedApiError(f"a masked '{api}' is not supported by the emulator ({why})")


def result_dtype(dtype, default: np.dtype) -> np.dtype:
    return I.normalize_dtype(dtype) if dtype is not None else default


def scalar_or_vector(x, P: int, name: str, api: str):
    """A float32 scalar, or a (P, 1) tile (checked), as an operand."""
    if isinstance(x, NkiTensor):
        t = I.tile(x, name, api)
        if t._shape[0] != P or T.prod(t._shape[1:]) != 1:
            raise errors.ShapeMismatchError(
                f"'{name}' of '{api}' must be a scalar or a tile of shape [{P}, 1], got shape {list(t._shape)}")
        return t
    if I.is_scalar(x):
        return np.float32(x)
    raise errors.OperandTypeError(f"'{name}' of '{api}' must be a scalar or a [P, 1] tile, got {type(x).__name__}")


def column(v, P: int) -> np.ndarray:
    """A (P, 1) fp32 column of a scalar or a (P, 1) array operand."""
    if isinstance(v, np.ndarray):
        return v.reshape(P, 1)
    return np.full((P, 1), v, dtype=np.float32)


def free_size(x: NkiTensor) -> int:
    return T.prod(x._shape[1:])


def check_free(x: NkiTensor, lo: int, hi: int, name: str, api: str) -> int:
    n = free_size(x)
    if not lo <= n <= hi:
        raise errors.DimensionLimitError(
            f"'{api}' reads between {lo} and {hi} elements per partition of '{name}', got {n} "
            f"({name}{list(x._shape)})")
    return n


def integer_tile(x: NkiTensor, name: str, api: str, kinds: str = "iub") -> None:
    if x._b.dtype.kind not in kinds:
        raise errors.UnsupportedDtypeError(
            f"'{name}' of '{api}' must have an integer data type, got '{x._b.dtname}'")


# --- VectorE's accumulator registers ------------------------------------------------------------------

class Accumulators:
    """VectorE's per-partition accumulator registers: their values (full-data runs) and which
    are in a known state (reset or loaded in this kernel, and no `idle` instruction since: "Even
    when reduce_cmd is set to idle, the accumulator state may still be modified")."""

    __slots__ = ("ready", "values")

    def __init__(self, shape_only: bool):
        self.values = None if shape_only else np.full(T.PMAX, np.nan, dtype=np.float32)
        self.ready = np.zeros(T.PMAX, dtype=bool)


def registers():
    m = machine()
    regs = m.state.get("vector_accumulators")
    if regs is None:
        regs = m.state["vector_accumulators"] = Accumulators(m.shape_only)
    return regs


def reduce_command(cmd, api: str, allowed: tuple[int, ...]) -> int:
    """The integer value of a `nisa.reduce_cmd` member, one `api` supports."""
    value = getattr(cmd, "value", cmd)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) not in CMD_NAMES:
        raise errors.OperandTypeError(f"'reduce_cmd' of '{api}' must be a member of nisa.reduce_cmd, got {cmd!r}")
    value = int(value)
    if value not in allowed:
        raise errors.OperandTypeError(
            f"reduce_cmd={CMD_NAMES[value]} is not supported by '{api}'; use one of "
            f"{', '.join('nisa.reduce_cmd.' + CMD_NAMES[c] for c in allowed)}")
    return value


def accumulate(api: str, ins, res_values, P: int, op: str, cmd: int, reduce_res, line: int, *, init=None,
               negate: bool = False, masked: bool = False) -> None:
    """The accumulator side of a VectorE instruction (record `ins`) whose per-partition values to
    reduce are `res_values` ((P, F) fp32, None in shape-only runs): `cmd` resets the registers of
    its partitions to `op`'s identity (reset_reduce) or loads `init` (load_reduce), then reduces
    the values into them with `op`; `reduce` continues; `idle` leaves them in an unknown state.
    `reduce_res`, if given, then receives the registers (negated if `negate`; the registers
    keep their sign)."""
    regs = registers()
    if masked and cmd != IDLE:
        raise errors.UnsupportedApiError(
            f"a masked '{api}' with reduce_cmd={CMD_NAMES[cmd]} is not supported by the emulator (which "
            f"partitions' registers a mask leaves alone is not documented)")
    if cmd == REDUCE and not regs.ready[:P].all():
        raise errors.AccumulatorStateError(
            f"'{api}' with reduce_cmd=reduce accumulates onto VectorE's accumulator registers, which are in an "
            f"unknown state (no earlier instruction of this kernel reset them, or an instruction with "
            f"reduce_cmd=idle ran since): start with reduce_cmd=nisa.reduce_cmd.reset_reduce")
    if cmd == IDLE:
        if reduce_res is not None:
            raise errors.AccumulatorStateError(
                f"'{api}' with reduce_res and reduce_cmd=idle reads VectorE's accumulator registers, whose state an "
                f"idle instruction leaves unknown: pass reduce_cmd=nisa.reduce_cmd.reset_reduce to reduce this "
                f"instruction's results into reduce_res")
        regs.ready[:P] = False
        return
    if cmd == LOAD_REDUCE and init is None:
        raise errors.OperandTypeError(f"'{api}' with reduce_cmd=load_reduce needs reduce_init (the registers' "
                                      f"starting values)")
    dst = None
    if reduce_res is not None:
        dst = I.tile(reduce_res, "reduce_res", api)
        if dst._shape[0] != P or T.prod(dst._shape[1:]) != 1:
            raise errors.ShapeMismatchError(
                f"'reduce_res' of '{api}' must be a tile of shape [{P}, 1], got shape {list(dst._shape)}")
    regs.ready[:P] = True
    if regs.values is not None and res_values is not None:
        vals = res_values.reshape(P, -1)
        red = ops.REDUCE[op](vals, axis=1) if vals.shape[1] else np.full(P, ops.REDUCE_IDENTITY[op], np.float32)
        if cmd == REDUCE:
            start = regs.values[:P]
        elif cmd == LOAD_REDUCE:
            start = init.reshape(P) if isinstance(init, np.ndarray) else np.full(P, init, np.float32)
        else:
            start = np.full(P, ops.REDUCE_IDENTITY[op], np.float32)
        regs.values[:P] = ops.ALU[op](start, red.astype(np.float32))
    if dst is not None:
        ins.func = f"{ins.func},reduce-{op}"
        values = None if regs.values is None or res_values is None else regs.values[:P].reshape(P, 1)
        extra_output(ins, dst, None if values is None else (-values if negate else values), api, "reduce_res")
    else:
        ins.func = f"{ins.func},accumulate-{op}"


# --- batch-norm statistics -----------------------------------------------------------------------------

BN_STATS_FMAX = 512


def _half_stats(a: np.ndarray) -> list[np.ndarray]:
    n = a.shape[1]
    mean = a.mean(axis=1, dtype=np.float32)
    m2 = np.square(a - mean[:, None]).sum(axis=1, dtype=np.float32)
    return [np.full(a.shape[0], n, np.float32), mean, m2]


def bn_stats(api: str, data, dtype, mask, line: int) -> NkiTensor:
    """Per partition: (count, mean, variance * count) of the even-indexed and of the odd-indexed
    elements (free axes flattened), 6 values; at most 512 elements per partition."""
    x = I.tile(data, "data", api)
    refuse_mask(mask, x._shape, api, "what a mask does to the statistics is not documented")
    P, F = x._shape[0], free_size(x)
    if F > BN_STATS_FMAX:
        raise errors.DimensionLimitError(
            f"free dimension size of 'data{list(x._shape)}' of '{api}' ({F} elements per partition) exceeds the "
            f"architecture limitation of {BN_STATS_FMAX} (nl.tile_size.bn_stats_fmax); run one bn_stats per "
            f"512-element tile and aggregate them with one bn_aggr")
    if F < 2:
        raise errors.UnsupportedApiError(
            f"'{api}' of a tile with {F} element per partition is not supported by the emulator (the statistics "
            f"of its empty odd half are not documented)")

    def fn(a):
        a = a.reshape(P, F)
        return np.stack(_half_stats(a[:, 0::2]) + _half_stats(a[:, 1::2]), axis=1)

    return instruction(api, RED, (VECTOR,), "bn_stats", [("data", x)], (P, 6), result_dtype(dtype, x._b.dtype), fn,
                       line, free=F)


def bn_aggr(api: str, data, dtype, mask, line: int) -> NkiTensor:
    """Per partition: the mean and variance of the elements that (count, mean, variance * count)
    triples of bn_stats describe."""
    x = I.tile(data, "data", api)
    refuse_mask(mask, x._shape, api, "what a mask does to the aggregation is not documented")
    P, F = x._shape[0], free_size(x)
    if F == 0 or F % 3:
        raise errors.ShapeMismatchError(
            f"'data{list(x._shape)}' of '{api}' must hold (count, mean, variance*count) triples: its elements per "
            f"partition ({F}) must be a multiple of 3")

    def fn(a):
        t = a.reshape(P, F // 3, 3)
        c, mu, m2 = t[..., 0], t[..., 1], t[..., 2]
        n = c.sum(axis=1, dtype=np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (c * mu).sum(axis=1, dtype=np.float32) / n
            var = (m2 + c * np.square(mu - mean[:, None])).sum(axis=1, dtype=np.float32) / n
        return np.stack([mean, var], axis=1)

    return instruction(api, RED, (VECTOR,), "bn_aggr", [("data", x)], (P, 2), result_dtype(dtype, x._b.dtype), fn,
                       line, free=F)


# --- the top-8 family -----------------------------------------------------------------------------------

MAX8_FMIN, MAX8_FMAX = 8, 16384


def max8(api: str, src, dtype, mask, line: int) -> NkiTensor:
    """The 8 largest values of each partition (free axes flattened), in descending order."""
    x = I.tile(src, "src", api)
    refuse_mask(mask, x._shape, api, "what a mask does to the search is not documented")
    P = x._shape[0]
    F = check_free(x, MAX8_FMIN, MAX8_FMAX, "src", api)

    def fn(a):
        return -np.sort(-a.reshape(P, F), axis=1, kind="stable")[:, :8]

    return instruction(api, RED, (VECTOR,), "max8", [("src", x)], (P, 8), result_dtype(dtype, x._b.dtype), fn,
                       line, free=F)


def find_index8(api: str, data, vals, dtype, mask, line: int) -> NkiTensor:
    """Per partition, the index (free axes flattened) of the first occurrence of each of the 8
    values of `vals` in `data`; duplicate values take successive occurrences (ascending); a value
    not found gives the all-ones sentinel of the index type."""
    x = I.tile(data, "data", api)
    v = I.tile(vals, "vals", api)
    refuse_mask(mask, x._shape, api, "what a mask does to the search is not documented")
    P = x._shape[0]
    F = check_free(x, 8, MAX8_FMAX, "data", api)
    if v._shape[0] != P or free_size(v) != 8:
        raise errors.ShapeMismatchError(
            f"'vals' of '{api}' must have {P} partitions and 8 elements per partition, got shape {list(v._shape)}")
    dt = I.normalize_dtype(dtype) if dtype is not None else np.dtype(np.uint32)
    if dt not in (np.dtype(np.uint16), np.dtype(np.uint32)):
        raise errors.UnsupportedDtypeError(f"the indices of '{api}' are uint16 or uint32, got '{T.dtype_name(dt)}'")
    sentinel = np.iinfo(dt).max

    def fn(a, b):
        a, b = a.reshape(P, F), b.reshape(P, 8)
        out = np.full((P, 8), sentinel, dtype=np.int64)
        for p in range(P):
            used: set[int] = set()
            for j in range(8):
                for k in np.flatnonzero(a[p] == b[p, j]):
                    if int(k) not in used:
                        used.add(int(k))
                        out[p, j] = k
                        break
        return out

    return instruction(api, RED, (VECTOR,), "find_index8", [("data", x), ("vals", v)], (P, 8), dt, fn, line,
                       free=F)


def match_replace8(api: str, data, vals, imm, dst_idx, dtype, mask, line: int) -> NkiTensor:
    """`data` with the first occurrence of each of the 8 values of `vals` (per partition, free
    axes flattened) replaced by `imm`; `vals` are processed from the last to the first, so that
    duplicate values take successive occurrences with the first occurrence in the highest slot.
    The matched indices go into `dst_idx` if given."""
    x = I.tile(data, "data", api)
    v = I.tile(vals, "vals", api)
    refuse_mask(mask, x._shape, api, "what a mask does to the search is not documented")
    P = x._shape[0]
    F = check_free(x, 1, MAX8_FMAX, "data", api)
    if v._shape[0] != P or free_size(v) != 8:
        raise errors.ShapeMismatchError(
            f"'vals' of '{api}' must have {P} partitions and 8 elements per partition, got shape {list(v._shape)}")
    if not I.is_scalar(imm):
        raise errors.OperandTypeError(f"'imm' of '{api}' must be a float32 constant, got {type(imm).__name__}")
    immv = np.float32(imm)
    found = {}

    def fn(a, b):
        out = a.reshape(P, F).copy()
        b = b.reshape(P, 8)
        idx = np.zeros((P, 8), dtype=np.int64)
        for p in range(P):
            taken = np.zeros(F, dtype=bool)
            for j in range(7, -1, -1):
                hits = np.flatnonzero((a.reshape(P, F)[p] == b[p, j]) & ~taken)
                if hits.size:
                    taken[hits[0]] = True
                    idx[p, j] = hits[0]
                    out[p, hits[0]] = immv
                else:
                    idx[p, j] = np.iinfo(np.uint32).max
        found["idx"] = idx
        return out.reshape(x._shape)

    res = instruction(api, RED, (VECTOR,), "match_replace8", [("data", x), ("vals", v)], x._shape,
                      result_dtype(dtype, x._b.dtype), fn, line, free=F)
    if dst_idx is not None:
        d = I.tile(dst_idx, "dst_idx", api)
        if d._shape[0] != P or free_size(d) != 8:
            raise errors.ShapeMismatchError(
                f"'dst_idx' of '{api}' must have {P} partitions and 8 elements per partition, got shape "
                f"{list(d._shape)}")
        idx = found.get("idx")
        if idx is not None and d._b.dtype.kind in "iu":
            idx = np.minimum(idx, np.iinfo(d._b.dtype).max)
        extra_output(writer(res), d, idx, api, "dst_idx")
    return res


# --- selections -----------------------------------------------------------------------------------------

def _predicate(x, api: str, name: str = "predicate") -> NkiTensor:
    t = I.tile(x, name, api)
    integer_tile(t, name, api)
    return t


def _not_both_psum(a, b, names: tuple[str, str], api: str) -> None:
    if isinstance(a, NkiTensor) and isinstance(b, NkiTensor) and a._b.memory == PSUM and b._b.memory == PSUM:
        raise errors.UnsupportedMemoryError(
            f"operands '{names[0]}' and '{names[1]}' of '{api}' cannot both be in 'psum'; copy one to SBUF first")


def copy_predicated(api: str, dst, src, predicate, reverse_pred: bool, line: int) -> None:
    """dst = src where predicate (nonzero; zero with reverse_pred), dst unchanged elsewhere; `src`
    a tile of dst's shape or a scalar."""
    d = dst
    pr = _predicate(predicate, api)
    P = d._shape[0]
    if pr._shape[0] != P or free_size(pr) != free_size(d):
        raise errors.ShapeMismatchError(
            f"'predicate{list(pr._shape)}' of '{api}' must have the partitions and elements per partition of "
            f"dst{list(d._shape)}")
    if pr._b.dtype.kind == "i":
        raise errors.UnsupportedDtypeError(
            f"'predicate' of '{api}' must be uint8, uint16 or uint32, got '{pr._b.dtname}'")
    operands = [("predicate", pr, "raw")]
    if isinstance(src, NkiTensor):
        s = I.tile(src, "src", api)
        if s._shape[0] != P or free_size(s) != free_size(d):
            raise errors.ShapeMismatchError(
                f"'src{list(s._shape)}' of '{api}' must have the partitions and elements per partition of "
                f"dst{list(d._shape)}")
        if s._b.dtype != d._b.dtype:
            raise errors.UnsupportedDtypeError(
                f"'src' ({s._b.dtname}) and 'dst' ({d._b.dtname}) of '{api}' must share the same data type")
        _not_both_psum(s, pr, ("src", "predicate"), api)
        operands.append(("src", s, "raw"))
    elif not I.is_scalar(src):
        raise errors.OperandTypeError(f"'src' of '{api}' must be a tile or a scalar, got {type(src).__name__}")

    def fn(cur, p, s=None):
        keep = (p.reshape(cur.shape) != 0) != bool(reverse_pred)
        val = np.asarray(src, dtype=np.float32) if s is None else s.reshape(cur.shape)
        if s is not None:   # bit-accurate: the source's own values, not their fp32 form
            out = T.array(d).copy()
            out[keep] = val[keep]
            return out
        return np.where(keep, val, cur)

    in_place(api, TT, (VECTOR,), "copy_predicated", d, operands, fn, line)


def select_reduce(api: str, dst, predicate, on_true, on_false, reduce_res, reduce_cmd: int, reduce_op,
                  reverse_pred: bool, dtype, mask, line: int) -> None:
    """dst = on_true where predicate (nonzero; zero with reverse_pred) else on_false (a scalar or
    a (P, 1) vector), with the max of each partition of the result reduced into VectorE's
    registers as `reduce_cmd` says."""
    t = I.tile(on_true, "on_true", api)
    pr = _predicate(predicate, api)
    P = t._shape[0]
    if pr._shape[0] != P or free_size(pr) != free_size(t) or dst._shape[0] != P or free_size(dst) != free_size(t):
        raise errors.ShapeMismatchError(
            f"'on_true{list(t._shape)}', 'predicate{list(pr._shape)}' and 'dst{list(dst._shape)}' of '{api}' must "
            f"have the same partitions and elements per partition")
    if t._b.dtname in ("int32", "uint32") or t._b.dtname == "tfloat32":
        raise errors.UnsupportedDtypeError(f"'on_true' of '{api}' cannot be {t._b.dtname}")
    _not_both_psum(t, pr, ("on_true", "predicate"), api)
    op = ops.alu_name(reduce_op, api, "reduce_op")
    if op != "maximum":
        raise errors.UnsupportedOpError(f"'reduce_op' of '{api}' only supports nl.maximum, got '{op}'")
    if reduce_res is not None:
        rr = I.tile(reduce_res, "reduce_res", api)
        if rr._b.dtype.kind not in "fV":
            raise errors.UnsupportedDtypeError(f"'reduce_res' of '{api}' must have a float type, got '{rr._b.dtname}'")
    off = scalar_or_vector(on_false, P, "on_false", api)
    box, wh = I.active(mask, dst._shape)
    if box is not None or wh is not None:
        raise errors.UnsupportedApiError(f"a masked '{api}' is not supported by the emulator")
    operands = [("predicate", pr, "raw"), ("on_true", t)] + ([("on_false", off)] if isinstance(off, NkiTensor)
                                                            else [])
    kept = {}

    def fn(cur, p, a, f=None):
        keep = (p.reshape(a.shape) != 0) != bool(reverse_pred)
        fv = column(off if f is None else f, P).reshape((P,) + (1,) * (a.ndim - 1))
        out = np.where(keep, a, fv).astype(np.float32)
        kept["v"] = out
        return out

    ins = in_place(api, TT, (VECTOR,), "select", dst, operands, fn, line, reads_dst=False)
    accumulate(api, ins, kept.get("v"), P, op, reduce_cmd, reduce_res, line)


RANGE_CMP = ("equal", "less", "less_equal", "greater", "greater_equal")


def range_select(api: str, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd: int, reduce_res,
                 reduce_op, range_start, on_false_value, dtype, mask, line: int) -> NkiTensor:
    """out = on_true where comp_op0(range_start + i, bound0) and comp_op1(range_start + i, bound1)
    (i: the flattened free index, compared in fp32) else on_false_value (FP32_MIN), with the max
    of each partition of out reduced into VectorE's registers as `reduce_cmd` says."""
    t = I.tile(on_true_tile, "on_true_tile", api)
    P = t._shape[0]
    if t._b.dtype.kind not in "fV":
        raise errors.UnsupportedDtypeError(f"'on_true_tile' of '{api}' must have a float type, got '{t._b.dtname}'")
    names = []
    for name, op in (("comp_op0", comp_op0), ("comp_op1", comp_op1)):
        n = ops.alu_name(op, api, name)
        if n not in RANGE_CMP:
            raise errors.UnsupportedOpError(
                f"'{name}' of '{api}' must be one of nl.equal, nl.less, nl.less_equal, nl.greater, "
                f"nl.greater_equal, got '{n}'")
        names.append(n)
    bounds = []
    for name, b in (("bound0", bound0), ("bound1", bound1)):
        bt = I.tile(b, name, api)
        if bt._shape[0] != P or free_size(bt) != 1:
            raise errors.ShapeMismatchError(
                f"'{name}' of '{api}' must have {P} partitions and one element per partition, got shape "
                f"{list(bt._shape)}")
        if bt._b.dtype != F32:
            raise errors.UnsupportedDtypeError(f"'{name}' of '{api}' must be float32, got '{bt._b.dtname}'")
        bounds.append(bt)
    if not isinstance(range_start, (int, np.integer)) or isinstance(range_start, bool):
        raise errors.OperandTypeError(f"'range_start' of '{api}' must be a compile-time integer, got {range_start!r}")
    if not I.is_scalar(on_false_value) or np.float32(on_false_value) != np.float32(FP32_MIN):
        raise errors.OperandTypeError(
            f"'on_false_value' of '{api}' must be FP32_MIN (-3.4028235e+38, nl.fp32.min) due to hardware "
            f"constraints, got {on_false_value!r}")
    op = ops.alu_name(reduce_op, api, "reduce_op")
    if op != "maximum":
        raise errors.UnsupportedOpError(f"'reduce_op' of '{api}' only supports nl.maximum, got '{op}'")
    box, wh = I.active(mask, t._shape)
    if box is not None or wh is not None:
        raise errors.UnsupportedApiError(f"a masked '{api}' is not supported by the emulator")
    F = free_size(t)
    f0, f1 = ops.ALU[names[0]], ops.ALU[names[1]]
    start = int(range_start)
    kept = {}

    def fn(a, b0, b1):
        idx = (np.float32(start) + np.arange(F, dtype=np.float32))[None, :]
        keep = (f0(idx, b0.reshape(P, 1)) != 0) & (f1(idx, b1.reshape(P, 1)) != 0)
        out = np.where(keep, a.reshape(P, F), np.float32(FP32_MIN)).astype(np.float32)
        kept["v"] = out
        return out.reshape(t._shape)

    res = instruction(api, TS, (VECTOR,), "range_select", [("on_true_tile", t), ("bound0", bounds[0]),
                                                            ("bound1", bounds[1])],
                      t._shape, result_dtype(dtype, t._b.dtype), fn, line)
    accumulate(api, writer(res), kept.get("v"), P, op, reduce_cmd, reduce_res, line)
    return res


# --- cross-partition shuffle -----------------------------------------------------------------------------

def stream_shuffle(api: str, src, dst, shuffle_mask, line: int) -> None:
    """Within each 32-partition quadrant: dst partition i = src partition shuffle_mask[i] of the
    same quadrant (255: dst partition i unchanged); the same mask for every quadrant."""
    s = I.tile(src, "src", api)
    d = dst
    mask = list(shuffle_mask)
    if len(mask) != 32:
        raise errors.ShapeMismatchError(f"'shuffle_mask' of '{api}' must have 32 elements, got {len(mask)}")
    if any(not isinstance(k, (int, np.integer)) or not (0 <= int(k) < 32 or int(k) == 255) for k in mask):
        raise errors.OperandTypeError(
            f"'shuffle_mask' of '{api}' holds source partitions 0-31 of the quadrant (or 255: unmodified), got {mask}")
    if s._b.dtype != d._b.dtype:
        raise errors.UnsupportedDtypeError(
            f"'dst' ({d._b.dtname}) of '{api}' must have the data type of 'src' ({s._b.dtname})")
    if free_size(s) != free_size(d):
        raise errors.ShapeMismatchError(
            f"'dst{list(d._shape)}' of '{api}' must have the elements per partition of 'src{list(s._shape)}'")
    ps, pd = s._shape[0], d._shape[0]
    active = -(-max(ps, pd) // 32) * 32
    for what, v in (("src", s), ("dst", d)):
        start = T.region(v).box[v._b.nb][0] if v._b.memory != "hbm" else 0
        allowed = {128: (0,), 96: (0,), 64: (0, 64), 32: (0, 32, 64, 96)}[active]
        if start not in allowed:
            raise errors.IndexNotSupportedError(
                f"the access of '{what}' of '{api}' starts at partition {start}; with {active} active partitions it "
                f"must start at {' or '.join(map(str, allowed))}")
    F = free_size(d)

    def fn(cur, a):
        out = T.array(d).reshape(pd, F).copy()
        a = a.reshape(ps, F)
        for p in range(pd):
            k = int(mask[p % 32])
            if k == 255:
                continue
            q = (p // 32) * 32 + k
            if q >= ps:
                raise errors.OutOfBoundsError(
                    f"'{api}' reads partition {q} of 'src{list(s._shape)}' (quadrant {p // 32}, shuffle_mask[{p % 32}]"
                    f" = {k}), which it does not have")
            out[p] = a[q]
        return out

    in_place(api, COPY, (VECTOR,), "shuffle", d, [("src", s, "raw")], fn, line)


# --- exponential, cumulative tensor_scalar ---------------------------------------------------------------

def exponential(api: str, dst, src, max_value, reduce_res, reduce_cmd: int, reduce_init, line: int) -> None:
    """dst = exp(src - max_value) (max_value a scalar or a (P, 1) vector), with the sum of each
    partition of dst reduced into VectorE's registers as `reduce_cmd` says."""
    s = I.tile(src, "src", api)
    P = s._shape[0]
    if dst._shape[0] != P or free_size(dst) != free_size(s):
        raise errors.ShapeMismatchError(
            f"'dst{list(dst._shape)}' of '{api}' must have the partitions and elements per partition of "
            f"'src{list(s._shape)}'")
    if len(s._shape) > 4 or len(dst._shape) > 4:
        raise errors.MaxDimensionError(f"'src' and 'dst' of '{api}' can be up to 4D tensors")
    mv = scalar_or_vector(max_value, P, "max_value", api)
    init = None
    if reduce_cmd == LOAD_REDUCE:
        init = scalar_or_vector(reduce_init, P, "reduce_init", api)
    elif reduce_init is not None and (not I.is_scalar(reduce_init) or float(reduce_init) != 0.0):
        raise errors.OperandTypeError(
            f"'reduce_init' of '{api}' should be unset or 0.0 when reduce_cmd is not load_reduce")
    operands = [("src", s)] + ([("max_value", mv)] if isinstance(mv, NkiTensor) else [])
    kept = {}

    def fn(cur, a, m=None):
        m = column(mv if m is None else m, P).reshape((P,) + (1,) * (a.ndim - 1))
        out = np.exp(a - m).astype(np.float32)
        kept["v"] = out
        return out

    ins = in_place(api, TS, (VECTOR,), "exp", dst, operands, fn, line, reads_dst=False)
    iv = None
    if isinstance(init, NkiTensor):
        # (shape-only: the registers hold no values, a placeholder start stands for the tile's)
        iv = np.float32(0.0) if machine().shape_only else I.fp32(init).reshape(P)
        ins.reads = ins.reads + (T.region(init),)
    elif init is not None:
        iv = np.float32(init)
    accumulate(api, ins, kept.get("v"), P, "add", reduce_cmd, reduce_res, line,
               init=iv if init is not None else None)


CUMULATIVE_OPS = ("add", "subtract", "multiply", "maximum", "minimum")


def tensor_scalar_cumulative(api: str, dst, src, op0, op1, imm0, imm1, reduce_cmd: int, reverse0: bool,
                             line: int) -> None:
    """Per partition, along the flattened free axis: reg = op1(op0(src[i], imm0), reg), dst[i] =
    reg; the register starts at op1's identity (reset_reduce), at imm1 (load_reduce) or where the
    previous accumulation left it (reduce)."""
    s = I.tile(src, "src", api)
    P = s._shape[0]
    for what, v in (("src", s), ("dst", dst)):
        if v._b.dtname in ("int32", "uint32"):
            raise errors.UnsupportedDtypeError(f"'{what}' of '{api}' cannot be {v._b.dtname} (ISA limitation)")
    if dst._shape[0] != P or free_size(dst) != free_size(s):
        raise errors.ShapeMismatchError(
            f"'dst{list(dst._shape)}' of '{api}' must have the partitions and elements per partition of "
            f"'src{list(s._shape)}'")
    n0 = ops.alu_name(op0, api, "op0")
    if n0 not in ops.ARITHMETIC:
        raise errors.UnsupportedOpError(f"'op0' of '{api}' must be an arithmetic operator, got '{n0}'")
    n1 = ops.alu_name(op1, api, "op1")
    if n1 not in CUMULATIVE_OPS:
        raise errors.UnsupportedOpError(
            f"'op1' of '{api}' must be one of nl.add, nl.subtract, nl.multiply, nl.maximum, nl.minimum, got '{n1}'")
    i0 = scalar_or_vector(imm0, P, "imm0", api)
    i1 = scalar_or_vector(imm1, P, "imm1", api) if reduce_cmd == LOAD_REDUCE else None
    regs = registers()
    if reduce_cmd == REDUCE and not regs.ready[:P].all():
        raise errors.AccumulatorStateError(
            f"'{api}' with reduce_cmd=reduce continues VectorE's accumulator registers, which are in an unknown "
            f"state: start with reduce_cmd=nisa.reduce_cmd.reset_reduce")
    if reduce_cmd == LOAD_REDUCE and imm1 is None:
        raise errors.OperandTypeError(f"'{api}' with reduce_cmd=load_reduce needs imm1 (the registers' start)")
    operands = [("src", s)] + ([("imm0", i0)] if isinstance(i0, NkiTensor) else []) + \
               ([("imm1", i1)] if isinstance(i1, NkiTensor) else [])
    f0, f1 = ops.ALU[n0], ops.ALU["subtract" if n1 == "subtract" else n1]
    F = free_size(s)

    def fn(cur, a, *rest):
        rest = list(rest)
        a0 = column(rest.pop(0) if isinstance(i0, NkiTensor) else i0, P)
        if reduce_cmd == REDUCE:
            reg = regs.values[:P].copy()
        elif reduce_cmd == LOAD_REDUCE:
            reg = column(rest.pop(0) if isinstance(i1, NkiTensor) else i1, P).reshape(P).copy()
        else:
            reg = np.full(P, ops.REDUCE_IDENTITY.get(n1, 0.0), np.float32)
        x = a.reshape(P, F)
        t = f0(a0, x) if reverse0 else f0(x, a0)
        out = np.empty((P, F), np.float32)
        for i in range(F):
            reg = f1(t[:, i], reg).astype(np.float32)
            out[:, i] = reg
        if regs.values is not None:
            regs.values[:P] = reg
        return out

    in_place(api, TTS, (VECTOR,), f"{n0},{n1}(cumulative)", dst, operands, fn, line, reads_dst=False)
    regs.ready[:P] = True
