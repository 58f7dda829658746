"""Launching a kernel function: wrap the arguments as HBM tensors, execute it on a fresh
`Machine` of the given front-end, and hand back NumPy outputs and the instruction trace.
Only what the kernel's own instructions wrote counts as an output, and a kernel cannot
launch another.

Kernels that declare more than 512 MiB of kernel-level tensors are first traced without
data (shape-only, fast) to learn the last access of every on-chip block; the full-data run
then drops each block after that access, so kernels declaring several GiB of logical
buffers run in a few GiB.
"""

from __future__ import annotations

import gc
import inspect
import itertools
import types
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import errors
from ..trace import HBM, Trace
from . import blas
from . import tensor as T
from .capacity import DEFAULT as DEFAULT_CAPACITY
from .capacity import Capacity
from .instr import normalize_dtype
from .runtime import FrontEnd, Machine, NeedsReleasePlan, ReleasePlan, activate, current


@dataclass(frozen=True)
class ShapeDtype:
    """A placeholder argument (shape-only runs) and the value of outputs in shape-only mode."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))


def placeholders(args) -> list:
    """Kernel arguments for a shape-only run: every array-like becomes its ShapeDtype,
    other values (scalars, NumPy's included, and settings) stay as they are, as a full-data
    run receives them."""
    return [ShapeDtype(a.shape, a.dtype) if hasattr(a, "shape") and hasattr(a, "dtype") and not isinstance(a, np.generic)
            else a for a in args]


@dataclass
class KernelRun:
    """The result of one kernel execution."""

    outputs: Any          # NumPy array(s) (ShapeDtype in shape-only mode), structured as returned
    trace: Trace
    declared_bytes: int = 0   # logical bytes of the tensors it declared at kernel level


def signature(values) -> tuple:
    """What a kernel's trace depends on in its arguments: array shapes and dtypes, other values."""
    out = []
    for v in values:
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):   # a kwargs item
            out.append((v[0],) + signature([v[1]]))
        elif isinstance(v, (np.ndarray, ShapeDtype)):
            out.append(("array", tuple(v.shape), np.dtype(v.dtype).str))
        else:
            out.append(("value", repr(v)))
    return tuple(out)


# Release plans of recent kernels: evaluating one kernel on several seeds traces it once.
_PLAN_CACHE: OrderedDict = OrderedDict()
_PLAN_CACHE_SIZE = 8


# Kernel-level tensors (they live until the end) larger than this in total make a full-data
# run trace the kernel first and release blocks after their last use.
AUTO_RELEASE_BYTES = 512 << 20


def simulate(frontend: FrontEnd, fn: Callable, args: Sequence, kwargs: dict | None = None, *,
             shape_only: bool = False, release: bool | None = None, plan_key=None,
             capacity: Capacity | None = None) -> KernelRun:
    """Execute kernel function `fn`, written in `frontend`'s dialect, on the emulator.

    `release=True`: trace the kernel shape-only first, and in the full-data run free every
    on-chip block after its last use (bounded memory, and freed blocks are reused instead of
    faulting in fresh pages). `False`: keep blocks. `None` (default): run directly, switching
    to the first behaviour as soon as the kernel declares more than AUTO_RELEASE_BYTES of
    kernel-level tensors. `plan_key` (hashable, naming the kernel and its argument shapes)
    lets repeated runs reuse a plan. `capacity`: the target's SBUF/PSUM (`core.capacity`;
    None: trn1's).
    """
    cap = DEFAULT_CAPACITY if capacity is None else capacity
    frontend.install()
    if current() is not None:
        # Every launch path (nki.simulate_kernel, baremetal, benchmark, profile) ends here: a
        # launch inside a running kernel would hand it host arrays computed outside its trace.
        raise errors.NestedLaunchError(
            "a kernel cannot launch another kernel (nki.simulate_kernel, nki.baremetal, nki.benchmark, "
            "nki.profile): its outputs must be computed by its own instructions; call a helper function instead")
    fn = frontend.unwrap(fn)
    options = tuple(getattr(fn, OPTIONS, ()))
    grid = tuple(getattr(fn, GRID, ()))
    fn = _with_kernel_globals(fn, frontend.kernel_globals)
    if options or grid:
        fn = _Options(fn, options, grid)
    kwargs = dict(kwargs or {})
    if shape_only:
        run = _execute(frontend, fn, args, kwargs, shape_only=True, plan=None, capacity=cap)
        if plan_key is not None and run.declared_bytes > AUTO_RELEASE_BYTES:
            _keep_plan(plan_key, release_plan(run.trace))   # a full-data run of it will need this plan
        return run
    # uninitialised (NaN) data and hardware-like overflow are the kernel's business, not warnings
    plan = _PLAN_CACHE.get(plan_key) if plan_key is not None and release is not False else None
    if plan is None and release is None:
        try:
            with blas.single_threaded(), np.errstate(all="ignore"):
                return _execute(frontend, fn, args, kwargs, shape_only=False, plan=None, budget=AUTO_RELEASE_BYTES,
                                capacity=cap)
        except NeedsReleasePlan:
            release = True
    if release:
        if plan is None:
            plan = release_plan(_execute(frontend, fn, args, kwargs, shape_only=True, plan=None, capacity=cap).trace)
            if plan_key is not None:
                _keep_plan(plan_key, plan)
        else:
            _PLAN_CACHE.move_to_end(plan_key)
    with blas.single_threaded(), np.errstate(all="ignore"):
        return _execute(frontend, fn, args, kwargs, shape_only=False, plan=plan, capacity=cap)


