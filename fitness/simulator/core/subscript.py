"""NKI subscripts: `tensor[key]` with NKI's indexing rules, as affine views.

Block dimensions take integers. The rest is either basic indexing (integers and slices;
on-chip an integer keeps the partition dimension with size 1 and results stay at least
2-D) or advanced indexing (`nl.arange` expressions and integers, broadcast together; the
broadcast shape is the tile shape). Mixing the two is an error, as is a 1-D arange.
Subscripts of whole tensors by integers and affine expressions reuse a cached plan: the
structure depends only on the tensor layout and the expressions' shapes, not on the loop
indices, which change only the constants.
"""

from __future__ import annotations

from operator import attrgetter, lt

import numpy as np

from .. import errors
from .indexing import IndexArray, IndexExpr, aligned_coef, broadcast_shapes, is_int
from .tensor import (
    Buffer,
    Fresh,
    NkiTensor,
    _general_view,
    _index_arrays,
    _make,
    _minor_stride,
    block_box,
    new_region,
    touch,
    whole,
)
from ..trace import HBM


def subscript(v: NkiTensor, key) -> NkiTensor:
    """Index a tensor or tile with NKI's rules.

    Block dimensions take integers. The rest is either basic indexing (integers and slices;
    on-chip an integer keeps the partition dimension with size 1 and results stay at least
    2-D) or advanced indexing (`nl.arange` expressions and integers, broadcast together;
    the broadcast shape is the tile shape). Mixing slices with expressions is an error.
    Out-of-bounds ranges are checked when an instruction uses the view (a mask may exclude them).
    """
    b = v._b
    f = b.fresh
    if f is not None and f.state != Fresh.USED:
        touch(f)
    t = None
    if v._whole:
        t = _fast_subscript(v, b, key if type(key) is tuple else (key,))
    if t is None:
        t = _subscript_slow(v, b, key if type(key) is tuple else (key,))
    t._srckey = key   # lets `t[k] += x` recognise its own target in __setitem__
    t._srcpar = v
    return t


def _subscript_slow(v: NkiTensor, b: Buffer, key: tuple) -> NkiTensor:
    if len(v._key) < b.nb:
        blk = list(v._key)
        i = 0
        while len(blk) < b.nb and i < len(key):
            k = key[i]
            if k is Ellipsis:
                raise errors.TileInferenceError(
                    f"tensor '{b.label}' of shape {b.shape} has block dimensions {b.shape[:b.nb]}; index them with "
                    f"integers before using '...'")
            if not is_int(k):
                raise errors.IndexNotSupportedError(
                    f"block dimension {len(blk)} of tensor '{b.label}' (shape {b.shape}) must be indexed by an "
                    f"integer or loop index, got {_describe(k)}")
            k = int(k)
            n = b.shape[len(blk)]
            if k < 0:
                k += n
            if not 0 <= k < n:
                raise errors.OutOfBoundsError(
                    f"Out-of-bound access for tensor `{b.label}` on dimension {len(blk)}: index {k} exceed "
                    f"dimension size of {n}")
            blk.append(k)
            i += 1
        rest = key[i:]
        t = whole(b, tuple(blk))
        if len(blk) < b.nb or not rest:
            return t
        return _subscript_tile(t, rest)
    return _subscript_tile(v, key)


# Subscript plans: the structure (tile shape, per-dim coefficients, strides, index ranges)
# of `whole_tensor[key]` depends only on the tensor's layout and on which index positions
# hold integers or which affine structures; only the constants change between loop
# iterations. Plans are built once by the general path and reused. What the constants and
# block indices determine (offset, ranges, bounds checks, the trace Region) is cached too,
# per tensor: kernels revisit the same tiles (a write, then its reads).


