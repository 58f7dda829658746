"""Loops kernels write with range-like iterators: executed eagerly like Python `range`, but
yielding `LoopIndex` values on the running machine's loop stack, so the trace knows every
instruction's loop path (and the front-end's loop rules can be checked). Which iterator
names a dialect has, and which loop kind each records, is the front-end's business.
"""

from __future__ import annotations

import builtins

from .. import errors
from .indexing import is_int
from .runtime import current


class LoopRange:
    """An iterable loop of one kind; behaves like a `range` for len(), indexing and reversed()."""

    __slots__ = ("kind", "r", "line", "directives")

    def __init__(self, kind: str, r: range, line: int, directives: tuple[str, ...] = ()):
        self.kind = kind
        self.r = r
        self.line = line
        self.directives = directives   # names of the loop's compiler directives ("no_reorder")

    def __iter__(self):
        m = current()
        if m is None:
            return iter(self.r)
        if self.directives:
            return m.loop(self.kind, self.r, self.line, self.directives)
        return m.loop(self.kind, self.r, self.line)

    def __reversed__(self):
        return iter(LoopRange(self.kind, self.r[::-1], self.line, self.directives))

    def __len__(self) -> int:
        return len(self.r)

    def __getitem__(self, i):
        return self.r[i]

    def __contains__(self, v) -> bool:
        return v in self.r

    def __repr__(self) -> str:
        return f"{self.kind}_range({self.r.start}, {self.r.stop}, {self.r.step})"


def loop_range(kind: str, args: tuple, api: str, directives: tuple[str, ...] = ()) -> LoopRange:
    """A loop of `kind` over `range(*args)` (integer bounds known when the kernel is traced),
    with the names of its compiler directives."""
    if not args or len(args) > 3:
        raise TypeError(f"{api} expected 1 to 3 integer arguments, got {len(args)}")
    for a in args:
        if not is_int(a):
            raise errors.OperandTypeError(
                f"{api} bounds must be Python integers known when the kernel is traced, got {type(a).__name__}")
    return LoopRange(kind, builtins.range(*(int(a) for a in args)), errors.kernel_location(1)[1], directives)
