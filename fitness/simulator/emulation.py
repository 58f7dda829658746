"""How an emulator object departs from the NKI documentation, for the construct table
(fitness.simulator.constructs): a mark the object carries, set where it is implemented."""

from __future__ import annotations

from typing import Callable, TypeVar

EXACT, APPROXIMATE, REFUSED, UNSUPPORTED = "exact", "approximate", "refused", "unsupported"
STATUSES = (EXACT, APPROXIMATE, REFUSED, UNSUPPORTED)
ATTRIBUTE = "__nki_emulation__"

T = TypeVar("T")


def emulation(status: str, note: str) -> Callable[[T], T]:
    """Mark an emulator object as `status` with `note`: how an approximate one differs, the
    message a refused one's use ends with, what an exact one refuses as the device does."""
    if status not in (EXACT, APPROXIMATE, REFUSED):
        raise ValueError(f"an emulation mark is exact, approximate or refused, not {status!r}")

    def mark(obj: T) -> T:
        setattr(obj, ATTRIBUTE, (status, note))
        return obj
    return mark