def _fast_subscript(v: NkiTensor, b: Buffer, key: tuple) -> NkiTensor | None:
    """`v[key]` for a whole tensor indexed by integers and affine expressions, from a cached
    plan (None: use the general path)."""
    nfix = len(v._key)
    # two-level cache: the kinds of the key elements, then the structures of its expressions
    kinds = (nfix, *map(type, key))
    level = b.plans.get(kinds)
    if level is None:
        level = b.plans[kinds] = ([j for j, k in enumerate(key) if type(k) is IndexExpr], {})
    expr_pos, by_struct = level
    if len(expr_pos) == 2:   # the common (partition, free) pair of expressions
        skey = (key[expr_pos[0]]._s, key[expr_pos[1]]._s)
    else:
        skey = tuple([key[j]._s for j in expr_pos])
    plan = by_struct.get(skey)
    if plan is None:
        plan = by_struct[skey] = _build_plan(v, b, key)
    if plan is False:
        return None
    new_shape, a, st, src, expr_src, nrem, geometries, _lohi, ms = plan
    # the constants of the local dims; everything else follows from them and the plan
    if expr_src is not None:
        if len(expr_src) == 2:
            cs = (key[expr_src[0]]._c, key[expr_src[1]]._c)
        else:
            cs = tuple(map(_CONST, map(key.__getitem__, expr_src)))
    elif len(src) == 2:   # e.g. t[..., nl.arange(128)[:, None], 0]
        (j0, e0), (j1, e1) = src
        cs = (0 if j0 < 0 else (key[j0]._c if e0 else int(key[j0])),
              0 if j1 < 0 else (key[j1]._c if e1 else int(key[j1])))
    else:
        cl = []
        for j, e in src:
            cl.append(0 if j < 0 else (key[j]._c if e else int(key[j])))
        cs = tuple(cl)
    # Views seen before, by plan, block indices and constants. The block indices are looked
    # up as given (loop indices are ints, equal and hashing alike); the entry holds them as
    # plain ints, checked once.
    blk = key[:nrem] if nrem else ()
    if nfix:
        blk = v._key + blk
    views = b.views
    if views is None:
        views = b.views = {}
    vkey = (id(geometries), blk, cs)   # (the plan lives as long as the process)
    seen = views.get(vkey)
    if seen is None:
        blk = tuple(map(int, blk))
        if nrem and (min(blk) < 0 or not all(map(lt, blk, b.shape))):
            return None   # the general path wraps negative indices or raises
        geo = geometries.get(cs)
        if geo is None:
            geo = geometries[cs] = _geometry(plan, b, cs)
        off, rng, checks = geo
        # the Region of an in-bounds view, shared by every instruction that accesses it
        reg = new_region(b.id, block_box(blk) + rng if blk else rng) if not checks else None
        seen = views[(id(geometries), blk, cs)] = (blk, off, rng, checks, reg)
    t = NkiTensor.__new__(NkiTensor)
    t._b = b
    t._key, t._off, t._rng, t._checks, t._reg = seen
    t._dims = b.local
    t._dstr = b.lstr
    t._base = 0
    t._c = cs
    t._a = a
    t._shape = new_shape
    t._ms = ms
    t._st = st
    t._gat = None
    t._alias = False
    t._acc = None
    t._whole = False
    return t


_CONST = attrgetter("_c")


def _geometry(plan, b: Buffer, cs: tuple[int, ...]) -> tuple:
    """(element offset, index range per local dim, pending bounds checks) of a planned
    subscript whose local dims get constants `cs`."""
    a, lohi = plan[1], plan[7]
    local = b.local
    off = 0
    rng = []
    checks = []
    for d, c in enumerate(cs):
        lo, hi = lohi[d]
        lo += c
        hi += c
        if lo < 0 or hi >= local[d]:
            checks.append((c, a[d], local[d], d))
        rng.append((lo, hi + 1))
        off += b.lstr[d] * c
    return off, tuple(rng), tuple(checks)


def _build_plan(v: NkiTensor, b: Buffer, key: tuple):
    """The structure of `v[key]` from the general path (errors propagate), or False when the
    result is not a plain affine view or the key has other index kinds."""
    nrem = b.nb - len(v._key)
    if len(key) < nrem or not key:
        return False
    for i, k in enumerate(key):
        if type(k) is IndexExpr:
            if i < nrem:
                return False
        elif not is_int(k):
            return False
    base = whole(b, v._key + (0,) * nrem) if nrem else v
    rest = key[nrem:]
    t = _subscript_tile(base, rest) if rest else base
    if t._gat is not None or t._alias:
        return False
    lohi = []
    for row in t._a:
        lo = hi = 0
        for c, n in zip(row, t._shape):
            if c > 0:
                hi += c * (n - 1)
            elif c < 0:
                lo += c * (n - 1)
        lohi.append((lo, hi))
    # which key position feeds each block dim (-1: not indexed, constant 0) and whether it is an expression
    src = tuple((nrem + d, type(key[nrem + d]) is IndexExpr) if nrem + d < len(key) else (-1, False)
                for d in range(len(b.local)))
    # when every local dim is fed by an expression: their key positions (the common case)
    expr_src = tuple(j for j, _ in src) if all(e for _, e in src) else None
    # geometries by local constants (loop indices change the constants, which repeat)
    return (t._shape, t._a, t._st, src, expr_src, nrem, {}, tuple(lohi), _minor_stride(t))


