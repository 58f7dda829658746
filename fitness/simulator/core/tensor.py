"""Kernel tensors: storage (`Buffer`) and the views kernels hold (`NkiTensor`).

A `Buffer` is one tensor of the kernel: HBM (one row-major array) or SBUF/PSUM with
shape (block..., partition, free...). On-chip storage is a dict of independent blocks
(block index -> array of the (partition, free...) shape), created on first access and
released after the last one, so kernels may declare far more logical memory than they
ever hold at once. Uninitialised storage holds a sentinel (NaN for floats).

An `NkiTensor` is what kernel code sees: a buffer, a block, and an affine map from tile
positions to the block's dimensions (`const + coef @ position` per dimension), i.e. an
access pattern (offset + stride per tile axis) that reads and writes through zero-copy
NumPy views. Views are opaque to host code: NumPy conversion and arithmetic on them raise
`OpaqueTensorError`.

Python syntax on a view (`t[key]`, `t[key] = v`, `t += v`, `a + b`) means what the kernel's
dialect says it means: the methods hand it to the running machine's front-end handlers
(`runtime.FrontEnd`), which build on `subscript` and `instr` of this package.
"""

from __future__ import annotations

import weakref

import numpy as np

from .. import errors
from ..trace import HBM, PSUM, SBUF, Region, TensorInfo
from .capacity import Capacity
from .ops import ufunc_operator
from .runtime import Machine, machine

# trn1's limits (the default target's, `core.capacity.DEFAULT`); a run checks against its own
# target's `Machine.capacity`
PMAX = 128                      # partitions
SBUF_PARTITION_BYTES = 192 * 1024
SBUF_USABLE_BYTES = 176 * 1024  # per partition, after the compiler's reserve (trn1)
PSUM_BANK_BYTES = 2 * 1024      # one accumulation bank per partition (512 fp32)


