"""Loop iterators: `nl.affine_range`, `nl.sequential_range`, `nl.static_range`, and Python
`range` inside kernels (which NKI treats as a sequential loop).

All execute like Python `range` (the emulator runs kernels eagerly) but yield `LoopIndex`
values and keep the machine's loop stack, so the trace knows every instruction's loop path
and the `affine_range` write rule and tensor scopes can be checked.
"""

from __future__ import annotations

import builtins

from ..core.loops import LoopRange, loop_range
from ..core.runtime import current


def affine_range(*args, **kwargs) -> LoopRange:
    """Parallel loop: iterations must not depend on each other (associative reductions aside)."""
    return loop_range("affine", args, "nl.affine_range")


def sequential_range(*args, **kwargs) -> LoopRange:
    """Loop whose iterations may depend on earlier ones (loop-carried state)."""
    return loop_range("sequential", args, "nl.sequential_range")


def static_range(*args, **kwargs) -> LoopRange:
    """Loop fully unrolled by the compiler."""
    return loop_range("static", args, "nl.static_range")


def kernel_range(*args):
    """Python `range` as seen by kernel code: a sequential loop while a kernel runs."""
    if current() is None:
        return builtins.range(*args)
    return loop_range("range", args, "range")