# The attribute a front-end's kernel decorators set on the kernel function: the names of what
# the kernel asks of the compiler (e.g. "skip_middle_end_transformations"), which the run
# records in `Trace.options` for the performance model.
OPTIONS = "__nki_options__"


# The attribute a front-end's launch syntax sets on (a copy of) the kernel function: its SPMD
# launch grid (`kernel[2]`, the current dialect's logical-core degree; `kernel[4, 2]`, a legacy
# grid). The programs of a grid run one after another on the one machine: each sees its index in
# `Machine.state[SPMD]`, and they share the kernel's inputs and its shared HBM tensors
# (`shared_hbm`: the k-th one a later program creates is the first program's k-th).
GRID = "__nki_grid__"
SPMD = "spmd"                  # Machine.state key: (program index, grid) while a grid runs
RETURNABLE = "returnable_hbm"  # Machine.state key: ids of HBM tensors the front-end lets a kernel
#                                return besides its shared_hbm outputs (current nl.hbm / private_hbm)


class _Options:
    """A kernel function with its compiler options (what `_execute` records in the trace) and
    its launch grid."""

    __slots__ = ("fn", "options", "grid")

    def __init__(self, fn: Callable, options: tuple[str, ...], grid: tuple[int, ...] = ()):
        self.fn, self.options, self.grid = fn, options, grid


def with_grid(fn: Callable, grid: tuple[int, ...]) -> Callable:
    """A copy of kernel function `fn` that launches on `grid` (the front-ends' `kernel[...]`)."""
    if not isinstance(fn, types.FunctionType):
        raise errors.OperandTypeError(f"a launch grid needs a kernel function, got {type(fn).__name__}")
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__annotations__ = fn.__annotations__
    new.__dict__.update(fn.__dict__)
    new.__qualname__ = fn.__qualname__
    setattr(new, GRID, tuple(int(n) for n in grid))
    return new


def shared_tensor(m: Machine, shape: tuple[int, ...], dtype: np.dtype, create: Callable[[], Any]):
    """The buffer of a shared HBM tensor the running program creates: `create()` in the first
    program of a grid (and outside grids), the first program's buffer of the same rank among
    those it created in every later one (refused when that one's shape or dtype differ)."""
    spmd = m.state.get(SPMD)
    if spmd is None:
        return create()
    reg = m.state.setdefault("spmd_shared", {"program": None, "next": 0, "tensors": []})
    if reg["program"] != spmd[0]:
        reg["program"], reg["next"] = spmd[0], 0
    k = reg["next"]
    reg["next"] = k + 1
    if not any(spmd[0]):
        buf = create()
        reg["tensors"].append(buf)
        return buf
    tensors = reg["tensors"]
    if k >= len(tensors) or tensors[k].shape != shape or tensors[k].dtype != dtype:
        raise errors.ShapeMismatchError(
            f"program {list(spmd[0])} of the launch grid {list(spmd[1])} creates shared HBM tensor number {k + 1} "
            f"with shape {list(shape)} {dtype.name}, which program {[0] * len(spmd[1])} did not create: every "
            f"program of a grid must create the same shared_hbm tensors in the same order")
    return tensors[k]


def _keep_plan(plan_key, plan: ReleasePlan) -> None:
    _PLAN_CACHE[plan_key] = plan
    while len(_PLAN_CACHE) > _PLAN_CACHE_SIZE:
        _PLAN_CACHE.popitem(last=False)