_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}
# Subscript plans per buffer layout (local shape, memory, block dims), by key signature.
_LAYOUT_PLANS: dict[tuple, dict] = {}
_DTNAMES: dict[np.dtype, str] = {}


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides in elements."""
    st = _STRIDES.get(shape)
    if st is None:
        out, acc = [], 1
        for n in reversed(shape):
            out.append(acc)
            acc *= n
        st = _STRIDES[shape] = tuple(reversed(out))
    return st


def dtype_name(dt: np.dtype) -> str:
    """`dt.name`, cached (NumPy computes it in Python on every access)."""
    name = _DTNAMES.get(dt)
    if name is None:
        name = _DTNAMES[dt] = dt.name
    return name


# NKI's packed MX types (4 fp8 or fp4 values in a 32-bit word, NeuronCore-v4's nc_matmul_mx
# operands): storage of 4 bytes, a NumPy structured dtype of one uint32 field named after the
# type, so that each is a dtype of its own with its NKI name in the trace.
PACKED_X4 = ("float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4")
_PACKED: dict[str, np.dtype] = {}


def packed_dtype(name: str) -> np.dtype:
    """The storage dtype of packed MX type `name` (one of PACKED_X4)."""
    dt = _PACKED.get(name)
    if dt is None:
        if name not in PACKED_X4:
            raise ValueError(f"{name!r} is not a packed MX type ({', '.join(PACKED_X4)})")
        dt = _PACKED[name] = np.dtype([(name, "<u4")])
        _DTNAMES[dt] = name
    return dt


def prod(shape) -> int:
    p = 1
    for n in shape:
        p *= n
    return p


def sentinel(dtype: np.dtype):
    """The value uninitialised memory holds: NaN where the dtype has one, else an extreme int."""
    if dtype.kind in "fcV":
        try:
            v = np.array(np.nan, dtype=dtype)
            if np.isnan(v.astype(np.float32)):
                return v
        except (TypeError, ValueError):
            pass
    if dtype.kind == "b":
        return True
    if dtype.kind == "u":
        return np.iinfo(dtype).max
    if dtype.kind == "i":
        return np.iinfo(dtype).min
    return 0


class Fresh:
    """Bookkeeping for an instruction result that has not been used yet: if its first use is
    an assignment `dst[...] = result`, the producing instruction(s) write `dst` directly and
    the anonymous tile never appears in the trace."""

    __slots__ = ("state", "kind", "writers", "box", "where", "meta")

    NEW, USED, RETARGETED = 0, 1, 2

    def __init__(self, kind: str, meta: tuple):
        self.state = Fresh.NEW
        self.kind = kind              # kind of the (last) producing instruction
        self.writers: list = []       # [(Instr, index in instr.writes, tile box or None, anonymous region)]
        self.box = None               # active box of the computation (mask), None = full
        self.where = None             # boolean mask array for non-box masks
        self.meta = meta              # TensorInfo fields, turned into the TensorInfo at the end of the run


class Buffer:
    """One tensor of the kernel and its storage."""

    __slots__ = ("id", "name", "memory", "shape", "dtype", "dtname", "itemsize", "nb", "local", "lstr",
                 "kind", "scope", "tpath", "line", "blocks", "fill", "mutable", "written", "fresh",
                 "shared", "plans", "views", "place", "__weakref__")

    def __init__(self, m: Machine, memory: str, shape: tuple[int, ...], dtype: np.dtype, nb: int, *,
                 kind: str = "scratch", name: str = "", line: int = 0, fill=None, register: bool = True):
        self.id = m.new_tensor_id()
        self.name = name
        self.memory = memory
        self.shape = shape
        self.dtype = dtype
        self.dtname = dtype_name(dtype)
        self.itemsize = dtype.itemsize
        self.nb = nb
        self.local = shape[nb:]
        self.lstr = c_strides(self.local)
        layout = (self.local, memory, nb)
        plans = _LAYOUT_PLANS.get(layout)
        if plans is None:
            plans = _LAYOUT_PLANS[layout] = {}
        self.plans = plans   # subscript plans shared by every tensor of this layout
        self.kind = kind
        self.scope = m.scope
        self.tpath = m.path
        self.line = line
        self.blocks: dict | None = None if m.shape_only else {}
        self.fill = fill
        self.mutable = False
        self.written = None
        self.fresh: Fresh | None = None
        self.shared: dict | None = None   # block key -> (peer buffer ref, peer key): arrays shared by a move
        # planned subscripts seen: (plan, block key, local constants) -> (offset, local ranges,
        # bounds checks, Region); see subscript._fast_subscript
        self.views: dict[tuple, tuple] | None = None
        # direct allocation (core.placement.Placed): the blocks are views of physical SBUF/PSUM
        # bytes that other placed tensors may share; None: the buffer owns its blocks
        self.place = None
        if register:
            m.register(self, self.info())

    def info(self) -> TensorInfo:
        return TensorInfo(self.id, self.name, self.memory, self.shape, self.dtname, self.itemsize,
                          None if self.memory == HBM else self.nb, self.kind, self.tpath, self.line)

    @property
    def label(self) -> str:
        return self.name or f"<{self.memory} tensor #{self.id}>"

    def block(self, key: tuple, full_write: bool = False) -> np.ndarray:
        """The storage of one block, created on first access (filled, or left empty when the
        first access overwrites all of it)."""
        b = self.blocks.get(key)
        if b is None:
            if self.place is not None:
                b = self.blocks[key] = self.place.view(self, key)
                return b
            if self.fill is not None:
                b = np.full(self.local, self.fill, dtype=self.dtype)
            elif full_write:
                b = np.empty(self.local, dtype=self.dtype)
            else:
                b = np.full(self.local, sentinel(self.dtype), dtype=self.dtype)
            self.blocks[key] = b
        return b


def touch(f: Fresh) -> None:
    """A fresh result is used as a value: it stays (or becomes again) a tile of its own; an
    instruction already redirected to a destination then writes both."""
    if f.state == Fresh.RETARGETED:
        for ins, _, _, reg in f.writers:
            ins.writes = ins.writes + (reg,)
        machine().fresh[f.meta[0]] = f   # it needs its tensor record again
    f.state = Fresh.USED


class NkiTensor:
    """A kernel-visible tensor or tile: a view of one block of a `Buffer`."""

    __slots__ = ("_b", "_key", "_dims", "_dstr", "_base", "_c", "_a", "_shape", "_off", "_st",
                 "_gat", "_checks", "_alias", "_acc", "_whole", "_rng", "_reg", "_ms", "_srckey", "_srcpar",
                 "__weakref__")
    # _rng: per block dim, the [start, stop) range the view spans (planned views only);
    # _reg: the view's Region once known, else None (see region);
    # _ms: the most-minor free stride in elements, None until computed (see minor_stride_bytes)

    # -- user-visible attributes ---------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._b.dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def buffer(self) -> str:
        """The memory the tensor lives in: 'hbm', 'sbuf' or 'psum'."""
        return self._b.memory

    def __len__(self) -> int:
        return self._shape[0]

    def __repr__(self) -> str:
        return f"NkiTensor({self._b.memory}, {self._b.dtype.name}{list(self._shape)}, '{self._b.label}')"

    # Python syntax: the front-end of the running kernel's dialect decides what it means

    def __getitem__(self, key) -> NkiTensor:
        return machine().getitem(self, key)

    def __setitem__(self, key, value) -> None:
        machine().setitem(self, key, value)

    def __iadd__(self, other):
        return machine().augmented(self, other, "add")

    def __isub__(self, other):
        return machine().augmented(self, other, "subtract")

    def __imul__(self, other):
        return machine().augmented(self, other, "multiply")

    def __itruediv__(self, other):
        return machine().augmented(self, other, "divide")

    def _binary(self, other, op: str, reverse: bool = False):
        return machine().operator(self, other, op, reverse)

    def __add__(self, o):
        return self._binary(o, "add")

    def __radd__(self, o):
        return self._binary(o, "add", True)

    def __sub__(self, o):
        return self._binary(o, "subtract")

    def __rsub__(self, o):
        return self._binary(o, "subtract", True)

    def __mul__(self, o):
        return self._binary(o, "multiply")

    def __rmul__(self, o):
        return self._binary(o, "multiply", True)

    def __truediv__(self, o):
        return self._binary(o, "divide")

    def __rtruediv__(self, o):
        return self._binary(o, "divide", True)

    def __pow__(self, o):
        return self._binary(o, "power")

    def __rpow__(self, o):
        return self._binary(o, "power", True)

    def __neg__(self):
        return self._binary(-1.0, "multiply")

    def __lt__(self, o):
        return self._binary(o, "less")

    def __le__(self, o):
        return self._binary(o, "less_equal")

    def __gt__(self, o):
        return self._binary(o, "greater")

    def __ge__(self, o):
        return self._binary(o, "greater_equal")

    def __eq__(self, o):
        return self._binary(o, "equal")

    def __ne__(self, o):
        return self._binary(o, "not_equal")

    def __and__(self, o):
        return self._binary(o, "bitwise_and")

    def __or__(self, o):
        return self._binary(o, "bitwise_or")

    def __xor__(self, o):
        return self._binary(o, "bitwise_xor")

    __hash__ = object.__hash__

    def broadcast_to(self, shape) -> NkiTensor:
        return machine().broadcast_to(self, shape)

    @property
    def size(self) -> int:
        return prod(self._shape)

    # View methods (`t.reshape(...)`, `t.slice(...)`, `t.ap(...)`, ...): whether a tensor has
    # one and what it means is the dialect's business (`FrontEnd.method`); see VIEW_METHODS.

    # -- opacity -------------------------------------------------------------------------------

    def __bool__(self):
        raise errors.DynamicControlFlowError(
            "dynamic control-flow depending on tensor value is not supported (a tile was used as a Python "
            "condition); use masks or nl/nisa operations instead")

    def __iter__(self):
        raise errors.DynamicControlFlowError("a kernel tensor cannot be iterated in Python; index it with nl.arange or slices")

    def __array__(self, dtype=None, copy=None):
        raise errors.OpaqueTensorError(
            f"{self!r} was converted to a NumPy array; kernel tensors are opaque to host code: compute with "
            f"nl.* / nisa.* calls and move data with nl.load / nl.store")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = ufunc_operator(ufunc)
        if method == "__call__" and not kwargs and name and len(inputs) == 2:
            a, b = inputs
            if b is self and isinstance(a, (np.generic, int, float)):
                return self._binary(a, name, True)
            if a is self and isinstance(b, (np.generic, int, float)):
                return self._binary(b, name)
        raise errors.OpaqueTensorError(
            f"NumPy '{getattr(ufunc, '__name__', ufunc)}' was applied to {self!r}; kernel tensors are opaque to "
            f"NumPy: compute with nl.* / nisa.* calls")

    def __array_function__(self, func, types, args, kwargs):
        raise errors.OpaqueTensorError(
            f"NumPy function '{func.__name__}' was applied to {self!r}; kernel tensors are opaque to NumPy: "
            f"compute with nl.* / nisa.* calls")

    def __float__(self):
        raise errors.DynamicControlFlowError("a kernel tensor has no Python value at trace time")

    __int__ = __float__
    __index__ = __float__

    # (no __getattr__ hook for a friendlier message on unknown attributes: it would slow every
    # attribute access of the emulator; core.launch rewords the AttributeError instead)


# Names of the view methods some dialect gives its tensors; each forwards to the running
# front-end's `method` handler, which returns the implementation or raises AttributeError.
VIEW_METHODS = ("reshape", "slice", "select", "permute", "broadcast", "expand_dim", "squeeze_dim",
                "reshape_dim", "flatten_dims", "rearrange", "view", "ap", "get_pattern", "is_contiguous")


def _view_method(name: str):
    def method(self, *args, **kwargs):
        return machine().method(self, name)(*args, **kwargs)
    method.__name__ = method.__qualname__ = name
    return method


for _name in VIEW_METHODS:
    setattr(NkiTensor, _name, _view_method(_name))


def unknown_attribute(e: AttributeError) -> AttributeError | None:
    """A clearer error for kernel code that read an attribute NKI tensors do not have."""
    name = getattr(e, "name", None)
    if isinstance(getattr(e, "obj", None), NkiTensor) and name and not name.startswith("_"):
        return AttributeError(f"NKI tensor has no attribute '{name}' (kernel tensors expose shape, dtype, "
                              f"buffer, broadcast_to and reshape; their data is reached only through NKI calls)")
    return None


# --- construction -------------------------------------------------------------------------------

def _make(b: Buffer, key: tuple, dims, dstr, base: int, c, a, shape, checks=(), gat=None, alias=False) -> NkiTensor:
    v = NkiTensor.__new__(NkiTensor)
    v._b = b
    v._key = key
    v._dims = dims
    v._dstr = dstr
    v._base = base
    v._c = c
    v._a = a
    v._shape = shape
    off = base
    for s, cc in zip(dstr, c):
        off += s * cc
    v._off = off
    n = len(shape)
    st = [0] * n
    for s, row in zip(dstr, a):
        if s:
            for k in range(n):
                if row[k]:
                    st[k] += s * row[k]
    v._st = tuple(st)
    v._gat = gat
    v._checks = checks
    v._alias = alias
    v._acc = None
    v._whole = False
    v._rng = v._reg = v._ms = None
    v._srckey = v._srcpar = None
    return v


def identity_coef(n: int) -> tuple[tuple[int, ...], ...]:
    """The coefficient matrix of an n-D view that maps each tile axis to its own dimension."""
    ident = _IDENT.get(n)
    if ident is None:
        ident = _IDENT[n] = _identity(n)
    return ident


def _identity(n: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(1 if j == i else 0 for j in range(n)) for i in range(n))


_IDENT: dict[int, tuple] = {}


def whole(b: Buffer, key: tuple = ()) -> NkiTensor:
    """The full tile of block `key` of `b` (or, with fewer keys than block dims, a partial view)."""
    if len(key) < b.nb:
        v = NkiTensor.__new__(NkiTensor)
        v._b, v._key, v._shape = b, key, b.shape[len(key):]
        v._c = v._a = v._dims = v._dstr = v._st = None
        v._base = v._off = 0
        v._gat = None
        v._acc = None
        v._checks = ()
        v._alias = False
        v._whole = True
        v._rng = v._reg = v._ms = None
        v._srckey = v._srcpar = None
        return v
    local = b.local
    lay = _LAYOUTS.get(local)
    if lay is None:
        lay = _layout(local)
    v = NkiTensor.__new__(NkiTensor)
    v._b = b
    v._key = key
    v._dims = local
    v._dstr = v._st = b.lstr
    v._base = v._off = 0
    v._c, v._a, v._rng, v._ms = lay
    v._reg = None
    v._shape = local
    v._gat = None
    v._checks = ()
    v._alias = False
    v._acc = None
    v._whole = True
    v._srckey = v._srcpar = None
    return v


_LAYOUTS: dict[tuple[int, ...], tuple] = {}


def _layout(local: tuple[int, ...]) -> tuple:
    """(constants, coefficients, ranges, minor stride) of the whole view of a block."""
    lay = _LAYOUTS.get(local)
    if lay is None:
        n = len(local)
        # row-major: the most-minor free axis longer than 1 has stride 1
        lay = _LAYOUTS[local] = ((0,) * n, _identity(n), tuple((0, k) for k in local),
                                 1 if any(k > 1 for k in local[1:]) else 0)
    return lay


def anon_tile(m: Machine, memory: str, shape: tuple[int, ...], dtype: np.dtype, line: int) -> NkiTensor:
    """The whole view of a fresh anonymous tile (an instruction result); the checks and the
    derived layout of a (shape, memory, dtype) are computed once."""
    tkey = (shape, memory, dtype)
    tpl = m.anon_layouts.get(tkey)   # per target capacity: the limits were checked against it
    if tpl is None:
        check_tile_limits(memory, shape, dtype)
        plans = _LAYOUT_PLANS.get((shape, memory, 0))
        if plans is None:
            plans = _LAYOUT_PLANS[(shape, memory, 0)] = {}
        tpl = m.anon_layouts[tkey] = (dtype_name(dtype), dtype.itemsize, c_strides(shape), plans, _layout(shape))
    b = Buffer.__new__(Buffer)
    m._next_tensor += 1
    b.id = m._next_tensor
    b.name = ""
    b.memory = memory
    b.shape = b.local = shape
    b.dtype = dtype
    b.dtname, b.itemsize, b.lstr, b.plans, lay = tpl
    b.nb = 0
    b.kind = "scratch"
    b.scope = m.scope
    b.tpath = m.path
    b.line = line
    b.blocks = None if m.shape_only else {}
    b.fill = b.written = b.fresh = b.shared = b.views = b.place = None
    b.mutable = False
    v = NkiTensor.__new__(NkiTensor)
    v._b = b
    v._key = ()
    v._dims = v._shape = shape
    v._dstr = v._st = b.lstr
    v._base = v._off = 0
    v._c, v._a, v._rng, v._ms = lay
    v._reg = new_region(b.id, v._rng)   # (the instruction's trace record needs it)
    v._gat = v._acc = v._srckey = v._srcpar = None
    v._checks = ()
    v._alias = False
    v._whole = True
    return v


def new_buffer(memory: str, shape: tuple[int, ...], dtype: np.dtype, nb: int = 0, **kw) -> Buffer:
    """A fresh tensor; on-chip shapes are checked against partition and per-partition limits."""
    m = machine()
    if memory != HBM:
        check_tile_limits(memory, shape[nb:], dtype, kw.get("name", ""))
    return Buffer(m, memory, shape, dtype, nb, **kw)


_LIMITS_OK: set = set()


def check_tile_limits(memory: str, local: tuple[int, ...], dtype: np.dtype, name: str = "") -> None:
    """Partition count and bytes per partition of one tile (block) against the running
    target's capacity (`Machine.capacity`)."""
    cap = machine().capacity
    key = (memory, local, dtype, cap.sbuf_usable_bytes, cap.psum_bank_bytes, cap.partitions)
    if key in _LIMITS_OK:
        return
    _check_tile_limits(cap, memory, local, dtype, name)
    _LIMITS_OK.add(key)