def _describe(k) -> str:
    if isinstance(k, IndexExpr):
        return f"an nl.arange expression of shape {k.shape}"
    if isinstance(k, slice):
        return "a slice"
    return repr(k)


def _expand_ellipsis(key: tuple, n: int) -> tuple:
    pos = [i for i, k in enumerate(key) if k is Ellipsis]
    if not pos:
        return key
    i = pos[0]
    if len(pos) > 1:
        raise errors.IndexNotSupportedError("an index can only have a single ellipsis ('...')")
    fill = n - (len(key) - 1)
    return key[:i] + (slice(None),) * max(fill, 0) + key[i + 1:]


def _subscript_tile(v: NkiTensor, key: tuple) -> NkiTensor:
    b = v._b
    shape = v._shape
    n = len(shape)
    key = _expand_ellipsis(key, n)
    if len(key) > n:
        raise errors.IndexNotSupportedError(
            f"too many indices for tensor '{b.label}': {len(key)} indices for a tile of shape {list(shape)}")
    adv = basic = general = False
    for k in key:
        if isinstance(k, IndexExpr):
            adv = True
            if len(k._s.shape) == 1:
                raise errors.OneDimArangeError(
                    f"indexing tensor `{b.label}` with 1d arange is not supported; add an axis: "
                    f"nl.arange(n)[:, None] or nl.arange(n)[None, :]")
        elif isinstance(k, slice):
            basic = True
        elif is_int(k):
            pass
        elif isinstance(k, (IndexArray, np.ndarray)):
            adv = general = True
        elif k is None:
            raise errors.IndexNotSupportedError(f"`None` (new axis) is not supported when indexing tensor '{b.label}'")
        else:
            raise errors.IndexNotSupportedError(
                f"tensor '{b.label}' indexed with unsupported index {k!r} (type {type(k).__name__})")
    if adv and basic:
        raise errors.MixedIndexingError(
            f"Mixing basic tensor indexing and advanced tensor indexing is not supported (tensor '{b.label}', "
            f"index {_fmt_key(key)}); use nl.arange expressions for every dimension, or slices for every dimension")
    onchip = b.memory != HBM
    exprs: list[tuple[int, tuple[int, ...]]] = []   # per indexed view axis: (const, coef over new axes)
    if adv:
        if general:
            return _subscript_general(v, key)
        bshape: tuple[int, ...] = ()
        for k in key:
            if isinstance(k, IndexExpr):
                s = broadcast_shapes(bshape, k._s.shape)
                if s is None:
                    raise errors.BroadcastError(
                        f"index expressions of tensor '{b.label}' have shapes that cannot be broadcast together "
                        f"({_fmt_key(key)})")
                bshape = s
        nb_ = len(bshape)
        trailing = shape[len(key):]
        new_shape = bshape + trailing
        nn = len(new_shape)
        pad = (0,) * len(trailing)
        for k in key:
            if isinstance(k, IndexExpr):
                exprs.append((k._c, aligned_coef(k._s, nb_) + pad))
            else:
                exprs.append((int(k), (0,) * nn))
        for j in range(len(trailing)):
            coef = [0] * nn
            coef[nb_ + j] = 1
            exprs.append((0, tuple(coef)))
    else:
        axes: list[tuple[int, int]] = []   # (view axis, step) per new axis; step 0 = size-1 kept axis
        sizes: list[int] = []
        consts: list[int] = []
        for j in range(n):
            k = key[j] if j < len(key) else slice(None)
            ext = shape[j]
            if isinstance(k, slice):
                start, stop, step = k.start, k.stop, k.step
                step = 1 if step is None else int(step)
                if step <= 0:
                    raise errors.IndexNotSupportedError(f"slice step must be positive when indexing tensor '{b.label}'")
                start = 0 if start is None else int(start)
                stop = ext if stop is None else int(stop)
                if start < 0:
                    start += ext
                if stop < 0:
                    stop += ext
                length = max(0, -(-(stop - start) // step))
                if length == 0:
                    raise errors.IndexNotSupportedError(
                        f"empty slice {start}:{stop} on dimension {j} of tensor '{b.label}' (shape {list(shape)})")
                consts.append(start)
                axes.append((j, step))
                sizes.append(length)
            else:
                k = int(k)
                if k < 0:
                    k += ext
                consts.append(k)
                if onchip and j == 0:
                    axes.append((0, 0))
                    sizes.append(1)
        if onchip and len(sizes) == 1:
            axes.append((-1, 0))
            sizes.append(1)
        new_shape = tuple(sizes)
        nn = len(new_shape)
        owner = {j: pos for pos, (j, step) in enumerate(axes) if step}
        for j in range(n):
            coef = [0] * nn
            pos = owner.get(j)
            if pos is not None:
                coef[pos] = axes[pos][1]
            exprs.append((consts[j], tuple(coef)))
    return _compose(v, exprs, new_shape)


def _fmt_key(key: tuple) -> str:
    parts = []
    for k in key:
        if isinstance(k, IndexExpr):
            parts.append(f"arange{list(k.shape)}")
        elif isinstance(k, slice):
            parts.append(f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}")
        else:
            parts.append(repr(k))
    return "[" + ", ".join(parts) + "]"


def _compose(v: NkiTensor, exprs, new_shape: tuple[int, ...]) -> NkiTensor:
    """Apply per-view-axis affine expressions (over the new tile axes) to view `v`."""
    b = v._b
    nn = len(new_shape)
    shape = v._shape
    checks = []
    # bounds of each indexed view axis
    for j, (c, coef) in enumerate(exprs):
        lo = hi = c
        for a, ext in zip(coef, new_shape):
            if a > 0:
                hi += a * (ext - 1)
            elif a < 0:
                lo += a * (ext - 1)
        if lo < 0 or hi >= shape[j]:
            checks.append((c, coef, shape[j], j))
    # pending checks of the parent view, re-expressed on the new axes
    for (c0, coef0, ext, dim) in v._checks:
        c1 = c0
        coef1 = [0] * nn
        for a, (c, coef) in zip(coef0, exprs):
            if a:
                c1 += a * c
                for k in range(nn):
                    coef1[k] += a * coef[k]
        checks.append((c1, tuple(coef1), ext, dim))
    if v._gat is not None:
        return _compose_general(v, exprs, new_shape, tuple(checks))
    new_c = []
    new_a = []
    for c_d, row in zip(v._c, v._a):
        cd = c_d
        ad = [0] * nn
        for a, (c, coef) in zip(row, exprs):
            if a:
                cd += a * c
                for k in range(nn):
                    if coef[k]:
                        ad[k] += a * coef[k]
        new_c.append(cd)
        new_a.append(tuple(ad))
    t = _make(b, v._key, v._dims, v._dstr, v._base, tuple(new_c), tuple(new_a), new_shape,
              tuple(checks), None, v._alias)
    if b.memory != HBM and not v._alias:
        _check_partition_rule(t)
    return t


def _check_partition_rule(t: NkiTensor) -> None:
    """On-chip tiles: axis 0 walks the partition dimension contiguously, and nothing else does."""
    a = t._a
    shape = t._shape
    prow = a[0]
    for k in range(1, len(shape)):
        if prow[k] and shape[k] > 1:
            raise errors.IndexNotSupportedError(
                f"the partition dimension of tensor '{t._b.label}' must be indexed along the first tile axis only "
                f"(tile shape {list(shape)}); use nl.arange(n)[:, None] for partitions")
    if shape[0] > 1:
        if prow[0] != 1:
            raise errors.IndexNotSupportedError(
                f"partitions of tensor '{t._b.label}' must be accessed contiguously (stride {prow[0]} given); the "
                f"hardware does not allow partition-dimension striding")
        for row in a[1:]:
            if row[0]:
                raise errors.IndexNotSupportedError(
                    f"a free dimension of tensor '{t._b.label}' varies along the partition axis of the tile "
                    f"(tile shape {list(shape)}); free-dimension indices must not depend on the partition index")


# --- general (non-affine) indexing ---------------------------------------------------------------

def _subscript_general(v: NkiTensor, key: tuple) -> NkiTensor:
    shape = v._shape
    arrays = []
    for k in key:
        if isinstance(k, IndexExpr):
            arrays.append(k.to_array())
        elif isinstance(k, IndexArray):
            arrays.append(k._arr)
        elif isinstance(k, np.ndarray):
            if k.dtype.kind not in "iu":
                raise errors.IndexNotSupportedError(f"index arrays must be integers, got {k.dtype}")
            arrays.append(k.astype(np.int64))
        else:
            arrays.append(np.int64(int(k)))
    try:
        bshape = np.broadcast_shapes(*[np.shape(a) for a in arrays])
    except ValueError:
        raise errors.BroadcastError(f"index arrays of tensor '{v._b.label}' cannot be broadcast together") from None
    trailing = shape[len(key):]
    new_shape = tuple(bshape) + trailing
    nn = len(new_shape)
    idx = []
    for j, arr in enumerate(arrays):
        if np.any(arr < 0) or np.any(arr >= shape[j]):
            # general indices are checked eagerly against the view (no mask can repair them)
            raise errors.OutOfBoundsError(
                f"Out-of-bound access for tensor `{v._b.label}` on dimension {j}: index range "
                f"[{int(np.min(arr))}, {int(np.max(arr))}] exceed dimension size of {shape[j]}")
        idx.append(np.broadcast_to(np.reshape(arr, np.shape(arr) + (1,) * len(trailing)), new_shape))
    for j in range(len(trailing)):
        s = [1] * nn
        s[len(bshape) + j] = trailing[j]
        idx.append(np.broadcast_to(np.arange(trailing[j], dtype=np.int64).reshape(s), new_shape))
    parent = _index_arrays(v)
    gat = tuple(p[tuple(idx)] for p in parent)
    return _general_view(v, gat, new_shape)


def _compose_general(v: NkiTensor, exprs, new_shape, checks) -> NkiTensor:
    nn = len(new_shape)
    grids = [np.arange(s, dtype=np.int64).reshape([s if i == k else 1 for i in range(nn)]) for k, s in enumerate(new_shape)]
    idx = []
    for (c, coef), ext in zip(exprs, v._shape):
        arr = np.full(new_shape, c, dtype=np.int64)
        for k in range(nn):
            if coef[k]:
                arr = arr + coef[k] * grids[k]
        idx.append(np.clip(arr, 0, ext - 1))   # out-of-range positions are verified by `checks`
    gat = tuple(p[tuple(idx)] for p in v._gat)
    t = _general_view(v, gat, new_shape)
    t._checks = checks
    return t


# --- views of another shape --------------------------------------------------------------------------

def squeeze_to(v: NkiTensor, shape: tuple[int, ...]) -> NkiTensor:
    """`v` seen with `shape`, when the two differ only by axes of extent 1 (else `v`)."""
    if v._gat is not None or [n for n in v._shape if n != 1] != [n for n in shape if n != 1]:
        return v
    rows = [[0] * len(shape) for _ in v._a]
    src = [k for k, n in enumerate(v._shape) if n != 1]
    dst = [k for k, n in enumerate(shape) if n != 1]
    for ks, kd in zip(src, dst):
        for d, row in enumerate(v._a):
            rows[d][kd] = row[ks]
    checks = []
    for c, coef, ext, dim in v._checks:
        new = [0] * len(shape)
        for ks, kd in zip(src, dst):
            new[kd] = coef[ks]
        checks.append((c, tuple(new), ext, dim))
    t = _make(v._b, v._key, v._dims, v._dstr, v._base, v._c, tuple(tuple(r) for r in rows), tuple(shape),
              tuple(checks), None, v._alias)
    t._srckey, t._srcpar = v._srckey, v._srcpar
    return t