def _with_kernel_globals(fn: Callable, names: dict[str, Any]) -> Callable:
    """`fn` seeing the front-end's `names` (e.g. Python `range` as a sequential loop) instead
    of the builtin ones."""
    if not isinstance(fn, types.FunctionType) or all(fn.__globals__.get(k) is v for k, v in names.items()):
        return fn
    g = dict(fn.__globals__)
    g.update(names)
    new = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__annotations__ = fn.__annotations__
    return new


def release_plan(trace: Trace) -> ReleasePlan:
    """Last access of every block of on-chip and HBM-scratch tensors."""
    last: dict[tuple[int, tuple], int] = {}
    nblock = {tid: info.partition_axis or 0 for tid, info in trace.tensors.items() if info.kind == "scratch"}
    for ins in trace.instrs:
        i = ins.id
        for regs in (ins.reads, ins.writes):
            for reg in regs:
                tid = reg.tensor
                nb = nblock.get(tid)
                if nb is None:
                    continue
                last[(tid, tuple([lo for lo, _ in reg.box[:nb]]) if nb else ())] = i
    plan = ReleasePlan()
    for k, i in last.items():
        plan.at.setdefault(i, []).append(k)
    return plan


def _execute(frontend: FrontEnd, fn: Callable, args: Sequence, kwargs: dict, *, shape_only: bool,
             plan: ReleasePlan | None, budget: int | None = None,
             capacity: Capacity = DEFAULT_CAPACITY) -> KernelRun:
    options: tuple[str, ...] = ()
    grid: tuple[int, ...] = ()
    if isinstance(fn, _Options):
        fn, options, grid = fn.fn, fn.options, fn.grid
    m = Machine(frontend=frontend, shape_only=shape_only, kernel_file=fn.__code__.co_filename, plan=plan,
                capacity=capacity)
    m.trace.options = options
    m.declared_budget = budget
    m.kernel_code = fn.__code__
    prev = activate(m)
    # The run allocates millions of small acyclic objects (trace records, views); the cyclic
    # collector would rescan the growing trace over and over, so it pauses while the kernel runs.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        params = _parameters(fn)
        call_args = [_wrap(m, a, params[i] if i < len(params) else (f"arg{i}", None))
                     for i, a in enumerate(args)]
        annotations = dict(params)
        call_kwargs = {k: _wrap(m, v, (k, annotations.get(k))) for k, v in kwargs.items()}
        try:
            ret = _programs(m, fn, call_args, call_kwargs, grid)
        except AttributeError as e:
            clearer = T.unknown_attribute(e)
            if clearer is None:
                raise
            raise clearer from e
        m.finish()
        outputs = _collect(m, fn, ret)
        if gc_was_enabled:
            # What the run leaves alive is mostly the trace, which is long-lived: move it to
            # the oldest generation in one step (freeze + unfreeze) rather than have the
            # first young collection after the run scan all of it.
            gc.freeze()
            gc.unfreeze()
    finally:
        activate(prev)
        if gc_was_enabled:
            gc.enable()
    return KernelRun(outputs, m.trace, m.declared_bytes)


def _programs(m: Machine, fn: Callable, args: list, kwargs: dict, grid: tuple[int, ...]):
    """Run the kernel once, or once per program of its launch grid, in order (program (0, ..., 0)
    first); every program must return the same tensors (its shared HBM outputs)."""
    if not grid:
        return fn(*args, **kwargs)
    ret = None
    for k, pid in enumerate(itertools.product(*(range(n) for n in grid))):
        m.state[SPMD] = (pid, grid)
        m.state.pop("scalar_accumulators", None)   # each program runs on a core of its own
        out = fn(*args, **kwargs)
        if k and not _same_outputs(ret, out):
            raise errors.HostOutputError(
                f"program {list(pid)} of the launch grid {list(grid)} returned other tensors than program "
                f"{[0] * len(grid)}: the outputs of a kernel launched on several programs must be the shared HBM "
                f"tensors (nl.shared_hbm) every program creates and returns", *_where(fn))
        ret = out
    m.state.pop(SPMD, None)
    return ret


def _same_outputs(a, b) -> bool:
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same_outputs(x, y) for x, y in zip(a, b))
    if isinstance(a, T.NkiTensor) and isinstance(b, T.NkiTensor):
        return a._b is b._b and a._shape == b._shape and a._off == b._off
    return a is b