def _check_tile_limits(cap: Capacity, memory: str, local: tuple[int, ...], dtype: np.dtype, name: str = "") -> None:
    label = f"tensor '{name}'" if name else "tile"
    if not local:
        raise errors.TileInferenceError(f"{label} in {memory} has no partition dimension")
    p = local[0]
    if p > cap.partitions:
        raise errors.PartitionLimitError(
            f"number of partitions {p} of {label} {list(local)} exceed architecture limitation of {cap.partitions}")
    per_partition = prod(local[1:]) * dtype.itemsize
    bank = cap.psum_bank_bytes
    if memory == PSUM and per_partition > bank:
        raise errors.PsumBankOverflowError(
            f"PSUM {label} {list(local)} {dtype.name} needs {per_partition} bytes per partition, more than one "
            f"PSUM bank ({bank} bytes = {bank // 4} fp32); a PSUM tile cannot cross bank "
            f"boundaries: split the free dimension into tiles of at most {bank // dtype.itemsize} elements")
    usable = cap.sbuf_usable_bytes
    if memory == SBUF and per_partition > usable:
        raise errors.SbufPartitionOverflowError(
            f"SBUF {label} {list(local)} {dtype.name} needs {per_partition} bytes per partition, more than the "
            f"{usable} usable bytes of an SBUF partition on {cap.target} ({cap.sbuf_partition_bytes} minus the "
            f"compiler's reserve)")


