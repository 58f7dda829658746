"""Index expressions (`nl.arange`, `nl.mgrid`) and masks.

NKI index expressions are affine: a constant plus, per broadcast axis, a coefficient
times that axis' position. `IndexExpr` keeps exactly that, so a subscript becomes a
hardware-style access pattern (offset + stride per tile axis) instead of an array of
indices. The shape/coefficient part (`Struct`) is interned and its derived structures are
cached, because kernels rebuild the same expressions in every loop iteration and only
the constant changes.

Comparisons of expressions build `Mask` predicates (conjunctions with `&`); a mask whose
conditions each depend on one axis is a box, which instructions apply by shrinking their
operands instead of computing and discarding.

They belong to the core because they are the machine's access patterns and instruction
predicates, which `subscript` and `instr` work on; a front-end decides how kernel code
spells them (the legacy one exports `arange`, `mgrid` and `ds` as `nl.*`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import errors

Box = tuple[tuple[int, int], ...]   # per tile axis: [start, stop)


def is_int(value: Any) -> bool:
    """Python / NumPy integers (loop indices included), but not bools."""
    t = type(value)
    if t is int:
        return True
    return isinstance(value, (int, np.integer)) and t is not bool


# --- interned affine structure ----------------------------------------------------------

class Struct:
    """The non-constant part of an affine expression: broadcast shape and per-axis coefficients."""

    __slots__ = ("shape", "coef", "lo", "hi", "cache", "__weakref__")

    def __init__(self, shape: tuple[int, ...], coef: tuple[int, ...]):
        self.shape = shape
        self.coef = coef
        # Smallest / largest value of sum(coef[k] * i_k) over the whole shape.
        self.lo = sum(c * (n - 1) for c, n in zip(coef, shape) if c < 0)
        self.hi = sum(c * (n - 1) for c, n in zip(coef, shape) if c > 0)
        self.cache: dict = {}


_STRUCTS: dict[tuple, Struct] = {}


def intern(shape: tuple[int, ...], coef: tuple[int, ...]) -> Struct:
    # An axis of extent 1 contributes nothing; normalise so equal expressions share a Struct.
    coef = tuple(0 if n == 1 else c for c, n in zip(coef, shape))
    key = (shape, coef)
    s = _STRUCTS.get(key)
    if s is None:
        s = _STRUCTS[key] = Struct(shape, coef)
    return s


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """NumPy broadcasting of two shapes (right-aligned), or None when incompatible."""
    if a == b:
        return a
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + a
    b = (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def aligned_coef(s: Struct, ndim: int) -> tuple[int, ...]:
    """Coefficients of `s` right-aligned to `ndim` axes (NumPy broadcasting)."""
    return (0,) * (ndim - len(s.shape)) + s.coef


def _struct_add(a: Struct, b: Struct, sign: int) -> Struct:
    key = ("add", id(b), sign)
    s = a.cache.get(key)
    if s is None:
        shape = broadcast_shapes(a.shape, b.shape)
        if shape is None:
            raise errors.BroadcastError(f"index expressions of shapes {a.shape} and {b.shape} cannot be broadcast together")
        n = len(shape)
        ca, cb = aligned_coef(a, n), aligned_coef(b, n)
        s = intern(shape, tuple(x + sign * y for x, y in zip(ca, cb)))
        a.cache[key] = s  # id(b) is stable: interned structures live as long as the process
    return s


def _struct_scale(a: Struct, k: int) -> Struct:
    key = ("mul", k)
    s = a.cache.get(key)
    if s is None:
        s = a.cache[key] = intern(a.shape, tuple(c * k for c in a.coef))
    return s


_FULL = slice(None)
_SIG_P = (1, 0)
_SIG_F = (0, 1)


def _key_signature(key: tuple) -> tuple | None:
    """Hashable form of a subscript made only of `:` and `None` (the common `[:, None]`)."""
    sig = []
    for k in key:
        if k is None:
            sig.append(0)
        elif isinstance(k, slice) and k.start is None and k.stop is None and k.step is None:
            sig.append(1)
        else:
            return None
    return tuple(sig)


# --- expressions ----------------------------------------------------------------------------

class IndexExpr:
    """An affine index expression: `c + sum_k coef[k] * i_k` over a broadcast shape."""

    __slots__ = ("_s", "_c", "_k")
    __array_ufunc__ = None  # make NumPy scalars defer to our operators

    def __init__(self, s: Struct, c: int):
        self._s = s
        self._c = c
        self._k = None   # subscript results, cached on shared expressions (nl.arange results)

    # shape information
    @property
    def shape(self) -> tuple[int, ...]:
        return self._s.shape

    @property
    def ndim(self) -> int:
        return len(self._s.shape)

    @property
    def min(self) -> int:
        return self._c + self._s.lo

    @property
    def max(self) -> int:
        return self._c + self._s.hi

    def to_array(self) -> np.ndarray:
        """The explicit integer array (broadcast shape)."""
        out = np.full(self._s.shape, self._c, dtype=np.int64)
        n = len(self._s.shape)
        for axis, (coef, size) in enumerate(zip(self._s.coef, self._s.shape)):
            if coef:
                shape = [1] * n
                shape[axis] = size
                out = out + coef * np.arange(size, dtype=np.int64).reshape(shape)
        return out

    def __array__(self, dtype=None, copy=None):
        arr = self.to_array()
        return arr.astype(dtype) if dtype is not None else arr

    def __repr__(self) -> str:
        return f"IndexExpr(shape={self._s.shape}, const={self._c}, coef={self._s.coef})"

    # arithmetic
    def __add__(self, other):
        if is_int(other):
            return IndexExpr(self._s, self._c + int(other))
        if isinstance(other, IndexExpr):
            return IndexExpr(_struct_add(self._s, other._s, 1), self._c + other._c)
        return _general_binary(self, other, np.add)

    __radd__ = __add__

    def __sub__(self, other):
        if is_int(other):
            return IndexExpr(self._s, self._c - int(other))
        if isinstance(other, IndexExpr):
            return IndexExpr(_struct_add(self._s, other._s, -1), self._c - other._c)
        return _general_binary(self, other, np.subtract)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        if is_int(other):
            k = int(other)
            return IndexExpr(_struct_scale(self._s, k), self._c * k)
        return _general_binary(self, other, np.multiply)

    __rmul__ = __mul__

    def __neg__(self):
        return IndexExpr(_struct_scale(self._s, -1), -self._c)

    def __pos__(self):
        return self

    def __floordiv__(self, other):
        return _general_binary(self, other, np.floor_divide)

    def __rfloordiv__(self, other):
        return _general_binary(other, self, np.floor_divide)

    def __mod__(self, other):
        return _general_binary(self, other, np.mod)

    def __rmod__(self, other):
        return _general_binary(other, self, np.mod)

    def __truediv__(self, other):
        raise errors.IndexNotSupportedError("true division of an index expression does not give integer indices; use //")

    def __getitem__(self, key):
        cache = self._k
        if cache is not None and type(key) is tuple and len(key) == 2:
            # the common nl.arange(n)[:, None] / [None, :], answered from the cache
            a, b = key
            if b is None:
                if type(a) is slice and a == _FULL:
                    r = cache.get(_SIG_P)
                    if r is not None:
                        return r
            elif a is None and type(b) is slice and b == _FULL:
                r = cache.get(_SIG_F)
                if r is not None:
                    return r
        if type(key) is not tuple:
            key = (key,)
        if len(key) == 2:   # the common [:, None] / [None, :]
            a, b = key
            if b is None and type(a) is slice and a.start is None and a.stop is None and a.step is None:
                sig = _SIG_P
            elif a is None and type(b) is slice and b.start is None and b.stop is None and b.step is None:
                sig = _SIG_F
            else:
                sig = _key_signature(key)
        else:
            sig = _key_signature(key)
        if sig is None:
            return _general_getitem(self, key)
        cache = self._k
        if cache is not None:
            r = cache.get(sig)
            if r is not None:
                return r
        s = self._s.cache.get(("get", sig))
        if s is None:
            s = self._s.cache[("get", sig)] = _struct_getitem(self._s, sig)
        r = IndexExpr(s, self._c)
        if cache is not None:
            r._k = {}
            cache[sig] = r
        return r

    def __setitem__(self, key, value):
        raise errors.AssignToIndexError("'index' tensor (nl.arange / nl.mgrid expression) does not support item assignment")

    # comparisons -> masks (condition normalised to `expr >= 0` or `expr == 0`)
    def __ge__(self, other):
        if not _index_like(other):
            return NotImplemented
        return Mask(((self - other, False),))

    def __gt__(self, other):
        if not _index_like(other):
            return NotImplemented
        return Mask(((self - other - 1, False),))

    def __le__(self, other):
        if not _index_like(other):
            return NotImplemented
        return Mask(((other - self, False),))

    def __lt__(self, other):
        if not _index_like(other):
            return NotImplemented
        return Mask(((other - self - 1, False),))

    def __eq__(self, other):
        if not _index_like(other):
            return NotImplemented
        return Mask(((self - other, True),))

    def __ne__(self, other):
        if not _index_like(other):
            return NotImplemented
        raise errors.MaskNotEqualError("'not equal' mask is not supported; combine two comparisons instead")

    __hash__ = None

    def __bool__(self):
        raise errors.ArangeControlFlowError(
            "control flow depending on `nl.arange` or `nl.mgrid` is not supported; use the `mask=` parameter")

    def __iter__(self):
        raise errors.ArangeControlFlowError("an nl.arange expression cannot be iterated in Python; use nl.affine_range")

    def __len__(self):
        return self._s.shape[0] if self._s.shape else 0

    def __index__(self):
        raise errors.ArangeControlFlowError("an nl.arange expression is not a Python integer")

    __int__ = __index__


def _index_like(v) -> bool:
    return is_int(v) or isinstance(v, (IndexExpr, IndexArray))


def _struct_getitem(s: Struct, sig: tuple) -> Struct:
    """Apply a subscript of `:` (keep axis) and `None` (new axis) to a structure."""
    shape, coef = [], []
    axis = 0
    for k in sig:
        if k == 0:
            shape.append(1)
            coef.append(0)
        else:
            if axis >= len(s.shape):
                raise errors.IndexNotSupportedError(f"too many indices for an index expression of shape {s.shape}")
            shape.append(s.shape[axis])
            coef.append(s.coef[axis])
            axis += 1
    shape.extend(s.shape[axis:])
    coef.extend(s.coef[axis:])
    return intern(tuple(shape), tuple(coef))


def _general_getitem(e: IndexExpr, key: tuple) -> IndexExpr:
    """Slices with bounds, ints and `None` on an affine expression (stays affine)."""
    shape, coef = [], []
    c = e._c
    axis = 0
    for k in key:
        if k is None:
            shape.append(1)
            coef.append(0)
            continue
        if k is Ellipsis:
            rest = len(e._s.shape) - axis - sum(1 for kk in key if kk is not None and kk is not Ellipsis) + 1
            for _ in range(max(rest, 0)):
                shape.append(e._s.shape[axis])
                coef.append(e._s.coef[axis])
                axis += 1
            continue
        if axis >= len(e._s.shape):
            raise errors.IndexNotSupportedError(f"too many indices for an index expression of shape {e._s.shape}")
        n, a = e._s.shape[axis], e._s.coef[axis]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            length = len(range(start, stop, step))
            c += a * start
            shape.append(length)
            coef.append(a * step)
        elif is_int(k):
            i = int(k) + (n if int(k) < 0 else 0)
            if not 0 <= i < n:
                raise errors.IndexNotSupportedError(f"index {int(k)} out of range for an index expression axis of size {n}")
            c += a * i
        else:
            raise errors.IndexNotSupportedError(f"unsupported subscript {k!r} on an index expression")
        axis += 1
    shape.extend(e._s.shape[axis:])
    coef.extend(e._s.coef[axis:])
    return IndexExpr(intern(tuple(shape), tuple(coef)), c)


class IndexArray:
    """A non-affine integer index (e.g. `i // 2`): an explicit array, the slow general path."""

    __slots__ = ("_arr",)
    __array_ufunc__ = None

    def __init__(self, arr: np.ndarray):
        self._arr = np.asarray(arr, dtype=np.int64)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._arr.shape

    @property
    def ndim(self) -> int:
        return self._arr.ndim

    def __array__(self, dtype=None, copy=None):
        return self._arr if dtype is None else self._arr.astype(dtype)

    def __getitem__(self, key):
        return IndexArray(self._arr[key])

    def __add__(self, o):
        return _general_binary(self, o, np.add)

    def __radd__(self, o):
        return _general_binary(o, self, np.add)

    def __sub__(self, o):
        return _general_binary(self, o, np.subtract)

    def __rsub__(self, o):
        return _general_binary(o, self, np.subtract)

    def __mul__(self, o):
        return _general_binary(self, o, np.multiply)

    def __rmul__(self, o):
        return _general_binary(o, self, np.multiply)

    def __floordiv__(self, o):
        return _general_binary(self, o, np.floor_divide)

    def __mod__(self, o):
        return _general_binary(self, o, np.mod)

    def __neg__(self):
        return IndexArray(-self._arr)

    def _cmp(self, other, fn):
        other = other._arr if isinstance(other, IndexArray) else (other.to_array() if isinstance(other, IndexExpr) else other)
        return Mask(((fn(self._arr, other), None),))

    def __ge__(self, o):
        return self._cmp(o, np.greater_equal)

    def __gt__(self, o):
        return self._cmp(o, np.greater)

    def __le__(self, o):
        return self._cmp(o, np.less_equal)

    def __lt__(self, o):
        return self._cmp(o, np.less)

    __hash__ = None

    def __bool__(self):
        raise errors.ArangeControlFlowError("control flow depending on `nl.arange` or `nl.mgrid` is not supported")


def _as_int_array(value) -> np.ndarray:
    if isinstance(value, IndexExpr):
        return value.to_array()
    if isinstance(value, IndexArray):
        return value._arr
    if is_int(value):
        return np.int64(value)
    raise errors.IndexNotSupportedError(f"an index expression cannot be combined with {type(value).__name__}")


def _general_binary(a, b, fn) -> IndexArray:
    return IndexArray(fn(_as_int_array(a), _as_int_array(b)))


# --- constructors ---------------------------------------------------------------------------

_ARANGE_CACHE: dict[tuple[int, int], IndexExpr] = {}
_ARANGE_STOP: dict[int, IndexExpr] = {}   # nl.arange(n) by n


def arange(start, stop=None) -> IndexExpr:
    """`nl.arange(stop)` / `nl.arange(start, stop)`: a 1-D expression of consecutive integers."""
    if stop is None:   # nl.arange(n), the common form
        e = _ARANGE_STOP.get(start)
        if e is None:
            e = arange(0, start)
            if type(start) is int:
                _ARANGE_STOP[start] = e
        return e
    e = _ARANGE_CACHE.get((start, stop))
    if e is None:
        if not (is_int(start) and is_int(stop)):
            raise errors.OperandTypeError(f"nl.arange needs integer bounds, got {start!r}, {stop!r}")
        start, stop = int(start), int(stop)
        if stop <= start:
            raise errors.IndexNotSupportedError(f"nl.arange({start}, {stop}) is empty")
        e = _ARANGE_CACHE[(start, stop)] = IndexExpr(intern((stop - start,), (1,)), start)
        e._k = {}
    return e


class MGrid:
    """`nl.mgrid[0:128, 0:512]`: one dense expression per axis, also reachable as .p/.x/.y/.z."""

    __slots__ = ("exprs",)

    def __init__(self, exprs: tuple[IndexExpr, ...]):
        self.exprs = exprs

    def __iter__(self):
        return iter(self.exprs)

    def __len__(self):
        return len(self.exprs)

    def __getitem__(self, i):
        return self.exprs[i]

    def _axis(self, i: int, name: str) -> IndexExpr:
        if i >= len(self.exprs):
            raise AttributeError(f"nl.mgrid result of {len(self.exprs)} axes has no field '{name}'")
        return self.exprs[i]

    p = property(lambda self: self._axis(0, "p"))
    x = property(lambda self: self._axis(1, "x"))
    y = property(lambda self: self._axis(2, "y"))
    z = property(lambda self: self._axis(3, "z"))


class _MGridMaker:
    def __getitem__(self, key) -> MGrid:
        if not isinstance(key, tuple):
            key = (key,)
        ranges = []
        for k in key:
            if not isinstance(k, slice) or k.stop is None:
                raise errors.IndexNotSupportedError("nl.mgrid takes slices with explicit stops, e.g. nl.mgrid[0:128, 0:512]")
            ranges.append(range(k.start or 0, k.stop, k.step or 1))
        shape = tuple(len(r) for r in ranges)
        exprs = []
        for axis, r in enumerate(ranges):
            coef = tuple(r.step if a == axis else 0 for a in range(len(ranges)))
            exprs.append(IndexExpr(intern(shape, coef), r.start))
        return MGrid(tuple(exprs))


mgrid = _MGridMaker()


def ds(start, size) -> slice:
    """`nl.ds(start, size)`: the slice start:start+size."""
    return slice(start, start + size)


# --- masks ------------------------------------------------------------------------------------

class Mask:
    """A conjunction of conditions. A condition is (IndexExpr e, is_eq): e >= 0 (or e == 0),
    or (bool array, None) for a general non-affine predicate."""

    __slots__ = ("_conds",)
    __array_ufunc__ = None

    def __init__(self, conds: tuple):
        self._conds = conds

    def __and__(self, other):
        if isinstance(other, Mask):
            return Mask(self._conds + other._conds)
        if other is True:
            return self
        raise errors.MaskExpressionError(f"masks combine with `&` only with other masks, got {type(other).__name__}")

    __rand__ = __and__

    def __or__(self, other):
        raise errors.MaskExpressionError("'logical or' is not supported in masks; use `&` conjunctions of affine comparisons")

    __ror__ = __or__

    def __invert__(self):
        raise errors.MaskExpressionError("negated masks are not supported; write the opposite comparison")

    def __bool__(self):
        raise errors.ArangeControlFlowError(
            "control flow depending on `nl.arange` or `nl.mgrid` is not supported (a comparison of index "
            "expressions was used in `if`, `and` or `or`); pass it as mask=, combining masks with `&`")

    @property
    def affine(self) -> bool:
        return all(eq is not None for _, eq in self._conds)

    @property
    def shape(self) -> tuple[int, ...]:
        shape: tuple[int, ...] = ()
        for e, eq in self._conds:
            s = e._s.shape if eq is not None else e.shape
            shape = broadcast_shapes(shape, s) or shape
        return shape


def check_mask(mask) -> Mask | None:
    """Normalise a `mask=` argument: None, a Mask, or a Python bool (True = no mask)."""
    if mask is None or mask is True:
        return None
    if isinstance(mask, Mask):
        for _, eq in mask._conds:
            if eq is None:
                raise errors.MaskExpressionError(
                    "NKI mask expressions must be affine expressions of nl.arange and loop indices")
        return mask
    if mask is False:
        return Mask(((IndexExpr(intern((), ()), -1), False),))
    raise errors.MaskExpressionError(f"mask must be a comparison of nl.arange expressions, got {type(mask).__name__}")


def mask_box(mask: Mask, shape: tuple[int, ...]) -> Box | None:
    """The box of tile positions where `mask` holds, or None if it is not a box.
    An always-false mask gives a box with an empty axis."""
    n = len(shape)
    lo = [0] * n
    hi = list(shape)
    for e, eq in mask._conds:
        s = e._s
        sshape = s.shape
        off = n - len(sshape)
        if off < 0:
            raise errors.BroadcastError(f"mask of shape {sshape} does not broadcast to the instruction tile {tuple(shape)}")
        k = -1
        for j, ext in enumerate(sshape):
            if ext != 1 and ext != shape[j + off]:
                raise errors.BroadcastError(
                    f"mask of shape {sshape} does not broadcast to the instruction tile {tuple(shape)}")
            if s.coef[j]:
                if k >= 0:
                    return None   # depends on two axes: not a box
                k = j + off
        c = e._c
        if k < 0:
            if not ((c == 0) if eq else (c >= 0)):
                return tuple((0, 0) for _ in shape)
            continue
        a = s.coef[k - off]
        if eq:
            if (-c) % a:
                lo[k], hi[k] = 0, 0
                continue
            v = -c // a
            lo[k], hi[k] = max(lo[k], v), min(hi[k], v + 1)
        elif a > 0:   # c + a*i >= 0  <=>  i >= ceil(-c / a)
            v = -(c // a)
            if v > lo[k]:
                lo[k] = v
        else:         # c + a*i >= 0  <=>  i <= floor(c / -a)
            v = c // (-a) + 1
            if v < hi[k]:
                hi[k] = v
    for start, stop in zip(lo, hi):
        if stop <= start:
            return tuple((0, 0) for _ in shape)   # nothing is active
    return tuple(zip(lo, hi))


def mask_array(mask: Mask, shape: tuple[int, ...]) -> np.ndarray:
    """The boolean array of `mask` broadcast to `shape`."""
    out = np.ones(shape, dtype=bool)
    for e, eq in mask._conds:
        arr = e.to_array()
        out &= (arr == 0) if eq else (arr >= 0)
    return out
