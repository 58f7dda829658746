"""Loop iterators: `nl.affine_range`, `nl.sequential_range`, `nl.static_range`, and Python
`range` inside kernels (which NKI treats as a sequential loop).

All execute like Python `range` (the emulator runs kernels eagerly) but yield `LoopIndex`
values and keep the machine's loop stack, so the trace knows every instruction's loop path
and the `affine_range` write rule and tensor scopes can be checked.
"""

from __future__ import annotations

import builtins

from .. import errors
from ..core.indexing import is_int
from ..core.runtime import current


class LoopRange:
    """An iterable loop of one kind; behaves like a `range` for len(), indexing and reversed()."""

    __slots__ = ("kind", "r", "line")

    def __init__(self, kind: str, r: range, line: int):
        self.kind = kind
        self.r = r
        self.line = line

    def __iter__(self):
        m = current()
        if m is None:
            return iter(self.r)
        return m.loop(self.kind, self.r, self.line)

    def __reversed__(self):
        return iter(LoopRange(self.kind, self.r[::-1], self.line))

    def __len__(self) -> int:
        return len(self.r)

    def __getitem__(self, i):
        return self.r[i]

    def __contains__(self, v) -> bool:
        return v in self.r

    def __repr__(self) -> str:
        return f"{self.kind}_range({self.r.start}, {self.r.stop}, {self.r.step})"


def _range(kind: str, args: tuple, api: str) -> LoopRange:
    if not args or len(args) > 3:
        raise TypeError(f"{api} expected 1 to 3 integer arguments, got {len(args)}")
    for a in args:
        if not is_int(a):
            raise errors.OperandTypeError(
                f"{api} bounds must be Python integers known when the kernel is traced, got {type(a).__name__}")
    return LoopRange(kind, builtins.range(*(int(a) for a in args)), errors.kernel_location(1)[1])


def affine_range(*args, **kwargs) -> LoopRange:
    """Parallel loop: iterations must not depend on each other (associative reductions aside)."""
    return _range("affine", args, "nl.affine_range")


def sequential_range(*args, **kwargs) -> LoopRange:
    """Loop whose iterations may depend on earlier ones (loop-carried state)."""
    return _range("sequential", args, "nl.sequential_range")


def static_range(*args, **kwargs) -> LoopRange:
    """Loop fully unrolled by the compiler."""
    return _range("static", args, "nl.static_range")


def kernel_range(*args):
    """Python `range` as seen by kernel code: a sequential loop while a kernel runs."""
    if current() is None:
        return builtins.range(*args)
    return _range("range", args, "range")