# --- views built without subscripts -------------------------------------------------------------

def _index_arrays(v: NkiTensor) -> list[np.ndarray]:
    """Explicit index arrays (broadcast to the tile shape) for each dim of `v`'s block."""
    if v._gat is not None:
        return list(v._gat)
    shape = v._shape
    n = len(shape)
    grids = [np.arange(s, dtype=np.int64).reshape([s if i == k else 1 for i in range(n)]) for k, s in enumerate(shape)]
    out = []
    for c, row in zip(v._c, v._a):
        arr = np.full(shape, c, dtype=np.int64)
        for k in range(n):
            if row[k]:
                arr = arr + row[k] * grids[k]
        out.append(np.broadcast_to(arr, shape))
    return out


def _general_view(v: NkiTensor, gat: tuple, new_shape: tuple[int, ...]) -> NkiTensor:
    t = NkiTensor.__new__(NkiTensor)
    t._b, t._key, t._dims, t._dstr, t._base = v._b, v._key, v._dims, v._dstr, v._base
    t._c, t._a = None, None
    t._shape = new_shape
    t._off, t._st = None, None
    t._gat = gat
    t._checks = ()
    t._alias = v._alias
    t._acc = None
    t._whole = False
    t._rng = t._reg = t._ms = None
    t._srckey = t._srcpar = None
    return t