def _where(fn: Callable) -> tuple[str, int]:
    return fn.__code__.co_filename, fn.__code__.co_firstlineno


def _parameters(fn: Callable) -> list[tuple[str, Any]]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [(p.name, p.annotation) for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _wrap(m: Machine, value, param: tuple[str, Any]):
    """NumPy arrays and ShapeDtype placeholders become HBM input tensors; other values
    (Python numbers such as eps) are passed as they are."""
    name, ann = param
    if isinstance(value, np.ndarray):
        arr = value
        shape, dtype = arr.shape, arr.dtype
    elif isinstance(value, ShapeDtype):
        if not m.shape_only:
            raise TypeError(f"argument '{name}' is a ShapeDtype placeholder; full-data runs need NumPy arrays")
        arr, shape, dtype = None, value.shape, value.dtype
    else:
        return value
    try:
        dt = normalize_dtype(dtype)
    except errors.NkiError as e:
        raise errors.UnsupportedDtypeError(
            f"kernel argument '{name}' has dtype {np.dtype(dtype).name}, which NKI does not support "
            f"(convert inputs to float32)", fn_file(m), 0) from e
    buf = T.Buffer(m, HBM, tuple(int(n) for n in shape), dt, 0, kind="input", name=name)
    buf.mutable = m.frontend.is_mutable(ann)
    if not m.shape_only:
        buf.blocks[()] = np.ascontiguousarray(arr)
    return T.whole(buf)


def fn_file(m: Machine) -> str:
    return m.trace.kernel_file


def _collect(m: Machine, fn: Callable, ret):
    """Kernel return value -> NumPy arrays (or ShapeDtype) in the same structure."""
    where = (fn.__code__.co_filename, fn.__code__.co_firstlineno)
    if isinstance(ret, (tuple, list)):
        return tuple(_collect(m, fn, r) for r in ret)
    if ret is None:
        raise errors.OutputNotWrittenError("the kernel returned no output tensor (create outputs with "
                                           "buffer=nl.shared_hbm and return them)", *where)
    if not isinstance(ret, T.NkiTensor):
        # Only what the kernel's own instructions wrote is an output: a host value (a NumPy
        # array, a number) would be a result the trace never computed, scored as free.
        raise errors.HostOutputError(
            f"kernel outputs must be HBM tensors written by the kernel's instructions (nl.shared_hbm); "
            f"the kernel returned a {type(ret).__name__}", *where)
    b = ret._b
    if b.memory != HBM or len(ret._key) < b.nb:
        raise errors.UnsupportedMemoryError(
            f"kernel outputs must be HBM tensors (nl.shared_hbm); the kernel returned a tile in '{b.memory}'", *where)
    if b.kind == "scratch" and b.id in m.state.get(RETURNABLE, ()):
        # a private HBM tensor the kernel created (current nl.hbm): an output from now on (its
        # coverage is checked below like a shared_hbm output's)
        b.kind = "output"
        m.trace.tensors[b.id] = b.info()
    if b.kind != "output":
        # An input (or a view of one) would pass as an output after a single write anywhere in
        # it, a 4-byte copy scored as the whole result; scratch HBM is not returnable on hardware.
        what = {"constant": "a constant (nl.shared_constant)", "input": "an input"}.get(
            b.kind, "a scratch tensor (nl.hbm)")
        view = "" if ret._shape == b.shape and not ret._off and not ret._alias else "a view of "
        raise errors.HostOutputError(
            f"the kernel returned {view}{what}, '{b.label}'; outputs must be fresh tensors that the kernel "
            "creates (nl.ndarray(..., buffer=nl.shared_hbm)) and writes with its own instructions", *where)
    if b.written is not None:
        missing, first = b.written.missing()
        size = T.prod(b.shape)
        if missing:
            what = "was never written" if missing == size else \
                f"has {missing} of {size} elements never written (first at index {first})"
            raise errors.OutputNotWrittenError(f"output tensor '{b.label}' of shape {list(b.shape)} {what}", *where)
    if m.shape_only:
        return ShapeDtype(ret._shape, b.dtype)
    if b.place is not None:   # a reinterpreting view (`t.view(dtype)`) of another buffer's storage
        return T.array(ret).copy()
    arr = b.blocks.get(())
    if arr is None:
        arr = np.full(b.shape, T.sentinel(b.dtype), dtype=b.dtype)
    if ret._shape != b.shape or ret._off:
        return T.array(ret).copy()
    return arr
