"""The state of one kernel run: trace under construction, loop stack, scopes, write
bookkeeping for the `affine_range` rule, the block-release plan, and the front-end whose
dialect the kernel is written in.

Exactly one `Machine` is active while a kernel runs (kernels run eagerly, one at a time
per process); the front-end's API calls find it with `machine()`. What the core cannot
decide alone (what `tile + tile` or `t[key] = value` means in kernel code) it asks the
`FrontEnd` of the running machine, so that the core never imports a front-end.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..trace import Instr, Loop, TensorInfo, Trace
from .capacity import DEFAULT as DEFAULT_CAPACITY
from .capacity import Capacity
from .capacity import check as check_capacity

Path = tuple[tuple[int, int], ...]

_CURRENT: Machine | None = None


def machine() -> Machine:
    """The machine of the running kernel; NKI calls outside a kernel are an error."""
    m = _CURRENT
    if m is None:
        raise errors.ApiOutsideKernelError(
            "calling NKI API outside of NKI kernels is not supported (run the kernel with nki.jit, "
            "nki.simulate_kernel or fitness.simulator.run_kernel)")
    return m


def current() -> Machine | None:
    return _CURRENT


# The first member of a scope element that stands for an if/else body (loop elements hold a
# loop instance's uid, which is positive).
IF_BODY = -1


def if_body() -> contextlib.AbstractContextManager:
    """The scope of an if/else body of the running kernel (see `Machine.if_body`); nothing
    outside a kernel (a module-level `if`). The loader wraps every if/else body of a module
    of a dialect with scope rules in it (`runner.load_kernel`)."""
    m = _CURRENT
    return contextlib.nullcontext() if m is None else m.if_body()


def activate(m: Machine | None) -> Machine | None:
    """Make `m` the running machine; returns the previous one (for nesting/restoring)."""
    global _CURRENT
    prev, _CURRENT = _CURRENT, m
    return prev


class LoopFrame:
    """One execution of a loop statement (a loop instance) on the loop stack."""

    __slots__ = ("uid", "id", "kind", "start", "stop", "step", "value", "depth",
                 "path_prefix", "scope_prefix", "writes", "index")

    def __init__(self, uid: int, loop_id: int, kind: str, r: range, depth: int,
                 path_prefix: Path, scope_prefix: Path):
        self.uid = uid
        self.id = loop_id
        self.kind = kind
        self.start, self.stop, self.step = r.start, r.stop, r.step
        self.value = r.start
        self.depth = depth
        self.path_prefix = path_prefix
        self.scope_prefix = scope_prefix
        # affine loops, per written tensor block: (iteration, box) while a single write is known,
        # then {iteration: [bounding box, [boxes...]]}
        self.writes: dict = {}
        self.index: LoopIndex | None = None   # the current iteration's loop variable


class LoopIndex(int):
    """A loop iteration value that remembers its loop (for `nl.loop_reduce(loop_indices=...)`);
    the loop frame is private: kernels see an int."""

    _loop: LoopFrame


def no_method(t, name: str):
    """The `method` handler of a dialect whose tensors have no view methods."""
    raise AttributeError(f"'NkiTensor' object has no attribute '{name}'", name=name, obj=t)


def _no_write_rule(buf, box, exempt=frozenset(), view=None) -> None:
    """`Machine.note_write` of dialects without loop rules."""


def _no_scope_rule(buf) -> None:
    """`Machine.check_scope` of dialects without loop rules."""


@dataclass(frozen=True)
class FrontEnd:
    """What a dialect's front-end supplies to the core: the meaning of Python syntax on kernel
    tensors, and how kernels of the dialect are launched. Handlers take the tensor first."""

    name: str
    getitem: Callable[[Any, Any], Any]                 # tensor[key]
    setitem: Callable[[Any, Any, Any], None]           # tensor[key] = value
    augmented: Callable[[Any, Any, str], Any]          # tensor op= value (op: ALU name)
    operator: Callable[[Any, Any, str, bool], Any]     # tensor op other / other op tensor (reverse)
    broadcast_to: Callable[[Any, Any], Any]            # tensor.broadcast_to(shape)
    install: Callable[[], None]                        # make the dialect's modules importable
    unwrap: Callable[[Any], Any]                       # a decorated kernel -> its function
    is_mutable: Callable[[Any], bool]                  # parameter annotation -> the input is writable
    kernel_globals: dict[str, Any] = field(default_factory=dict)   # names kernels see instead of builtins
    method: Callable[[Any, str], Callable] = no_method   # tensor.name(...) for view methods (slice, ap, ...)
    # the loop rules of dialects whose loops are compiled: the affine_range write rule
    # (note_write) and tensors created in a loop body staying in it (check_scope)
    loop_rules: bool = True


@dataclass
class ReleasePlan:
    """Blocks to drop after their last use: `at[i]` lists (tensor id, block key) whose last
    access is instruction i (computed from a shape-only trace of the same kernel)."""

    at: dict[int, list[tuple[int, tuple[int, ...]]]] = field(default_factory=dict)


class NeedsReleasePlan(BaseException):
    """Internal: a run without a release plan declared more memory than its budget (a
    BaseException so that `except Exception` in kernel code cannot swallow it)."""


class Machine:
    """Everything one kernel execution accumulates."""

    def __init__(self, *, frontend: FrontEnd, shape_only: bool, kernel_file: str = "",
                 plan: ReleasePlan | None = None, capacity: Capacity = DEFAULT_CAPACITY):
        self.frontend = frontend
        # the target's SBUF/PSUM (per-tile limits, live capacity when the kernel ends)
        self.capacity = capacity
        self.anon_layouts = capacity.anon_layouts
        # the front-end's handlers of tensor syntax, as attributes (looked up on every use)
        self.getitem = frontend.getitem
        self.setitem = frontend.setitem
        self.augmented = frontend.augmented
        self.operator = frontend.operator
        self.broadcast_to = frontend.broadcast_to
        self.method = frontend.method
        if not frontend.loop_rules:
            self.note_write = _no_write_rule
            self.check_scope = _no_scope_rule
        self.shape_only = shape_only
        self.trace = Trace(kernel_file=kernel_file, dialect=frontend.name)
        self.instrs = self.trace.instrs
        self.stack: list[LoopFrame] = []
        self.path: Path = ()
        self.scope: Path = ()
        self._loop_ids: dict[tuple, int] = {}
        self._next_uid = 0
        self._next_tensor = 0
        self.buffers: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self.plan = plan
        self._plan_tids = None if plan is None else {tid for entries in plan.at.values() for tid, _ in entries}
        self._released_upto = 0
        self.kernel_code = None          # code object of the kernel function (shared_hbm rule)
        self.identity = None             # SBUF identity tile for nl.matmul transposes
        self.outputs: list[Any] = []
        # core.tensor.Fresh of the instruction results that need a tensor record (all but those
        # assigned straight into a destination), by tensor id
        self.fresh: dict[int, Any] = {}
        self.declared_bytes = 0          # logical bytes of tensors declared at kernel level
        self.declared_budget: int | None = None
        self.state: dict[str, Any] = {}  # the front-end's own per-run bookkeeping

    # --- tensors -------------------------------------------------------------------------

    def new_tensor_id(self) -> int:
        self._next_tensor += 1
        return self._next_tensor

    def register(self, buf, info: TensorInfo) -> None:
        self.trace.tensors[info.id] = info
        if self._plan_tids is not None and info.id in self._plan_tids:
            self.buffers[info.id] = buf   # weakly: only blocks of live tensors need releasing

    def declare(self, nbytes: int) -> None:
        """Account a kernel-level tensor: without a release plan it lives until the end."""
        self.declared_bytes += nbytes
        if self.declared_budget is not None and self.declared_bytes > self.declared_budget:
            raise NeedsReleasePlan()

    def check_scope(self, buf) -> None:
        s = buf.scope
        if s and s is not self.scope and self.scope[:len(s)] != s:
            left = next(e for k, e in enumerate(s) if k >= len(self.scope) or self.scope[k] != e)
            if left[0] == IF_BODY:
                raise errors.ScopeError(
                    f"tensor '{buf.label}' created at line {buf.line} inside an if/else block is referenced outside "
                    "of its parent scope; create it before the if statement and assign in the blocks with t[...] =")
            raise errors.ScopeError(
                f"tensor '{buf.label}' created at line {buf.line} inside a loop body is referenced outside "
                f"of its parent scope (created in loop iteration {_fmt_path(buf.tpath)}, used in "
                f"{_fmt_path(self.path) or 'the kernel body'}); create it before the loop and assign with t[...] =")

    @contextlib.contextmanager
    def if_body(self) -> Iterator[None]:
        """An if/else body: as in neuronx-cc, a tensor created in it is not usable after it
        (each execution of a body is a scope of its own, like a loop iteration)."""
        saved = self.scope
        self._next_uid += 1
        self.scope = saved + ((IF_BODY, self._next_uid),)
        try:
            yield
        finally:
            self.scope = saved

    # --- instructions ----------------------------------------------------------------------

    def emit(self, kind: str, op: str, engines: tuple[str, ...], dtype: str, in_dtypes: tuple[str, ...],
             partitions: int, free: int, reads: tuple, writes: tuple, line: int, func: str = "",
             mm=None, dma=None, psum_inputs: int = 0, strided: bool = False) -> Instr:
        i = len(self.instrs)
        if self.plan is not None and self._released_upto < i:
            self._release(i)
        # the engine and dtype tuples repeat: the trace keeps one object per value
        engines = _TUPLES.setdefault(engines, engines)
        in_dtypes = _TUPLES.setdefault(in_dtypes, in_dtypes)
        ins = Instr(i, kind, op, engines, dtype, in_dtypes, partitions, free, reads, writes,
                    self.path, line, func, mm, dma, psum_inputs, strided)
        self.instrs.append(ins)
        return ins

    def _release(self, upto: int) -> None:
        """Drop blocks whose last access is an instruction before `upto`."""
        at = self.plan.at
        for i in range(self._released_upto, upto):
            for tid, key in at.get(i, ()):
                buf = self.buffers.get(tid)
                if buf is not None and buf.blocks is not None:
                    buf.blocks.pop(key, None)
        self._released_upto = upto

    def finish(self) -> None:
        """Complete the trace: tensor records of the instruction results that stayed tiles of
        their own (results assigned straight into a destination have none)."""
        if self.plan is not None:
            self._release(len(self.instrs) + 1)
        tensors = self.trace.tensors
        for f in self.fresh.values():
            tensors[f.meta[0]] = TensorInfo(*f.meta)
        ordered = sorted(tensors.items())
        tensors.clear()
        tensors.update(ordered)
        placed = self.state.get("placement")
        if placed is not None:
            placed.finish(self)   # the rules of a directly allocated kernel (core.placement)
        else:
            check_capacity(self.trace, self.capacity)   # what the compiler must place at once

    # --- loops ---------------------------------------------------------------------------

    def loop(self, kind: str, r: range, line: int, directives: tuple[str, ...] = ()) -> Iterator[LoopIndex]:
        """Iterate `r`, keeping the loop stack, paths and per-loop write records current.
        `directives`: the names of the loop's compiler directives (recorded in the trace)."""
        depth = len(self.stack)
        parent = self.stack[-1].id if self.stack else None
        key = (line, parent, r.start, r.stop, r.step, kind, directives)
        loop_id = self._loop_ids.get(key)
        if loop_id is None:
            loop_id = self._loop_ids[key] = len(self._loop_ids) + 1
            self.trace.loops[loop_id] = Loop(loop_id, kind, r.start, r.stop, r.step, parent, line)
            if directives:
                if self.trace.loop_directives is None:
                    self.trace.loop_directives = {}
                self.trace.loop_directives[loop_id] = directives
        self._next_uid += 1
        frame = LoopFrame(self._next_uid, loop_id, kind, r, depth, self.path, self.scope)
        self.stack.append(frame)
        try:
            for v in r:
                if len(self.stack) > depth + 1:   # an inner loop left by `break`/exception
                    del self.stack[depth + 1:]
                frame.value = v
                self.path = frame.path_prefix + ((loop_id, v),)
                self.scope = frame.scope_prefix + ((frame.uid, v),)
                idx = frame.index = LoopIndex(v)
                idx._loop = frame
                yield idx
        finally:
            del self.stack[depth:]
            self.path = frame.path_prefix
            self.scope = frame.scope_prefix

    # --- the affine_range write rule -------------------------------------------------------

    def note_write(self, buf, box: tuple[tuple[int, int], ...], exempt: frozenset = frozenset(),
                   view=None) -> None:
        """Record a plain (non-accumulating) write of `box` of `buf`; raise when another
        iteration of an enclosing affine loop (entered after `buf` was created) wrote an
        overlapping box. Writes are grouped by block, so iterations that write different
        blocks never need comparing; loops whose variable indexes a dimension of the
        destination directly (`t[i, ...]`) cannot conflict and are skipped."""
        depth = len(buf.tpath)   # the loops around its creation (its scope also counts if/else bodies)
        stack = self.stack
        if depth >= len(stack):
            return
        # ids of the destination's index values: a loop whose current variable is one of them
        # is pinned (the loop variable itself, not merely an equal value)
        pinned: set | tuple = ()
        if view is not None:
            par = view._srcpar
            if par is not None and par._whole:
                k = view._srckey
                pinned = set(map(id, k)) if type(k) is tuple else (id(k),)
        key = None
        for frame in stack[depth:]:
            if frame.kind != "affine" or id(frame.index) in pinned or (exempt and frame.uid in exempt):
                continue
            if key is None:
                nb = buf.nb
                key = (buf.id, box[:nb]) if nb else buf.id
                local = box[nb:] if nb else box
            writes = frame.writes
            v = frame.value
            seen = writes.get(key)
            if seen is None:
                writes[key] = (v, local)   # the common case: one write per block and iteration
                continue
            if type(seen) is tuple:
                it, other = seen
                seen = writes[key] = {it: [other, [other]]}
            if len(seen) > 1 or v not in seen:
                for it, (bb, boxes) in seen.items():
                    if it == v or not _overlap(bb, local):
                        continue
                    for other in boxes:
                        if _overlap(other, local):
                            full = box[:nb] + _intersect(other, local)
                            raise errors.OutputDependencyError(
                                f"iterations {it} and {v} of the affine_range loop at line "
                                f"{self.trace.loops[frame.id].line} both write {_fmt_box(full)} of tensor "
                                f"'{buf.label}' (shape {list(buf.shape)}); index the destination with the loop "
                                f"variable, or use nl.sequential_range")
            entry = seen.get(v)
            if entry is None:
                seen[v] = [local, [local]]
            else:
                entry[0] = _union(entry[0], local)
                entry[1].append(local)


# Engine and dtype tuples of the trace records, one object per value (traces hold many).
_TUPLES: dict[tuple[str, ...], tuple[str, ...]] = {}


def _overlap(a, b) -> bool:
    for (a0, a1), (b0, b1) in zip(a, b):
        if a0 >= b1 or b0 >= a1:
            return False
    return True


def _union(a, b):
    return tuple((min(a0, b0), max(a1, b1)) for (a0, a1), (b0, b1) in zip(a, b))


def _intersect(a, b):
    return tuple((max(a0, b0), min(a1, b1)) for (a0, a1), (b0, b1) in zip(a, b))


def _fmt_box(box) -> str:
    return "[" + ", ".join(f"{lo}" if hi == lo + 1 else f"{lo}:{hi}" for lo, hi in box) + "]"


def _fmt_path(path: Path) -> str:
    return ", ".join(f"loop {lid} = {v}" for lid, v in path)