def restrict(v: NkiTensor, box, tile_shape: tuple[int, ...]) -> NkiTensor:
    """`v` limited to the part of an instruction tile inside `box` (axes aligned right; axes
    where `v` has extent 1 are broadcast and stay whole)."""
    n = len(v._shape)
    off = len(tile_shape) - n
    lo = [0] * n
    sizes = list(v._shape)
    changed = False
    for j in range(n):
        if v._shape[j] == 1:
            continue
        blo, bhi = box[j + off]
        if blo != 0 or bhi != v._shape[j]:
            lo[j] = blo
            sizes[j] = bhi - blo
            changed = True
    if not changed:
        return v
    if v._gat is not None:
        sl = tuple(slice(start, start + n) for start, n in zip(lo, sizes))
        t = _general_view(v, tuple(g[sl] for g in v._gat), tuple(sizes))
        return t
    new_c = []
    for c, row in zip(v._c, v._a):
        for k in range(n):
            if row[k] and lo[k]:
                c += row[k] * lo[k]
        new_c.append(c)
    checks = []
    for (c, coef, ext, dim) in v._checks:
        for k in range(n):
            if coef[k] and lo[k]:
                c += coef[k] * lo[k]
        if not _within(c, coef, sizes, ext):
            checks.append((c, coef, ext, dim))
    return _make(v._b, v._key, v._dims, v._dstr, v._base, tuple(new_c), v._a, tuple(sizes),
                 tuple(checks), None, v._alias)


