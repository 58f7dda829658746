"""Loop iterators: `nl.affine_range`, `nl.sequential_range`, `nl.static_range`, and Python
`range` inside kernels (which NKI treats as a sequential loop).

All execute like Python `range` (the emulator runs kernels eagerly) but yield `LoopIndex`
values and keep the machine's loop stack, so the trace knows every instruction's loop path
and the `affine_range` write rule and tensor scopes can be checked.
"""

from __future__ import annotations

import builtins

from .. import errors
from ..core.loops import LoopRange, loop_range
from ..core.runtime import current


class Directive:
    """A loop directive of `neuronxcc.nki.compiler` (`no_reorder()`), passed as `directives=`."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"nki.compiler.{self.name}()"


def no_reorder() -> Directive:
    """`nki.compiler.no_reorder()`: "an OperationOrderGuard to prevent operation reordering" of
    the loop's instructions (the performance model issues them in program order)."""
    return Directive("no_reorder")


def _directives(directives, api: str) -> tuple[str, ...]:
    if directives is None:
        return ()
    items = directives if isinstance(directives, (list, tuple)) else (directives,)
    for d in items:
        if not isinstance(d, Directive):
            raise errors.OperandTypeError(
                f"'directives' of {api} must be loop directives of nki.compiler (nki.compiler.no_reorder()), "
                f"got {d!r}")
    return tuple(dict.fromkeys(d.name for d in items))


def affine_range(*args, directives=None, **kwargs) -> LoopRange:
    """Parallel loop: iterations must not depend on each other (associative reductions aside)."""
    return loop_range("affine", args, "nl.affine_range", _directives(directives, "nl.affine_range"))


def sequential_range(*args, directives=None, **kwargs) -> LoopRange:
    """Loop whose iterations may depend on earlier ones (loop-carried state)."""
    return loop_range("sequential", args, "nl.sequential_range", _directives(directives, "nl.sequential_range"))


def static_range(*args, **kwargs) -> LoopRange:
    """Loop fully unrolled by the compiler."""
    return loop_range("static", args, "nl.static_range")


def kernel_range(*args):
    """Python `range` as seen by kernel code: a sequential loop while a kernel runs."""
    if current() is None:
        return builtins.range(*args)
    return loop_range("range", args, "range")