def reshape(v: NkiTensor, shape: tuple[int, ...]) -> NkiTensor:
    """A row-major reshape of a contiguous HBM view (NKI allows reshape on HBM tensors only)."""
    b = v._b
    if b.memory != HBM:
        raise errors.UnsupportedMemoryError(
            f"reshape is supported on HBM tensors only; '{b.label}' is in {b.memory}")
    if -1 in shape:
        known = prod(n for n in shape if n != -1)
        shape = tuple(prod(v._shape) // known if n == -1 else n for n in shape)
    if prod(shape) != prod(v._shape):
        raise errors.ShapeMismatchError(
            f"cannot reshape tensor '{b.label}' of shape {list(v._shape)} ({prod(v._shape)} elements) into "
            f"{list(shape)} ({prod(shape)} elements)")
    if v._gat is not None or v._checks or not _contiguous(v._shape, v._st):
        raise errors.IndexNotSupportedError(
            f"reshape needs a contiguous in-bounds HBM view; '{b.label}' view of shape {list(v._shape)} is not")
    n = len(shape)
    ident = identity_coef(n)
    return _make(b, v._key, shape, c_strides(shape), v._off, (0,) * n, ident, shape, (), None,
                 alias=(shape != b.local or v._off != 0))


def as_tile_shape(v: NkiTensor) -> NkiTensor:
    """An HBM view of rank < 2 seen as a (P, 1) / (1, 1) tile."""
    if len(v._shape) >= 2:
        return v
    extra = 2 - len(v._shape)
    if v._gat is not None:
        g = tuple(x.reshape(x.shape + (1,) * extra) for x in v._gat)
        return _general_view(v, g, v._shape + (1,) * extra)
    a = tuple(row + (0,) * extra for row in v._a)
    checks = tuple((c, coef + (0,) * extra, ext, d) for c, coef, ext, d in v._checks)
    return _make(v._b, v._key, v._dims, v._dstr, v._base, v._c, a, v._shape + (1,) * extra, checks, None, v._alias)


def _within(c: int, coef, shape, ext: int) -> bool:
    lo = hi = c
    for a, n in zip(coef, shape):
        if a > 0:
            hi += a * (n - 1)
        elif a < 0:
            lo += a * (n - 1)
    return lo >= 0 and hi < ext


def check_bounds(v: NkiTensor, where: np.ndarray | None = None) -> None:
    """Raise `err_tensor_access_out_of_bound` for accesses outside the tensor (restricted to
    the positions where `where` holds, if given)."""
    if not v._checks or 0 in v._shape:
        return
    for (c, coef, ext, dim) in v._checks:
        if where is not None:
            arr = np.full(v._shape, c, dtype=np.int64)
            for k, a in enumerate(coef):
                if a:
                    shp = [1] * len(v._shape)
                    shp[k] = v._shape[k]
                    arr = arr + a * np.arange(v._shape[k]).reshape(shp)
            sel = arr[np.broadcast_to(where, v._shape)]
            if sel.size == 0 or (sel.min() >= 0 and sel.max() < ext):
                continue
            lo, hi = int(sel.min()), int(sel.max())
        else:
            lo = hi = c
            for a, n in zip(coef, v._shape):
                if a > 0:
                    hi += a * (n - 1)
                elif a < 0:
                    lo += a * (n - 1)
            if lo >= 0 and hi < ext:
                continue
        b = v._b
        raise errors.OutOfBoundsError(
            f"Out-of-bound access for tensor `{b.label}` on dimension {dim}: index range [{lo}, {hi}] exceed "
            f"dimension size of {ext}; fix the indices or exclude the excess with a mask=")


def region(v: NkiTensor) -> Region:
    """The box of `v`'s elements over the tensor's full logical shape (block dims included)."""
    r = v._reg
    if r is None:
        r = v._reg = _region(v)
    return r


def new_region(tensor: int, box: tuple[tuple[int, int], ...]) -> Region:
    """`Region(tensor, box)`, built by setting its slots: the frozen dataclass's __init__
    goes through object.__setattr__ per field and takes twice as long (traces hold several
    regions per instruction)."""
    r = _new(Region)
    _REGION_TENSOR(r, tensor)
    _REGION_BOX(r, box)
    return r


_new = object.__new__
_REGION_TENSOR = Region.tensor.__set__
_REGION_BOX = Region.box.__set__


def _region(v: NkiTensor) -> Region:
    b = v._b
    if 0 in v._shape:
        return Region(b.id, tuple((0, 0) for _ in b.shape))
    key = v._key
    box = block_box(key) if key else ()
    rng = v._rng
    if rng is not None:
        if not v._checks:
            return new_region(b.id, box + rng)
        return Region(b.id, box + tuple((lo if lo > 0 else 0, hi if hi < n else n)
                                        for (lo, hi), n in zip(rng, b.local)))
    box = list(box)
    if v._gat is not None:
        local = [(int(g.min()), int(g.max()) + 1) for g in v._gat]
    else:
        shape = v._shape
        local = []
        for c, row in zip(v._c, v._a):
            lo = hi = c
            for a, n in zip(row, shape):
                if a > 0:
                    hi += a * (n - 1)
                elif a < 0:
                    lo += a * (n - 1)
            local.append((lo, hi + 1))
    if v._alias:
        local = _alias_box(v, local)
    clipped = [(max(lo, 0), min(hi, n)) for (lo, hi), n in zip(local, b.local)]
    return Region(b.id, tuple(box + clipped))


_UNITS: list[tuple[int, int]] = []   # _UNITS[k] = (k, k + 1), shared by all block boxes


def block_box(key: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The region box `((k, k + 1), ...)` of the block dims of block `key` (valid indices),
    built from shared pairs: traces hold one box per region."""
    n = max(key) + 1
    if n > len(_UNITS):
        _UNITS.extend((k, k + 1) for k in range(len(_UNITS), n))
    return tuple(map(_UNITS.__getitem__, key))


def _alias_box(v: NkiTensor, local) -> list[tuple[int, int]]:
    """Map a box over a reshaped view's dims back to the buffer's dims (conservatively)."""
    b = v._b
    first = v._base + sum(s * lo for s, (lo, hi) in zip(v._dstr, local))
    last = v._base + sum(s * (hi - 1) for s, (lo, hi) in zip(v._dstr, local))
    i0 = np.unravel_index(first, b.local)
    i1 = np.unravel_index(last, b.local)
    out = []
    same = True
    for a, z, n in zip(i0, i1, b.local):
        if same:
            out.append((int(a), int(z) + 1) if a <= z else (0, n))
            same = a == z
        else:
            out.append((0, n))
    return out


def count(v: NkiTensor) -> int:
    return prod(v._shape)


def minor_stride_bytes(v: NkiTensor) -> int:
    """Byte stride of the most-minor free axis with more than one element (0 if none)."""
    ms = v._ms
    if ms is None:
        ms = v._ms = _minor_stride(v)
    return ms * v._b.itemsize


def _minor_stride(v: NkiTensor) -> int:
    """`minor_stride_bytes` in elements (1 for gathers)."""
    if v._gat is not None:
        return 1
    shape = v._shape
    for k in range(len(shape) - 1, 0, -1):
        if shape[k] > 1:
            return abs(v._st[k])
    return 0


def _gather_target(v: NkiTensor, blk: np.ndarray, gat) -> tuple[np.ndarray, tuple]:
    """(array, index tuple) addressing a gather view's elements in its block."""
    if v._alias:
        flat = v._base
        for s, g in zip(v._dstr, gat):
            flat = flat + s * g
        return blk.reshape(-1), (flat,)
    return blk, tuple(gat)


def clipped_gather(v: NkiTensor) -> tuple:
    """Index arrays of `v`, clipped into range (positions outside are excluded by a mask)."""
    return tuple(np.clip(g, 0, n - 1) for g, n in zip(_index_arrays(v), v._dims))


def array(v: NkiTensor) -> np.ndarray:
    """Zero-copy NumPy view of `v`'s elements (a copy for gathers and out-of-bounds views
    whose excess a mask excludes). Data mode only."""
    b = v._b
    blk = b.block(v._key)
    if v._gat is not None or v._checks:
        gat = v._gat if v._checks == () else clipped_gather(v)
        arr, idx = _gather_target(v, blk, gat)
        return arr[idx]
    if b.place is not None:
        return b.place.ndarray(v)
    isz = b.itemsize
    return np.ndarray(v._shape, dtype=blk.dtype, buffer=blk, offset=v._off * isz,
                      strides=byte_strides(v._st, isz))


# itemsize -> element strides -> byte strides (views repeat a few stride patterns)
_BYTE_STRIDES: dict[int, dict[tuple[int, ...], tuple[int, ...]]] = {}


def byte_strides(st: tuple[int, ...], isz: int) -> tuple[int, ...]:
    """Element strides `st` in bytes for items of `isz` bytes (cached)."""
    cache = _BYTE_STRIDES.get(isz)
    if cache is None:
        cache = _BYTE_STRIDES[isz] = {}
    bs = cache.get(st)
    if bs is None:
        bs = cache[st] = tuple(s * isz for s in st)
    return bs


def _contiguous(shape, st) -> bool:
    expect = 1
    for n, s in zip(reversed(shape), reversed(st)):
        if n == 1:
            continue
        if s != expect:
            return False
        expect *= n
    return True


def covers_block(v: NkiTensor) -> bool:
    """True when `v` addresses every element of its block exactly once (a whole-block write)."""
    if v._gat is not None or v._alias or v._off != 0 or v._checks:
        return False
    return prod(v._shape) == prod(v._b.local) and _contiguous(v._shape, v._st)


def share_block(src: Buffer, src_key: tuple, dst: Buffer, dst_key: tuple) -> None:
    """Make `dst`'s block the very array of `src`'s block (an instruction result moved into its
    destination without a copy). The first later write to either side copies it first."""
    unshare(dst, dst_key, copy=False)
    dst.blocks[dst_key] = src.blocks[src_key]
    if src.shared is None:
        src.shared = {}
    if dst.shared is None:
        dst.shared = {}
    src.shared[src_key] = (weakref.ref(dst), dst_key)
    dst.shared[dst_key] = (weakref.ref(src), src_key)


def unshare(b: Buffer, key: tuple, copy: bool = True) -> None:
    """Before writing block `key` of `b`: end its sharing (giving `b` a private copy)."""
    peer = b.shared.pop(key, None) if b.shared else None
    if peer is None:
        return
    ref, pkey = peer
    other = ref()
    if other is not None and other.shared:
        other.shared.pop(pkey, None)
    arr = b.blocks.get(key)
    if copy and arr is not None and other is not None and other.blocks is not None \
            and other.blocks.get(pkey) is arr:
        b.blocks[key] = arr.copy()


def write_array(v: NkiTensor) -> np.ndarray:
    """A writable NumPy view of an affine, in-bounds `v`; a block written whole for the first
    time skips its fill."""
    b = v._b
    if b.shared:
        unshare(b, v._key)
    if b.place is not None:
        return b.place.ndarray(v)
    blk = b.blocks.get(v._key)
    if blk is None:
        blk = b.block(v._key, full_write=covers_block(v))
    isz = b.itemsize
    return np.ndarray(v._shape, dtype=blk.dtype, buffer=blk, offset=v._off * isz,
                      strides=byte_strides(v._st, isz))


def write(v: NkiTensor, value, where: np.ndarray | None = None) -> None:
    """Store `value` (broadcast, cast to the tensor dtype) into `v`'s elements, only where
    `where` holds if given."""
    b = v._b
    if b.shared:
        unshare(b, v._key)
    if v._gat is not None or v._checks:
        gat = v._gat if v._checks == () else clipped_gather(v)
        arr, idx = _gather_target(v, b.block(v._key), gat)
        val = np.broadcast_to(np.asarray(value).astype(b.dtype, copy=False), v._shape)
        if where is None:
            arr[idx] = val
        else:
            w = np.broadcast_to(where, v._shape)
            arr[tuple(i[w] for i in np.broadcast_arrays(*idx))] = val[w]
        return
    if where is None:
        np.copyto(write_array(v), value, casting="unsafe")
    else:
        np.copyto(array(v), value, casting="unsafe", where=where)


def injective(v: NkiTensor) -> bool:
    """True when no two indices of affine view `v` address the same element, proven from its
    strides: sorted by size, each stride steps past everything the smaller ones reach. False
    also for the rare injective views this cannot prove (they take the exact, slower path)."""
    if v._st is None:
        return False
    reach = 0
    for s, n in sorted((abs(s), n) for s, n in zip(v._st, v._shape) if n > 1):
        if s <= reach:
            return False
        reach += s * (n - 1)
    return True


def mark_written(v: NkiTensor, where: np.ndarray | None = None) -> None:
    """Record which elements of an output tensor a store wrote (see `coverage`)."""
    cov = v._b.written
    if cov is None:
        return
    if where is None and v._gat is None and injective(v):
        box = region(v).box
        vol = 1
        for lo, hi in box:
            vol *= hi - lo
        if vol == prod(v._shape):   # distinct elements as many as the box holds: the box itself
            cov.add_box(box)
            return
    w = cov.full_bitmap()
    if v._gat is not None or v._checks:
        gat = v._gat if v._checks == () else clipped_gather(v)
        arr, idx = _gather_target(v, w, gat)
        if where is None:
            arr[idx] = True
        else:
            wm = np.broadcast_to(where, v._shape)
            arr[tuple(i[wm] for i in np.broadcast_arrays(*idx))] = True
        return
    view = np.ndarray(v._shape, dtype=w.dtype, buffer=w, offset=v._off, strides=v._st)
    if where is None:
        view[...] = True
    else:
        view |= np.broadcast_to(where, v._shape)

